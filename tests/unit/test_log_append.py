"""Log.append's bookkeeping: index entries, rolls, header rewrites and config changes.

The property test appends random batches under random small limits and checks, segment by
segment, that the index entries the appends wrote are exactly those a recovery rebuilds from
the ``.log`` alone (``index_plan.py``), and that every roll was needed: the next batch did not
fit segment.bytes, or an index was full.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeeper.errors import RecordTooLargeError
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.segment import LogSegment
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.compression import Codec
from logkeeper.records.reader import read_records
from tests.helpers import NOW_MS, ManualClock, batch, make_log

INT32 = struct.Struct(">i")


def index_entries(seg: LogSegment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    return ([tuple(seg.offset_index.entry(n)) for n in range(seg.offset_index.entries)],  # type: ignore[misc]
            [tuple(seg.time_index.entry(n)) for n in range(seg.time_index.entries)])


@st.composite
def appends(draw: st.DrawFn) -> list[bytes]:
    out = []
    for _ in range(draw(st.integers(1, 40))):
        n = draw(st.integers(1, 8))
        stamps = [NOW_MS + draw(st.integers(-50, 50)) for _ in range(n)]
        recs = [Record(i, stamps[i], b"k%d" % i, b"v" * draw(st.integers(0, 700))) for i in range(n)]
        out.append(build_batch(recs, codec=draw(st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP]))))
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends(), st.sampled_from([0, 1, 300, 4096, 10_000]), st.integers(24, 80), st.integers(1500, 20_000),
       st.integers(1, 3))
def test_index_entries_and_rolls_match_the_rules(tmp_path_factory: object, batches: list[bytes], interval: int,
                                                 max_index: int, segment_bytes: int, per_request: int) -> None:
    tmp = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    if per_request > 1:
        # a request of several batches may add several entries after the roll check (as in
        # Kafka): only single-batch requests meet nearly full indexes
        max_index = 10 * 1024 * 1024
    props = {"index.interval.bytes": interval, "segment.index.bytes": max_index, "segment.bytes": segment_bytes,
             "max.message.bytes": 1 << 20}
    log = make_log(tmp, props)
    requests = [b"".join(batches[i:i + per_request]) for i in range(0, len(batches), per_request)]
    request_at = {}  # first offset -> request size
    for request in requests:
        if len(request) <= segment_bytes:
            request_at[log.append(request).first_offset] = len(request)
    segments = list(log.segments.values())
    log.close()
    offset_slots, time_slots = max_index // 8, max_index // 12
    for i, seg in enumerate(segments):
        reopened = LogSegment(tmp / "topic-0", seg.base_offset, index_interval_bytes=interval,
                              max_index_size=max_index)
        written = index_entries(reopened)
        reopened.recover()
        assert index_entries(reopened) == written, f"segment {i}"
        assert reopened.size_in_bytes <= segment_bytes
        if i + 1 < len(segments):  # why it was rolled: the next request did not fit, or an index was full
            full = len(written[0]) >= offset_slots or len(written[1]) >= time_slots - 1
            next_request = request_at[segments[i + 1].base_offset]
            assert reopened.size_in_bytes + next_request > segment_bytes or full, f"segment {i}"
        reopened.close()


def test_roll_on_segment_ms_minus_jitter_through_the_log(tmp_path: Path) -> None:
    clock = ManualClock()
    log = make_log(tmp_path, {"segment.ms": 1000, "segment.jitter.ms": 400}, clock=clock, rng=random.Random(7))
    jitter = log.active_segment.rolling_jitter_ms
    assert 0 < jitter < 400
    log.append(batch(1, ts=NOW_MS))
    log.append(batch(1, ts=NOW_MS + 1000 - jitter))  # exactly segment.ms - jitter after the first: no roll
    assert len(log.segments) == 1
    log.append(batch(1, ts=NOW_MS + 1000 - jitter + 1))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_on_segment_age_when_batches_carry_no_timestamp(tmp_path: Path) -> None:
    """Batches from a copy with max timestamp -1: the segment's age by the clock decides."""
    clock = ManualClock()
    log = make_log(tmp_path, {"segment.ms": 1000}, clock=clock)
    no_ts = bytearray(batch(1, ts=NOW_MS))
    struct.pack_into(">q", no_ts, 35, -1)
    struct.pack_into(">I", no_ts, 17, crc32c.crc32c(bytes(no_ts[21:])))
    log.append(bytes(no_ts), assign_offsets=False)
    clock.advance(1000)
    struct.pack_into(">q", no_ts, 0, 1)
    log.append(bytes(no_ts), assign_offsets=False)
    assert len(log.segments) == 1
    clock.advance(1)
    struct.pack_into(">q", no_ts, 0, 2)
    log.append(bytes(no_ts), assign_offsets=False)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_time_index_full(tmp_path: Path) -> None:
    """The time index keeps its last slot for the entry written on roll: of 3 slots, 2 take appends."""
    log = make_log(tmp_path, {"segment.index.bytes": 36, "index.interval.bytes": 1})
    for i in range(8):
        log.append(batch(1, ts=NOW_MS + i))
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    for seg in list(log.segments.values())[:-1]:
        assert seg.time_index.entries == 2 and seg.offset_index.entries == 2  # 4 offset slots: not full
    assert [r.offset for r in _records(log)] == list(range(8))
    log.close()


def test_stale_header_max_timestamp_and_leader_epoch_are_rewritten(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    stale = bytearray(batch(3, ts=NOW_MS))
    struct.pack_into(">q", stale, 35, NOW_MS - 7)
    struct.pack_into(">I", stale, 17, crc32c.crc32c(bytes(stale[21:])))
    info = log.append(bytes(stale))
    assert info.max_timestamp == NOW_MS + 2
    info = log.append(batch(2) + batch(1), leader_epoch=9)
    assert (info.first_offset, info.last_offset, info.num_batches) == (3, 5, 2)
    raw = log.read(0, 1 << 20).records
    headers, pos = [], 0
    while pos < len(raw):
        headers.append(BatchHeader.parse(raw, pos))
        assert crc32c.crc32c(raw[pos + 21:pos + headers[-1].size]) == headers[-1].crc
        pos += headers[-1].size
    assert [(h.base_offset, h.max_timestamp, h.partition_leader_epoch) for h in headers] == [
        (0, NOW_MS + 2, -1), (3, NOW_MS + 1, 9), (5, NOW_MS, 9)]
    log.close()


def test_log_append_time_for_every_batch_of_a_request(tmp_path: Path) -> None:
    clock = ManualClock(NOW_MS + 50)
    log = make_log(tmp_path, {"message.timestamp.type": "LogAppendTime"}, clock=clock)
    info = log.append(batch(2) + batch(1, codec=Codec.SNAPPY))
    assert (info.max_timestamp, info.log_append_time_ms) == (NOW_MS + 50, NOW_MS + 50)
    assert [r.timestamp for r in _records(log)] == [NOW_MS + 50] * 3
    log.close()


def test_config_changes_apply_to_the_next_append(tmp_path: Path) -> None:
    one = batch(3)
    log = make_log(tmp_path)
    log.append(one)
    log.config = LogConfig.from_props({"segment.bytes": len(one) * 2, "max.message.bytes": len(one)})
    log.append(one)
    log.append(one)  # segment.bytes now holds two batches: this one rolls
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.config = LogConfig.from_props({"max.message.bytes": len(one) - 1})
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        log.append(one)
    log.close()


def _records(log: Log) -> list[Record]:
    out: list[Record] = []
    for seg in log.segments.values():
        out.extend(read_records(seg.log.read(0, seg.size_in_bytes)))
    return out
