"""Kafka's LogCleanerTest scenarios on logkeeper's Cleaner: retention rules, partial maps,
tombstones, gaps, large and corrupt batches, abort (segment grouping and building offset maps:
test_cleaner_grouping.py)."""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest

from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.cleaner.txn import CleanedTransactionMetadata
from logkeeper.errors import CorruptRecordError, CrcMismatchError, LogCleaningAbortedError
from logkeeper.log import version_cache
from logkeeper.log.log import Log
from logkeeper.log.names import TopicPartition
from logkeeper.records.compression import Codec
from tests.cleaner_logs import (
    INT_MAX,
    LONG_MAX,
    RETENTION_MS,
    Clock,
    append_kvs,
    append_with_offsets,
    ensure_valid_segments,
    ikeys,
    log_batches,
    ltc,
    make_cleaner,
    make_log,
    offsets_in_log,
    read_log,
    record,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def fake_map(keys: list[int], offset: int = LONG_MAX) -> SipHashOffsetMap:
    m = SipHashOffsetMap(slots=INT_MAX)
    for k in keys:
        m.put(str(k).encode(), offset)
    return m


def fill_until_segments(log: Log, n: int) -> None:
    while len(log.segments) < n:
        record(log, log.log_end_offset, log.log_end_offset)


def test_clean_segments(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    fill_until_segments(log, 4)
    assert ikeys(log) == list(range(log.log_end_offset))
    removed = [1, 3, 5, 7, 9]
    segments = log.segments.values()[:3]
    expected_read = sum(s.size_in_bytes for s in segments)
    should_remain = [k for k in ikeys(log) if k not in removed]
    stats = CleanerStats()
    cleaner.clean_segments(log, segments, fake_map(removed), 0, stats, CleanedTransactionMetadata(),
                           segments[-1].read_next_offset())
    assert ikeys(log) == should_remain
    assert stats.bytes_read == expected_read
    ensure_valid_segments(log)


def test_cleaning_with_deletes(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    fill_until_segments(log, 2)
    leo = log.log_end_offset
    for key in range(0, leo, 2):
        record(log, key, None)
    fill_until_segments(log, 4)
    cleaner.clean(ltc(log, 0))
    keys = set(ikeys(log))
    assert not any(k in keys for k in range(0, leo, 2))


def test_log_cleaner_stats(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 4)  # load factor 0.75: three keys fit
    for k in (0, 1, 0, 1, 0):
        record(log, k, k)
    log.roll()
    initial_size = log.size_in_bytes
    end, stats = cleaner.clean(ltc(log, 2))
    assert end == 5
    assert stats.messages_read == 5
    assert stats.bytes_read == initial_size
    assert stats.messages_written == 2
    assert stats.bytes_written == log.size_in_bytes
    assert stats.invalid_messages_read == 0
    assert stats.end_ms >= stats.start_ms


def test_partial_segment_clean(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 2)  # one key fits
    for k in (0, 1, 0, 1, 0):
        record(log, k, k)
    log.roll()
    cleaner.clean(ltc(log, 2))
    assert ikeys(log) == [1, 0, 1, 0]
    assert offsets_in_log(log) == [1, 2, 3, 4]
    cleaner.clean(ltc(log, 3))
    assert ikeys(log) == [0, 1, 0]
    assert offsets_in_log(log) == [2, 3, 4]
    cleaner.clean(ltc(log, 4))
    assert ikeys(log) == [1, 0]
    assert offsets_in_log(log) == [3, 4]


def test_cleaning_with_uncleanable_section(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    n = 10
    while len(log.segments) <= 2:
        record(log, log.log_end_offset % n, log.log_end_offset)
    first_uncleanable = log.log_end_offset + 1
    while len(log.segments) < 6:
        record(log, log.log_end_offset % n, log.log_end_offset)

    # by the segments' offset ranges before the round: it merges the cleaned ones (cleaner.py)
    bases = [*log.segments.base_offsets(), log.log_end_offset]

    def distinct_values() -> list[int]:
        recs = read_log(log)
        return [len({r.value for r in recs if lo <= r.offset < hi}) for lo, hi in pairwise(bases)]

    before = distinct_values()
    assert all(v > n for v in before[:-1])
    cleaner.clean(ltc(log, 0, first_uncleanable))
    after = distinct_values()
    assert all(a < b for a, b in zip(after[:2], before[:2]))
    assert after[2:] == before[2:]


def test_log_to_clean(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=100)
    for _ in range(6):
        append_kvs(log, [(b"1", bytes(25))])
    active = log.active_segment.base_offset
    assert LogToClean(log, active, active).total_bytes == log.size_in_bytes - log.active_segment.size_in_bytes


def test_log_to_clean_with_uncleanable_section(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=100)
    for _ in range(6):
        append_kvs(log, [(b"1", bytes(25))])
    segs = log.segments.values()
    t = LogToClean(log, segs[2].base_offset, segs[4].base_offset)
    clean = sum(s.size_in_bytes for s in segs[:2])
    cleanable = sum(s.size_in_bytes for s in segs[2:4])
    assert t.clean_bytes == clean
    assert t.cleanable_bytes == cleanable
    assert t.total_bytes == clean + cleanable
    assert t.cleanable_ratio == pytest.approx(cleanable / (clean + cleanable))


def test_cleaning_with_unkeyed_messages(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, cleanup_policy="delete")  # so that unkeyed records can be appended
    cleaner = make_cleaner(clock)
    while len(log.segments) < 2:
        append_kvs(log, [(None, str(log.log_end_offset).encode())])
    unkeyed = sum(1 for r in read_log(log) if r.key is None)
    size_with_unkeyed = log.size_in_bytes
    while len(log.segments) < 3:
        record(log, log.log_end_offset, log.log_end_offset)
    expected_size = log.size_in_bytes - size_with_unkeyed
    _end, stats = cleaner.clean(ltc(log, 0))
    assert sum(1 for r in read_log(log) if r.key is None) == 0
    assert log.size_in_bytes == expected_size
    assert stats.invalid_messages_read == unkeyed


# (which check_done call aborts, the step through the keys the map holds): an abort at the first
# check (Kafka's testCleanSegmentsWithAbort) with every key in the map, and one at the third, after
# some windows were written, with every other key in the map
@pytest.mark.parametrize(("aborting_call", "map_step"), [(1, 1), (3, 2)], ids=["at-once", "after-some-windows"])
def test_abort_removes_cleaned_files(tmp_path: Path, clock: Clock, aborting_call: int, map_step: int) -> None:
    calls = []

    def abort(_tp: TopicPartition) -> None:
        calls.append(1)
        if len(calls) >= aborting_call:
            raise LogCleaningAbortedError("aborted")

    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, check_done=abort)
    fill_until_segments(log, 4)
    keys = ikeys(log)
    segments = log.segments.values()[:3]
    with pytest.raises(LogCleaningAbortedError):
        cleaner.clean_segments(log, segments, fake_map(keys[::map_step]), 0, CleanerStats(),
                               CleanedTransactionMetadata(), segments[-1].read_next_offset())
    assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name]
    assert ikeys(log) == keys


def test_clean_segments_retaining_last_empty_batch(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    fill_until_segments(log, 4)
    keys = ikeys(log)
    assert keys == list(range(log.log_end_offset))
    segments = log.segments.values()[:3]
    cleaner.clean_segments(log, segments, fake_map(keys), 0, CleanerStats(), CleanedTransactionMetadata(),
                           segments[-1].read_next_offset())
    assert len(log.segments) == 2
    first = log.segments.values()[0]
    batches = [h for h, _raw in log_batches(log) if log.segments.floor_segment(h.base_offset) is first]
    assert len(batches) == 1
    assert batches[0].last_offset == log.segments.values()[-1].base_offset - 1
    assert batches[0].record_count == 0


def test_clean_tombstone(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=1 << 30, segment_index_bytes=10 << 20)
    cleaner = make_cleaner(clock, 10)
    append_with_offsets(log, [(b"0", b"0")], [0], timestamp=clock.now + RETENTION_MS + 10000)
    log.roll()
    cleaner.clean(ltc(log, 0))
    append_with_offsets(log, [(b"0", None)], [1], timestamp=clock.now - RETENTION_MS - 10000)
    log.roll()
    cleaner.clean(ltc(log, 1))
    assert log_batches(log)[0][0].last_offset == 1  # the tombstone stays
    append_kvs(log, [(b"1", b"1")])
    log.roll()
    cleaner.clean(ltc(log, 2))
    assert log_batches(log)[0][0].last_offset == 1


@pytest.mark.parametrize("gaps", [[(11, [])], [(15, list(range(15, 25))), (30, [])]])
def test_cleaning_beyond_missing_offsets(tmp_path: Path, clock: Clock, gaps: list[tuple[int, list[int]]]) -> None:
    log = make_log(tmp_path, clock, segment_bytes=1 << 20)
    cleaner = make_cleaner(clock)
    for i in range(10):
        append_with_offsets(log, [(str(i).encode(), str(i).encode())], [i])
    for roll_at, offsets in gaps:
        log.roll(roll_at)
        for o in offsets:
            append_with_offsets(log, [(str(o).encode(), str(o).encode())], [o])
    append_with_offsets(log, [(b"1015", b"1015")], [gaps[-1][0]])
    end, _stats = cleaner.clean(LogToClean(log, 0, log.active_segment.base_offset, True))
    assert end == log.active_segment.base_offset


def test_large_message(tmp_path: Path, clock: Clock) -> None:
    size = 1024 * 1024
    log = make_log(tmp_path, clock, segment_bytes=size * 16, max_message_bytes=size * 2)
    cleaner = make_cleaner(clock, max_message_size=1024)
    while len(log.segments) < 2:
        record_large(log, size)
    assert ikeys(log) == list(range(log.log_end_offset))
    removed = [1, 3, 5, 7, 9]
    first = log.segments.values()[0]
    cleaner.clean_segments(log, [first], fake_map(removed), 0, CleanerStats(), CleanedTransactionMetadata(),
                           first.read_next_offset())
    assert ikeys(log) == [k for k in range(log.log_end_offset) if k not in removed]


def record_large(log: Log, size: int) -> None:
    append_kvs(log, [(str(log.log_end_offset).encode(), bytes(size))])


def test_message_larger_than_max_message_size(tmp_path: Path, clock: Clock) -> None:
    size = 1024 * 1024
    log = make_log(tmp_path, clock, segment_bytes=size * 16, max_message_bytes=size * 2)
    while len(log.segments) < 2:
        record_large(log, size)
    log.config = log.config.with_overrides({"max.message.bytes": size // 2})
    cleaner = make_cleaner(clock, max_message_size=1024)
    first = log.segments.values()[0]
    removed = [1, 3, 5, 7, 9]
    cleaner.clean_segments(log, [first], fake_map(removed), 0, CleanerStats(), CleanedTransactionMetadata(),
                           first.read_next_offset())
    assert ikeys(log) == [k for k in range(log.log_end_offset) if k not in removed]


@pytest.mark.parametrize("damage", ["magic", "truncated", "crc"])
def test_corrupt_batches_fail_the_round_and_leave_the_log(tmp_path: Path, clock: Clock, damage: str) -> None:
    log = make_log(tmp_path, clock, segment_bytes=4096)
    while len(log.segments) < 2:
        record(log, log.log_end_offset % 7, log.log_end_offset)
    log.roll()
    first = log.segments.values()[0]
    path = first.log.path
    with open(path, "r+b") as f:
        if damage == "magic":
            f.seek(16)
            f.write(b"\xff")
        elif damage == "crc":
            f.seek(first.size_in_bytes - 3)
            f.write(b"\x00\x01\x02")
        else:
            f.truncate(first.size_in_bytes - 20)
    log.close()
    log = Log(log.dir, log.config, clock_ms=clock)  # a clean shutdown: no recovery cuts the damage off
    before = sorted((p.name, p.stat().st_size) for p in log.dir.iterdir())
    cleaner = make_cleaner(clock)
    with pytest.raises(CorruptRecordError) as info:
        cleaner.clean(ltc(log, 0))
    assert str(path.name) in str(info.value)
    if damage == "crc":  # the batch's records still parse: only its CRC tells
        last = log.segments.values()[0].log.scan()
        assert isinstance(info.value, CrcMismatchError)
        assert f"stored crc {int(last.crc[-1]):#010x}" in str(info.value)
        assert info.value.position == int(last.position[-1])
    assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name]
    assert sorted((p.name, p.stat().st_size) for p in log.dir.iterdir()) == before


def test_compressed_batches_rebuilt_with_their_codec(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=1 << 20)
    cleaner = make_cleaner(clock)
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        append_kvs(log, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], codec=codec)
    append_kvs(log, [(b"a", b"9")])
    log.roll()
    cleaner.clean(ltc(log, 0))
    ensure_valid_segments(log)
    batches = log_batches(log)
    assert [h.codec for h, _ in batches] == [int(Codec.ZSTD), int(Codec.NONE)]
    assert [(r.key, r.value) for r in read_log(log)] == [(b"b", b"2"), (b"c", b"3"), (b"a", b"9")]


def test_untouched_batches_keep_their_bytes(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=1 << 20)
    cleaner = make_cleaner(clock)
    append_kvs(log, [(b"a", b"1"), (b"b", b"2")], codec=Codec.GZIP)
    append_kvs(log, [(b"c", b"3")])
    append_kvs(log, [(b"d", b"4")])
    before = [raw for _h, raw in log_batches(log)]
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert [raw for _h, raw in log_batches(log)] == before


def test_file_not_left_open_after_clean(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    fill_until_segments(log, 4)
    # the shared mappings hold a descriptor each (a bounded cache, see log/version_cache.py)
    version_cache.mappings.clear()
    before = len(os.listdir("/proc/self/fd"))
    cleaner.clean(ltc(log, 0))
    version_cache.mappings.clear()
    assert len(os.listdir("/proc/self/fd")) <= before
