"""Unit tests of logkeeper.index.TimeIndex, by behaviour after Kafka's TimeIndexTest."""

from __future__ import annotations

import bisect
import io
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeeper.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from logkeeper.index import TimeIndex, TimestampOffset
from tests.helpers import fresh_index, index_in

MAX_ENTRIES = 30
BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path: Path) -> Iterator[TimeIndex]:
    yield from index_in(TimeIndex, tmp_path / "00000000000000000045.timeindex", BASE_OFFSET, MAX_ENTRIES)


def append_entries(idx: TimeIndex, count: int) -> None:
    """Entries (10*i, base + 10*i) for i in 1..count."""
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def brute_force_lookup(pairs: list[tuple[int, int]], base: int, target: int) -> TimestampOffset:
    timestamps = [t for t, _ in pairs]
    i = bisect.bisect_right(timestamps, target) - 1
    return TimestampOffset(*pairs[i]) if i >= 0 else TimestampOffset(-1, base)


# ------------------------------------------------------------------------------------------------
# Creation and on-disk bytes
# ------------------------------------------------------------------------------------------------
def test_new_file_is_preallocated_rounded_down(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, 0, 30 * 12 + 11)
    assert path.stat().st_size == 360
    assert (idx.entries, idx.max_entries, idx.length) == (0, 30, 360)
    idx.close()
    assert path.stat().st_size == 0


def test_on_disk_bytes_after_close(index: TimeIndex) -> None:
    entries = [(1_700_000_000_000, 45), (1_700_000_000_500, 47), (2**63 - 1, 45 + 2**31 - 1)]
    for timestamp, offset in entries:
        index.maybe_append(timestamp, offset)
    index.close()
    expected = b"".join(struct.pack(">qi", t, o - BASE_OFFSET) for t, o in entries)
    assert len(expected) == 36
    assert expected[8:12] == b"\x00\x00\x00\x00"
    assert index.path.read_bytes() == expected
    reopened = TimeIndex(index.path, BASE_OFFSET, writable=False)
    assert [reopened.entry(i) for i in range(3)] == entries
    assert reopened.last_entry == entries[-1]
    reopened.close()


# ------------------------------------------------------------------------------------------------
# Lookup, entry
# ------------------------------------------------------------------------------------------------
def test_lookup(index: TimeIndex) -> None:
    assert index.lookup(100) == TimestampOffset(-1, BASE_OFFSET)  # empty
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, BASE_OFFSET)  # before the first entry
    assert index.lookup(25) == TimestampOffset(20, 65)  # between two entries
    assert index.lookup(30) == TimestampOffset(30, 75)  # exact
    assert index.lookup(10**6) == TimestampOffset(290, 335)  # past the last


