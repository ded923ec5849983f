"""Unit tests of logkeeper.index.OffsetIndex, by behaviour after Kafka's OffsetIndexTest."""

from __future__ import annotations

import bisect
import io
import random
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeeper.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from logkeeper.index import OffsetIndex, OffsetPosition
from tests.helpers import fresh_index, index_in

BASE_OFFSET = 45
MAX_ENTRIES = 30


@pytest.fixture
def index(tmp_path: Path) -> Iterator[OffsetIndex]:
    yield from index_in(OffsetIndex, tmp_path / "00000000000000000045.index", BASE_OFFSET, MAX_ENTRIES)


def increasing(start: int, count: int, rng: random.Random) -> list[int]:
    """``count`` strictly increasing ints above ``start``, with gaps of 1..15."""
    out, last = [], start
    for _ in range(count):
        last += rng.randint(1, 15)
        out.append(last)
    return out


def brute_force_lookup(pairs: list[tuple[int, int]], base: int, target: int) -> OffsetPosition:
    offsets = [o for o, _ in pairs]
    i = bisect.bisect_right(offsets, target) - 1
    return OffsetPosition(*pairs[i]) if i >= 0 else OffsetPosition(base, 0)


# ------------------------------------------------------------------------------------------------
# Creation, preallocation, on-disk bytes
# ------------------------------------------------------------------------------------------------
def test_new_file_is_preallocated_rounded_down(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    idx = OffsetIndex(path, 0, 30 * 8 + 5)
    assert path.stat().st_size == 240
    assert (idx.entries, idx.max_entries, idx.length, idx.size_in_bytes) == (0, 30, 240, 0)
    assert idx.last_offset == 0
    assert path.read_bytes() == bytes(240)
    idx.close()


def test_max_index_size_below_entry_size_is_rejected_without_leaving_a_file(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    with pytest.raises(ValueError, match="max index size"):
        OffsetIndex(path, 0, 7)
    assert not path.exists()


def test_on_disk_bytes_after_trim(index: OffsetIndex) -> None:
    pairs = [(46, 0), (50, 4096), (60, 8200), (45 + 2**31 - 1, 2**31 - 1)]
    for offset, position in pairs:
        index.append(offset, position)
    index.flush()
    raw = index.path.read_bytes()
    assert len(raw) == MAX_ENTRIES * 8  # still preallocated
    index.close()
    expected = b"".join(struct.pack(">ii", o - BASE_OFFSET, p) for o, p in pairs)
    assert expected[:8] == b"\x00\x00\x00\x01\x00\x00\x00\x00"
    assert index.path.read_bytes() == expected


# ------------------------------------------------------------------------------------------------
# Lookup (randomLookupTest, lookupExtremeCases, property test)
# ------------------------------------------------------------------------------------------------
def test_random_lookup(index: OffsetIndex) -> None:
    rng = random.Random(1234)
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0)  # empty index
    offsets = increasing(BASE_OFFSET + 1, index.max_entries, rng)
    positions = increasing(0, index.max_entries, rng)
    pairs = list(zip(offsets, positions))
    for offset, position in pairs:
        index.append(offset, position)
    for offset, position in pairs:
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in rng.sample(range(BASE_OFFSET, offsets[-1]), 30):
        assert index.lookup(target) == brute_force_lookup(pairs, BASE_OFFSET, target)


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(-(2**70)) == OffsetPosition(BASE_OFFSET, 0)
    last = OffsetPosition(BASE_OFFSET + index.max_entries, index.max_entries - 1)
    assert index.lookup(BASE_OFFSET + index.max_entries) == last
    assert index.lookup(2**70) == last


def test_lookup_crosses_warm_section(tmp_path: Path) -> None:
    # 5000 entries > Kafka's warm section of 1024 entries: both search branches are used.
    idx = OffsetIndex(tmp_path / "w.index", 1000, 5000 * 8)
    pairs = [(1000 + 3 * i, 10 * i) for i in range(5000)]
    for offset, position in pairs:
        idx.append(offset, position)
    for target in [999, 1000, 1001, 1002, 1003, 3 * 3975 + 1000, 3 * 3976 + 1001, 20_000, 99_999]:
        assert idx.lookup(target) == brute_force_lookup(pairs, 1000, target)
    idx.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gaps=st.lists(st.integers(1, 2**20), max_size=60),
    targets=st.lists(st.integers(-10, 2**26), min_size=1, max_size=20),
    warm=st.integers(0, 8),
)
def test_lookup_matches_brute_force_model(
    tmp_path: Path, gaps: list[int], targets: list[int], warm: int
) -> None:
    base = 7
    idx = fresh_index(OffsetIndex, tmp_path / "prop.index", base, 64, warm)
    pairs, offset = [], base - 1
    for i, gap in enumerate(gaps):
        offset += gap
        pairs.append((offset, i * 100))
        idx.append(offset, i * 100)
    probes = targets + [o for o, _ in pairs] + [o - 1 for o, _ in pairs] + [o + 1 for o, _ in pairs]
    for target in probes:
        assert idx.lookup(target) == brute_force_lookup(pairs, base, target)
    for n, pair in enumerate(pairs):
        assert idx.entry(n) == pair
    for target in targets:  # upper bound: an entry at/after target, at most one past the smallest
        fetched = idx.fetch_upper_bound_offset(OffsetPosition(base, 0), target)
        positions = [p for _, p in pairs]
        j = bisect.bisect_left(positions, target)
        if fetched is None:
            assert j == len(pairs) or (j == len(pairs) - 1 and positions[j] == target)
        else:
            assert fetched.position >= target
            assert positions.index(fetched.position) in (j, j + 1)
    idx.close()


