"""LazyIndex: an index opened on first use; renamed, deleted and closed by its path until then."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.errors import CorruptIndexError
from logkeeper.index.lazy_index import LazyIndex
from logkeeper.index.offset_index import OffsetIndex
from logkeeper.log.segment import LogSegment


def written(path: Path, entries: int = 3) -> Path:
    with OffsetIndex(path, 100, 4096) as index:
        for i in range(entries):
            index.append(100 + 10 * i, 64 * i)
    return path


def lazy(path: Path) -> LazyIndex[OffsetIndex]:
    return LazyIndex(path, lambda p: OffsetIndex(p, 100, 4096))


def test_opened_on_first_use_only(tmp_path: Path) -> None:
    index = lazy(written(tmp_path / "a.index"))
    assert not index.is_open
    assert index.get().lookup(115).position == 64
    assert index.is_open and index.get() is index.get()


def test_renamed_and_deleted_by_path_before_opening(tmp_path: Path) -> None:
    index = lazy(written(tmp_path / "a.index"))
    index.rename_to(tmp_path / "a.index.deleted")
    assert index.path == tmp_path / "a.index.deleted" and index.path.exists()
    assert not (tmp_path / "a.index").exists() and not index.is_open
    assert index.delete_if_exists() and not index.path.exists()
    assert not index.delete_if_exists()


def test_no_use_after_close(tmp_path: Path) -> None:
    """A closed segment's index must not be reopened (and pin its file) by a late reader."""
    path = written(tmp_path / "a.index")
    before = path.read_bytes()
    index = lazy(path)
    index.close(sync=True)
    assert path.read_bytes() == before  # never opened: nothing trimmed or written
    with pytest.raises(ValueError, match="closed"):
        index.get()


def test_sanity_checked_when_opened_unless_rebuilding(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x00" + b"\xff\xff\xff\xf0\x00\x00\x00\x40")  # back below base
    with pytest.raises(CorruptIndexError, match=r"a\.index"):
        lazy(path).get()
    rebuilt = lazy(path)
    rebuilt.get(checked=False).truncate()  # what recovery does before rebuilding it
    assert rebuilt.get().entries == 0
    rebuilt.close()


def test_a_failed_check_is_rebuilt_by_the_owner_and_checked_again(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(b"\xff\xff\xff\xf0\x00\x00\x00\x40")  # below the base
    calls: list[int] = []

    def rebuild(index: OffsetIndex) -> None:
        calls.append(index.entries)
        index.truncate()
        index.append(120, 64)

    index = LazyIndex(path, lambda p: OffsetIndex(p, 100, 4096), rebuild)
    assert index.get().lookup(125).position == 64 and calls == [1]
    index.close()

    def failing(index: OffsetIndex) -> None:
        raise OSError("disk gone")

    path.write_bytes(b"\xff\xff\xff\xf0\x00\x00\x00\x40")
    broken = LazyIndex(path, lambda p: OffsetIndex(p, 100, 4096), failing)
    with pytest.raises(OSError, match="disk gone"):
        broken.get()
    assert not broken.is_open  # unmapped; a later read tries again


def test_a_read_only_segment_does_not_rebuild_a_damaged_index(tmp_path: Path) -> None:
    """Nothing is written through a read-only segment (the Spark job's): the read fails naming
    the file."""
    with OffsetIndex(tmp_path / f"{100:020d}.index", 100, 4096) as index:
        index.append(105, 0)
    (tmp_path / f"{100:020d}.timeindex").write_bytes(b"")
    (tmp_path / f"{100:020d}.log").write_bytes(b"")
    (tmp_path / f"{100:020d}.index").write_bytes(b"\xff\xff\xff\xf0\x00\x00\x00\x40")
    seg = LogSegment(tmp_path, 100, writable=False, open_indexes=False)
    with pytest.raises(CorruptIndexError, match=f"{100:020d}.index"):
        seg.offset_index  # noqa: B018
    seg.close()
