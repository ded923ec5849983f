"""LazyIndex: an index opened on first use; renamed, deleted and closed by its path until then."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.errors import CorruptIndexError
from logkeeper.index.lazy_index import LazyIndex
from logkeeper.index.offset_index import OffsetIndex


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