# ------------------------------------------------------------------------------------------------
# entry(), append rules
# ------------------------------------------------------------------------------------------------
def test_entry(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(BASE_OFFSET + i, i)


def test_entry_overflow(index: OffsetIndex) -> None:
    with pytest.raises(IndexError):
        index.entry(0)
    index.append(BASE_OFFSET, 0)
    with pytest.raises(IndexError):
        index.entry(1)
    with pytest.raises(IndexError):
        index.entry(-1)


def test_append_too_many(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(BASE_OFFSET + index.max_entries + 1, 1)


def test_append_out_of_order(index: OffsetIndex) -> None:
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):  # equal is not larger
        index.append(51, 1)
    assert index.entries == 1


def test_append_offset_overflow_names_file(index: OffsetIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError, match=str(index.path)):
        index.append(BASE_OFFSET + 2**31, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE_OFFSET - 1, 0)
    with pytest.raises(ValueError, match="position"):
        index.append(BASE_OFFSET, -1)
    assert index.entries == 0


def test_fetch_upper_bound_offset(index: OffsetIndex) -> None:
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first, 5) is None
    for entry in (first, second, third, fourth):
        index.append(*entry)
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


# ------------------------------------------------------------------------------------------------
# Reopen, read-only mode
# ------------------------------------------------------------------------------------------------
def test_reopen(index: OffsetIndex) -> None:
    first, second = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(*first)
    index.append(*second)
    index.close()
    reopened = OffsetIndex(index.path, BASE_OFFSET)
    assert reopened.lookup(first.offset) == first
    assert reopened.lookup(second.offset) == second
    assert reopened.last_offset == second.offset
    assert (reopened.entries, reopened.max_entries) == (2, 2)  # trimmed file is exactly full
    with pytest.raises(IndexFullError):
        reopened.append(53, 1)
    assert reopened.resize(10 * 8)  # grows back: appends work again
    reopened.append(53, 2)
    assert reopened.lookup(100) == OffsetPosition(53, 2)
    reopened.close()


