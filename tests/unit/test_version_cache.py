"""What the readers of one version of a file share (log/version_cache.py): a file is scanned and
mapped once until it changes, a change is never answered from the old table or mapping, and a
closed, truncated or deleted file leaves no mapping behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from logkeeper.log import version_cache
from logkeeper.log.file_records import FileRecords
from logkeeper.records.builder import Record, build_batch


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    version_cache.clear()
    yield
    version_cache.clear()


def batch(offset: int, value: bytes = b"v") -> bytes:
    return build_batch([Record(offset, 1, b"k", value)])


def test_a_file_is_scanned_once_until_it_changes(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0))
    first = f.scan()
    assert f.scan() is first and first.count == 1
    with pytest.raises(ValueError, match="read-only"):
        first.position[0] = 5  # shared: nobody may change it
    f.append(batch(1))
    second = f.scan()
    assert second is not first and second.base_offset.tolist() == [0, 1]
    assert f.scan(second.position[1]).count == 1  # a scan from a position is not shared
    f.close()


def test_the_same_size_after_a_truncation_is_not_the_same_file(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0, b"a"))
    f.append(batch(1, b"b"))
    before = f.scan()
    f.truncate_to(int(before.position[1]))
    f.append(batch(7, b"c"))  # the same size as before, other bytes
    assert f.size_in_bytes == int(before.position[1] + before.size[1])
    assert f.scan().base_offset.tolist() == [0, 7]
    f.close()


def test_two_opens_of_a_file_do_not_share_a_version(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0))
    table = f.scan()
    f.close()
    g = FileRecords(tmp_path / "0.log")
    assert g.scan() is not table and g.scan().count == 1
    g.close()


def test_the_tables_are_bounded_by_their_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [FileRecords(tmp_path / f"{i}.log") for i in range(4)]
    for f in files:
        f.append(batch(0))
    one = version_cache.table_bytes(files[0].scan())
    version_cache.clear()
    monkeypatch.setattr(version_cache.tables, "budget_bytes", 2 * one)
    tables = [f.scan() for f in files]
    assert files[3].scan() is tables[3] and files[2].scan() is tables[2]
    assert files[0].scan() is not tables[0]  # dropped, least recently used
    assert np.array_equal(files[0].scan().position, tables[0].position)
    for f in files:
        f.close()


def test_readers_of_one_version_share_one_mapping(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0))
    with f.mapped() as a, f.mapped() as b:
        assert a is b and bytes(a) == f.read(0, f.size_in_bytes)
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 1
    f.append(batch(1))
    with f.mapped() as c:
        assert c is not a and c.shape[0] == f.size_in_bytes  # the new bytes, in a new mapping
    assert version_cache.mappings.held_bytes == f.size_in_bytes  # the old one was dropped
    f.close()


def test_a_truncated_file_is_mapped_anew(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0, b"a"))
    f.append(batch(1, b"b"))
    with f.mapped() as before:
        first_size = int(f.scan().size[0])
    f.truncate_to(first_size)
    assert version_cache.mappings.held_bytes == 0  # its tail is gone: nobody may read it
    with f.mapped() as after:
        assert after.shape[0] == first_size and bytes(after) == bytes(before[:first_size])
    f.close()


def test_closing_or_deleting_a_file_releases_its_mapping(tmp_path: Path) -> None:
    kept, deleted = FileRecords(tmp_path / "0.log"), FileRecords(tmp_path / "1.log")
    for f in (kept, deleted):
        f.append(batch(0))
        with f.mapped():
            pass
    assert version_cache.mappings.held_bytes == 2 * kept.size_in_bytes
    assert deleted.delete_if_exists()
    kept.close()
    assert version_cache.mappings.held_bytes == 0


def test_the_mappings_are_bounded_by_their_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [FileRecords(tmp_path / f"{i}.log") for i in range(3)]
    for f in files:
        f.append(batch(0))
    monkeypatch.setattr(version_cache.mappings, "budget_bytes", 2 * files[0].size_in_bytes)
    maps = []
    for f in files:
        with f.mapped() as m:
            maps.append(m)
    assert version_cache.mappings.held_bytes == 2 * files[0].size_in_bytes
    with files[0].mapped() as again:
        assert again is not maps[0]  # dropped, least recently used: mapped anew
        assert bytes(again) == bytes(maps[0])  # the dropped one stays readable while held
    for f in files:
        f.close()


def test_the_mappings_are_bounded_in_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [FileRecords(tmp_path / f"{i}.log") for i in range(3)]
    monkeypatch.setattr(version_cache.mappings, "max_entries", 2)
    for f in files:
        f.append(batch(0))
        with f.mapped():
            pass
    assert version_cache.mappings.held_bytes == 2 * files[0].size_in_bytes  # each holds a descriptor
    for f in files:
        f.close()


def test_a_renamed_file_is_mapped_anew(tmp_path: Path) -> None:
    f = FileRecords(tmp_path / "0.log")
    f.append(batch(0))
    with f.mapped():
        pass
    f.rename_to(tmp_path / "0.log.deleted")  # a replaced segment leaves the log
    assert version_cache.mappings.held_bytes == 0
    f.close()