def test_lookup_crosses_warm_section(tmp_path: Path) -> None:
    # 3000 entries > Kafka's warm section of 682 time entries: both search branches are used.
    idx = TimeIndex(tmp_path / "w.timeindex", 0, 3001 * 12)
    pairs = [(1000 + 7 * i, 2 * i) for i in range(3000)]
    for timestamp, offset in pairs:
        idx.maybe_append(timestamp, offset)
    for target in [0, 999, 1000, 1006, 1007, 1000 + 7 * 2317, 1000 + 7 * 2318 - 1, 30_000, 10**12]:
        assert idx.lookup(target) == brute_force_lookup(pairs, 0, target)
    idx.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.integers(1, 2**40), st.integers(0, 5)), max_size=60),
    targets=st.lists(st.integers(-(2**41), 2**46), min_size=1, max_size=20),
    warm=st.integers(0, 8),
)
def test_lookup_matches_brute_force_model(
    tmp_path: Path, steps: list[tuple[int, int]], targets: list[int], warm: int
) -> None:
    base = 1000
    idx = fresh_index(TimeIndex, tmp_path / "prop.timeindex", base, 64, warm)
    pairs: list[tuple[int, int]] = []
    timestamp, offset = -1, base
    for ts_gap, offset_gap in steps:  # offsets may repeat, timestamps strictly grow
        timestamp += ts_gap
        offset += offset_gap
        pairs.append((timestamp, offset))
        idx.maybe_append(timestamp, offset)
    assert idx.entries == len(pairs)
    probes = targets + [t for t, _ in pairs] + [t - 1 for t, _ in pairs] + [t + 1 for t, _ in pairs]
    for target in probes:
        assert idx.lookup(target) == brute_force_lookup(pairs, base, target)
    # truncate_to removes exactly the entries whose offset >= the given one, even among repeats
    cut = pairs[len(pairs) // 2][1] if pairs else base
    idx.truncate_to(cut)
    kept = [p for p in pairs if p[1] < cut]
    assert [idx.entry(i) for i in range(idx.entries)] == kept
    assert idx.last_entry == (kept[-1] if kept else TimestampOffset(-1, base))
    idx.close()


def test_entry(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    assert index.entry(0) == TimestampOffset(10, 55)
    assert index.entry(1) == TimestampOffset(20, 65)
    assert index.entry(2) == TimestampOffset(30, 75)
    assert index.entry(3) == TimestampOffset(40, 85)


def test_entry_overflow(index: TimeIndex) -> None:
    with pytest.raises(IndexError):
        index.entry(0)


# ------------------------------------------------------------------------------------------------
# Truncation
# ------------------------------------------------------------------------------------------------
def test_truncate(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)

    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)  # the first entry's offset: everything goes
    assert index.entries == 0


def test_truncate_to_keeps_smaller_offsets(index: TimeIndex) -> None:
    append_entries(index, 5)  # offsets 55, 65, 75, 85, 95
    index.truncate_to(1000)
    assert index.entries == 5
    index.truncate_to(80)
    assert (index.entries, index.last_entry) == (3, TimestampOffset(30, 75))
    index.truncate_to(75)
    assert (index.entries, index.last_entry) == (2, TimestampOffset(20, 65))
    index.maybe_append(25, 70)  # appends continue from the cut
    assert index.lookup(26) == TimestampOffset(25, 70)


def test_truncate_to_removes_every_entry_with_a_repeated_offset(index: TimeIndex) -> None:
    for timestamp, offset in [(10, 50), (20, 60), (30, 60), (40, 60), (50, 70)]:
        index.maybe_append(timestamp, offset)
    index.truncate_to(60)
    assert (index.entries, index.last_entry) == (1, TimestampOffset(10, 50))


# ------------------------------------------------------------------------------------------------
# Append rules, full check, last entry
# ------------------------------------------------------------------------------------------------
def test_append(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError):  # the last slot is reserved
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries == MAX_ENTRIES
    assert index.last_entry == TimestampOffset(10000, 1000)
    with pytest.raises(IndexFullError):  # no slot at all is left now
        index.maybe_append(10001, 1001, skip_full_check=True)


def test_append_ignores_same_or_missing_timestamp(index: TimeIndex) -> None:
    index.maybe_append(-1, BASE_OFFSET)  # NO_TIMESTAMP on an empty index: ignored
    assert index.entries == 0
    index.maybe_append(100, 50)
    index.maybe_append(100, 50)  # the same entry again (segment roll / close): ignored
    index.maybe_append(100, 55)  # same timestamp, later offset: ignored
    assert index.entries == 1
    index.maybe_append(101, 55)  # same offset, later timestamp: appended
    assert index.entries == 2


def test_append_rejects_going_backwards(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(200, 49)
    with pytest.raises(ValueError, match="timestamp 99"):
        index.maybe_append(99, 60)
    assert index.entries == 1


def test_append_offset_overflow_names_file(index: TimeIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError, match=str(index.path)):
        index.maybe_append(1, BASE_OFFSET + 2**31)
    with pytest.raises(ValueError, match="int64"):
        index.maybe_append(2**63, BASE_OFFSET)
    assert index.entries == 0


def test_is_full(index: TimeIndex) -> None:
    assert not index.is_full()
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full()
    index.maybe_append((MAX_ENTRIES - 1) * 10, (MAX_ENTRIES - 1) * 10 + BASE_OFFSET)
    assert index.is_full()


def test_last_entry(index: TimeIndex) -> None:
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)
    index.maybe_append(1, 1 + BASE_OFFSET)
    assert index.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_read_only_rejects_appends(index: TimeIndex) -> None:
    append_entries(index, 3)
    index.close()
    before = index.path.read_bytes()
    ro = TimeIndex(index.path, BASE_OFFSET, writable=False)
    with pytest.raises(io.UnsupportedOperation):
        ro.maybe_append(1000, 1000, skip_full_check=True)
    assert ro.lookup(25) == TimestampOffset(20, 65)
    ro.close()
    assert index.path.read_bytes() == before


# ------------------------------------------------------------------------------------------------
# Sanity checks (Kafka's three corruptions, made on disk) and resize
# ------------------------------------------------------------------------------------------------
def test_sanity_check_passes_on_good_index(index: TimeIndex) -> None:
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    index.close()
    reopened = TimeIndex(index.path, BASE_OFFSET, MAX_ENTRIES * 12)
    reopened.sanity_check()
    reopened.close()


def _corrupt(path: Path, data: bytes, match: str) -> None:
    path.write_bytes(data)
    idx = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    with pytest.raises(CorruptIndexError, match=match) as info:
        idx.sanity_check()
    assert str(path) in str(info.value)
    idx.close_handler()


def test_sanity_check_last_timestamp_below_first(tmp_path: Path) -> None:
    data = struct.pack(">qiqi", 10, 10, 9, 20)
    _corrupt(tmp_path / "ts.timeindex", data, "last timestamp 9")


def test_sanity_check_last_offset_below_base_offset(tmp_path: Path) -> None:
    data = struct.pack(">qiqi", 10, 0, 20, -1)
    _corrupt(tmp_path / "off.timeindex", data, f"last offset {BASE_OFFSET - 1}")


def test_sanity_check_length_not_multiple_of_entry_size(tmp_path: Path) -> None:
    data = struct.pack(">qiqi", 10, 0, 20, 5)[:-1]
    _corrupt(tmp_path / "len.timeindex", data, "length 23")


def test_sanity_check_untrimmed_file_after_crash(index: TimeIndex) -> None:
    append_entries(index, 3)
    index.flush()
    index.close_handler()
    reopened = TimeIndex(index.path, BASE_OFFSET, MAX_ENTRIES * 12)
    assert reopened.entries == MAX_ENTRIES
    assert reopened.last_entry == TimestampOffset(0, BASE_OFFSET)  # a zero slot
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.close_handler()


def test_resize(index: TimeIndex) -> None:
    assert not index.resize(MAX_ENTRIES * 12)
    assert index.resize(MAX_ENTRIES // 2 * 12)
    assert index.max_entries == MAX_ENTRIES // 2
    assert index.resize(MAX_ENTRIES * 2 * 12)
    assert (index.max_entries, index.path.stat().st_size) == (MAX_ENTRIES * 2, MAX_ENTRIES * 2 * 12)
    append_entries(index, 4)
    index.trim_to_valid_size()
    assert (index.length, index.max_entries, index.entries) == (48, 4, 4)
    assert index.last_entry == TimestampOffset(40, 85)
    assert index.is_full()
    index.reset()
    assert (index.entries, index.length) == (0, MAX_ENTRIES * 12)
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)


def test_entry_size() -> None:
    assert TimeIndex.entry_size == 12