def test_reopen_untrimmed_file_counts_every_slot(index: OffsetIndex) -> None:
    # After a crash the preallocated zeros count as entries (Kafka assumes an existing file valid).
    index.append(50, 10)
    index.flush()
    index.close_handler()
    reopened = OffsetIndex(index.path, BASE_OFFSET)
    assert reopened.entries == MAX_ENTRIES
    assert reopened.entry(1) == OffsetPosition(BASE_OFFSET, 0)
    assert reopened.last_offset == BASE_OFFSET
    reopened.sanity_check()  # last offset == base offset passes, as in Kafka
    reopened.close_handler()


def test_read_only_never_changes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ro.index"
    content = struct.pack(">iiii", 1, 0, 2, 100) + b"\x00\x00\x00"  # 19 bytes: not a multiple of 8
    path.write_bytes(content)
    idx = OffsetIndex(path, 10, writable=False)
    assert (idx.entries, idx.length, idx.last_offset) == (2, 19, 12)
    assert idx.lookup(11) == OffsetPosition(11, 0)
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.sanity_check()
    with pytest.raises(io.UnsupportedOperation):
        idx.append(13, 200)
    with pytest.raises(io.UnsupportedOperation):
        idx.resize(800)
    with pytest.raises(io.UnsupportedOperation):
        idx.trim_to_valid_size()
    idx.truncate_to(12)  # in memory only
    assert idx.entries == 1
    idx.flush()
    idx.close()
    assert path.read_bytes() == content


def test_read_only_missing_file_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert not (tmp_path / "missing.index").exists()


def test_empty_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.index"
    path.touch()
    idx = OffsetIndex(path, 0)
    assert (idx.entries, idx.max_entries, idx.length) == (0, 0, 0)
    assert idx.is_full()
    assert idx.lookup(5) == OffsetPosition(0, 0)
    with pytest.raises(IndexFullError):
        idx.append(1, 0)
    idx.reset()
    assert idx.length == 10 * 1024 * 1024
    idx.append(1, 0)
    idx.close()
    assert path.read_bytes() == struct.pack(">ii", 1, 0)


# ------------------------------------------------------------------------------------------------
# Truncation
# ------------------------------------------------------------------------------------------------
def test_truncate(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "t.index", 0, 10 * 8) as idx:
        idx.truncate()
        for i in range(1, 10):
            idx.append(i, i)

        idx.truncate_to(12)  # past the end: no effect
        assert idx.lookup(10) == OffsetPosition(9, 9)
        assert idx.last_offset == 9

        idx.append(10, 10)
        idx.truncate_to(10)  # exact last entry goes
        assert idx.lookup(10) == OffsetPosition(9, 9)
        assert idx.last_offset == 9
        idx.append(10, 10)

        idx.truncate_to(9)
        assert idx.lookup(10) == OffsetPosition(8, 8)
        assert idx.last_offset == 8
        idx.append(9, 9)

        idx.truncate_to(5)
        assert idx.lookup(10) == OffsetPosition(4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)

        idx.truncate()
        assert idx.entries == 0
        assert idx.last_offset == 0


def test_truncate_to_between_entries(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "t.index", 100, 10 * 8) as idx:
        for offset in (100, 110, 120, 130):
            idx.append(offset, offset)
        idx.truncate_to(125)  # no exact entry: keep everything below
        assert (idx.entries, idx.last_offset) == (3, 120)
        idx.truncate_to(50)  # below every entry: all go
        assert (idx.entries, idx.last_offset) == (0, 100)
    assert idx.path.stat().st_size == 0


# ------------------------------------------------------------------------------------------------
# Unmap, sanity checks, resize and trim, file operations
# ------------------------------------------------------------------------------------------------
def test_force_unmap(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "u.index", 0, 10 * 8)
    idx.close_handler()
    idx.close_handler()  # safe to repeat
    with pytest.raises(ValueError, match="closed"):
        idx.lookup(1)
    with pytest.raises(ValueError, match="closed"):
        idx.append(1, 1)
    with pytest.raises(ValueError, match="closed"):
        idx.close()
    assert idx.delete_if_exists()
    assert not idx.delete_if_exists()


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "s.index", 20, 10 * 8) as idx:
        idx.append(20, 0)
        idx.sanity_check()


