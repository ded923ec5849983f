"""The shared tables of whole-file scans (log/scan_cache.py): a file is scanned once until it
changes, and a change is never answered from the old table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from logkeeper.log import scan_cache
from logkeeper.log.file_records import FileRecords
from logkeeper.records.builder import Record, build_batch


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    scan_cache.clear()
    yield
    scan_cache.clear()


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
    one = scan_cache._nbytes(files[0].scan())
    scan_cache.clear()
    monkeypatch.setattr(scan_cache, "BUDGET_BYTES", 2 * one)
    tables = [f.scan() for f in files]
    assert files[3].scan() is tables[3] and files[2].scan() is tables[2]
    assert files[0].scan() is not tables[0]  # dropped, least recently used
    assert np.array_equal(files[0].scan().position, tables[0].position)
    for f in files:
        f.close()
