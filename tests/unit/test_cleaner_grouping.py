"""Kafka's LogCleanerTest scenarios for how a round is planned: grouping the dirty segments into
cleaned ones (by log size, index size and the int32 offset span of a segment) and building the
offset map of a dirty range (whole, sparse, and partial when the map fills)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.stats import CleanerStats
from tests.cleaner_logs import (
    INT_MAX,
    Clock,
    append_kvs,
    append_with_offsets,
    ensure_valid_segments,
    ltc,
    make_cleaner,
    make_log,
    record,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_segment_grouping(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=300, index_interval_bytes=1)
    cleaner = make_cleaner(clock)
    while len(log.segments) < 10:
        append_kvs(log, [(b"hello", b"hello")])
    segs = log.segments.values()

    def order_ok(groups: list[list[object]]) -> bool:
        offsets = [s.base_offset for g in groups for s in g]  # type: ignore[attr-defined]
        return offsets == sorted(offsets)

    groups = cleaner.group_segments_by_size(segs, INT_MAX, INT_MAX, log.log_end_offset)
    assert len(groups) == 1 and len(groups[0]) == len(segs)
    assert order_ok(groups)  # type: ignore[arg-type]
    groups = cleaner.group_segments_by_size(segs, 1, INT_MAX, log.log_end_offset)
    assert len(groups) == len(segs) and all(len(g) == 1 for g in groups)
    groups = cleaner.group_segments_by_size(segs, INT_MAX, 1, log.log_end_offset)
    assert len(groups) == len(segs) and all(len(g) == 1 for g in groups)
    group_size = 3
    log_size = sum(s.size_in_bytes for s in segs[:group_size]) + 1
    groups = cleaner.group_segments_by_size(segs, log_size, INT_MAX, log.log_end_offset)
    assert order_ok(groups)  # type: ignore[arg-type]
    assert all(len(g) == group_size for g in groups[:-1])
    index_size = sum(s.offset_index.size_in_bytes for s in segs[:group_size]) + 1
    groups = cleaner.group_segments_by_size(segs, INT_MAX, index_size, log.log_end_offset)
    assert order_ok(groups)  # type: ignore[arg-type]
    assert all(len(g) == group_size for g in groups[:-1])


def test_segment_grouping_with_sparse_offsets(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=1)
    cleaner = make_cleaner(clock)
    while len(log.segments) == 1:
        append_kvs(log, [(b"hello", b"hello")])
    append_with_offsets(log, [(b"hello", b"hello")], [INT_MAX - 1])
    append_kvs(log, [(b"hello", b"hello")])
    assert log.active_segment.offset_index.last_offset == INT_MAX
    assert len(cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, log.log_end_offset)) == 1
    append_kvs(log, [(b"hello", b"hello")])
    groups = cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, log.log_end_offset)
    assert len(groups) == 2
    while len(log.segments) < 4:
        append_kvs(log, [(b"hello", b"hello")])
    groups = cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, log.log_end_offset)
    assert len(groups) == len(log.segments) - 1
    for g in groups:
        assert g[-1].offset_index.last_offset - g[0].offset_index.base_offset <= INT_MAX


def test_segment_grouping_with_sparse_offsets_and_empty_segments(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=1 << 30, segment_index_bytes=10 << 20)
    cleaner = make_cleaner(clock)
    for i in range(3):
        append_kvs(log, [(b"key", b"val")])
        append_with_offsets(log, [(b"key", b"val")], [(i + 1) * (INT_MAX + 1) - 1])
        assert len(log.segments) == i + 1
    append_kvs(log, [(b"key", b"val")])
    first_uncleanable = log.log_end_offset - 1
    assert len(log.segments) == 4
    groups = cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, first_uncleanable)
    assert len(groups) == 3
    cleaner.clean(ltc(log, 0, first_uncleanable))
    assert len(log.segments) == 4
    assert log.segments.values()[0].size_in_bytes == 0
    groups = cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, first_uncleanable)
    assert len(groups) == 2
    cleaner.clean(ltc(log, 0, first_uncleanable))
    assert len(log.segments) == 3
    ensure_valid_segments(log)


def test_segment_grouping_following_load_of_zero_index(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=400)
    cleaner = make_cleaner(clock)
    append_with_offsets(log, [(b"hello", b"hello")], [0])
    append_with_offsets(log, [(b"hello", b"hello")], [1])
    log.roll(INT_MAX // 2)
    append_with_offsets(log, [(b"hello", b"hello")], [INT_MAX // 2])
    append_with_offsets(log, [(b"hello", b"hello")], [INT_MAX + 1])
    assert log.log_end_offset - 1 - log.log_start_offset > INT_MAX
    groups = cleaner.group_segments_by_size(log.segments.values(), INT_MAX, INT_MAX, log.log_end_offset)
    assert len(groups) == 2
    for g in groups:
        assert g[-1].read_next_offset() - 1 - g[0].base_offset <= INT_MAX


def test_build_offset_map(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    for i in range(500):
        record(log, i, i)
    segs = log.segments.values()

    def check_range(start: int, end: int) -> None:
        m = SipHashOffsetMap(slots=1000)
        stats = CleanerStats()
        cleaner.build_offset_map(log, start, end, m, stats)
        assert m.latest_offset + 1 == end
        assert m.size == end - start
        for i in range(start, end):
            assert m.get(str(i).encode()) == i
        assert m.get(str(start - 1).encode()) == -1
        assert m.get(str(end).encode()) == -1
        assert stats.map_messages_read == end - start

    check_range(0, segs[1].base_offset)
    check_range(segs[1].base_offset, segs[3].base_offset)
    check_range(segs[3].base_offset, log.log_end_offset)


def test_build_offset_map_fake_large(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=120, segment_index_bytes=120)
    cleaner = make_cleaner(clock)
    end = 7_206_178
    append_with_offsets(log, [(b"0", b"0")], [0])
    append_with_offsets(log, [(b"1", b"1")], [end])
    m = SipHashOffsetMap(slots=1000)
    cleaner.build_offset_map(log, 0, end + 1, m, CleanerStats())
    assert m.latest_offset == end
    assert m.size == 2
    assert m.get(b"0") == 0
    assert m.get(b"1") == end


def test_build_partial_offset_map(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 3)  # two keys fit
    for i in range(5):
        record(log, i, i)
    log.roll()
    stats = CleanerStats()
    m = cleaner.offset_map
    cleaner.build_offset_map(log, 2, INT_MAX, m, stats)
    assert m.size == 2
    assert m.get(b"0") == -1
    assert m.get(b"2") == 2
    assert m.get(b"3") == 3
    assert m.get(b"4") == -1
    assert stats.map_messages_read == 4