def test_sanity_last_offset_below_base_offset(tmp_path: Path) -> None:
    path = tmp_path / "s.index"
    path.write_bytes(struct.pack(">iiii", 0, 0, -1, 50))  # relative offset -1 on disk
    idx = OffsetIndex(path, 20)
    assert idx.last_offset == 19
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.sanity_check()
    idx.close_handler()


def test_resize_and_trim(index: OffsetIndex) -> None:
    for i in range(5):
        index.append(BASE_OFFSET + i, i * 10)
    assert not index.resize(MAX_ENTRIES * 8 + 3)  # rounds down to the current size: unchanged
    assert index.resize(10 * 8 + 7)
    assert (index.length, index.max_entries, index.entries) == (80, 10, 5)
    assert index.path.stat().st_size == 80
    index.append(BASE_OFFSET + 5, 50)  # position kept: appends continue after the last entry
    with pytest.raises(ValueError, match="cannot resize"):
        index.resize(5 * 8)
    assert index.resize(100 * 8)
    assert index.entry(5) == OffsetPosition(BASE_OFFSET + 5, 50)
    index.trim_to_valid_size()
    assert (index.length, index.max_entries, index.size_in_bytes) == (48, 6, 48)
    assert index.is_full()
    assert index.path.stat().st_size == 48


def test_rename_update_parent_dir_and_delete(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 0, 10 * 8)
    idx.append(3, 30)
    idx.rename_to(tmp_path / "a.index.deleted")
    assert idx.path == tmp_path / "a.index.deleted"
    assert not (tmp_path / "a.index").exists()
    idx.trim_to_valid_size()  # operates on the renamed file
    assert (tmp_path / "a.index.deleted").stat().st_size == 8
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "a.index.deleted").rename(moved / "a.index.deleted")
    idx.update_parent_dir(moved)
    assert idx.path == moved / "a.index.deleted"
    assert idx.resize(16)
    assert idx.lookup(3) == OffsetPosition(3, 30)
    assert idx.delete_if_exists()
    assert not idx.path.exists()


def test_concurrent_lookups_during_appends_and_resizes(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "c.index", 0, 4000 * 8)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                found = idx.lookup(10**9)
                assert found.position == found.offset * 2
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(3000):
        idx.append(i + 1, 2 * (i + 1))
        if i % 500 == 0:
            idx.resize(4000 * 8 - 8 * (i % 3))
    done.set()
    for t in readers:
        t.join()
    assert not errors
    assert idx.lookup(10**9) == OffsetPosition(3000, 6000)
    idx.close()


def test_bulk_appends_after_single_ones_are_read_through_the_map_and_kept(index: OffsetIndex, tmp_path: Path) -> None:
    # append_many writes the file beside the map (index/abstract_index.py): the map must read
    # those entries at once, and flush and close must keep them like mapped stores
    index.append(BASE_OFFSET + 1, 10)
    index.append_many(np.array([BASE_OFFSET + 3, BASE_OFFSET + 7], dtype=np.int64),
                      np.array([20, 35], dtype=np.int64))
    index.append(BASE_OFFSET + 9, 50)
    assert [index.entry(i) for i in range(index.entries)] == [
        OffsetPosition(BASE_OFFSET + 1, 10), OffsetPosition(BASE_OFFSET + 3, 20),
        OffsetPosition(BASE_OFFSET + 7, 35), OffsetPosition(BASE_OFFSET + 9, 50)]
    assert index.lookup(BASE_OFFSET + 8) == OffsetPosition(BASE_OFFSET + 7, 35)
    index.flush()
    index.close()
    raw = (tmp_path / "00000000000000000045.index").read_bytes()
    assert raw == struct.pack(">iiiiiiii", 1, 10, 3, 20, 7, 35, 9, 50)
