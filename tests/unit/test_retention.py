"""Retention rules on one log: by time, by size, by log start offset, and the cleanup policies."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import OffsetOutOfRangeError
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.retention import (
    deletable_segments,
    delete_log_start_offset_breached,
    delete_old_segments,
    delete_retention_ms_breached,
    delete_retention_size_breached,
)
from logkeeper.log.scheduler import ManualClock
from logkeeper.records.builder import Record, build_batch

START_MS = 1_700_000_000_000


def batch(ts: int, value: bytes = b"v" * 40) -> bytes:
    return build_batch([Record(0, ts, b"k", value)])


BATCH_SIZE = len(batch(0))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


def make_log(tmp_path: Path, clock: ManualClock, **props: Any) -> Log:
    base = {"segment.bytes": BATCH_SIZE * 5, "file.delete.delay.ms": 1000}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return Log(tmp_path / "t-0", LogConfig.from_props(base), clock_ms=clock)


def fill(lg: Log, clock: ManualClock, count: int, *, step_ms: int = 0) -> None:
    for _ in range(count):
        lg.append(batch(clock()))
        clock.advance(step_ms)


def bases(lg: Log) -> list[int]:
    return lg.segments.base_offsets()


# ------------------------------------------------------------------ time
def test_time_retention_deletes_expired_segments_oldest_first(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=10_000)
    fill(lg, clock, 20, step_ms=1_000)  # 4 segments of 5 batches, 1 s apart
    assert bases(lg) == [0, 5, 10, 15]
    # now = START + 20 s; segment 0's largest timestamp is START + 4 s, segment 5's START + 9 s
    assert delete_retention_ms_breached(lg, clock()) == 2
    assert bases(lg) == [10, 15]
    assert lg.log_start_offset == 10
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1000)
    assert lg.read(10, 1000).first_offset == 10


def test_time_retention_stops_at_the_first_unexpired_segment(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=10_000)
    lg.append(batch(clock() + 50_000))  # segment 0 holds a future timestamp
    fill(lg, clock, 9)
    lg.roll()
    clock.advance(20_000)
    assert delete_retention_ms_breached(lg, clock()) == 0  # segment 0 is not expired: nothing goes
    assert bases(lg) == [0, 5, 10]


def test_expired_active_segment_rolls_and_goes(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=1_000)
    fill(lg, clock, 7)
    clock.advance(1_001)
    assert delete_retention_ms_breached(lg, clock()) == 2
    assert bases(lg) == [7]  # a new empty active segment at the log end offset
    assert lg.active_segment.size_in_bytes == 0
    assert lg.log_start_offset == lg.log_end_offset == 7
    assert lg.append(batch(clock())).first_offset == 7


def test_empty_active_segment_is_never_deleted(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=0)
    clock.advance(10)
    assert deletable_segments(lg, lambda s, n: True) == []
    assert delete_retention_ms_breached(lg, clock()) == 0
    assert bases(lg) == [0]


def test_negative_retention_ms_keeps_everything(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=-1)
    fill(lg, clock, 12)
    clock.advance(10**12)
    assert delete_retention_ms_breached(lg, clock()) == 0


def test_segment_without_timestamps_uses_file_mtime(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=10_000)
    fill(lg, clock, 6)
    first = lg.segments.first
    assert first is not None
    first.set_max_timestamp(-1, first.base_offset)  # as for a segment whose records carry no timestamp
    os.utime(first.log.path, ((clock() - 60_000) / 1000, (clock() - 60_000) / 1000))
    assert first.largest_timestamp == clock() - 60_000
    assert delete_retention_ms_breached(lg, clock()) == 1


# ------------------------------------------------------------------ size
def test_size_retention_keeps_the_newest_within_the_limit(tmp_path: Path, clock: ManualClock) -> None:
    # Kafka's LogManagerTest.testCleanupSegmentsToMaintainSize: 10 batches a segment, 200 batches,
    # retention.bytes = 5 segments + 10 bytes -> 6 segments left
    lg = make_log(tmp_path, clock, segment_bytes=BATCH_SIZE * 10, retention_bytes=5 * 10 * BATCH_SIZE + 10)
    fill(lg, clock, 200)
    assert len(lg.segments) == 20
    assert delete_retention_size_breached(lg) == 14
    assert len(lg.segments) == 6
    assert lg.log_start_offset == 140


def test_size_below_limit_deletes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_bytes=BATCH_SIZE * 100)
    fill(lg, clock, 20)
    assert delete_retention_size_breached(lg) == 0
    lg2 = make_log(tmp_path / "x", clock, retention_bytes=-1)
    fill(lg2, clock, 20)
    assert delete_retention_size_breached(lg2) == 0


def test_size_retention_can_take_the_active_segment(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_bytes=0)
    fill(lg, clock, 7)
    assert delete_retention_size_breached(lg) == 2
    assert lg.size_in_bytes == 0
    assert lg.log_start_offset == 7


# ------------------------------------------------------------------ log start offset
def test_segments_below_the_log_start_offset_go(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock)
    fill(lg, clock, 20)
    assert lg.maybe_increment_log_start_offset(11)
    assert delete_log_start_offset_breached(lg) == 2  # [0, 5) and [5, 10); 10..14 holds offset 11
    assert bases(lg) == [10, 15]
    assert lg.log_start_offset == 11


def test_log_start_offset_at_a_segment_base(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock)
    fill(lg, clock, 20)
    lg.maybe_increment_log_start_offset(15)
    assert delete_log_start_offset_breached(lg) == 3
    assert bases(lg) == [15]


# ------------------------------------------------------------------ policies and files
@pytest.mark.parametrize(("policy", "time_applies"), [("delete", True), ("compact,delete", True),
                                                     ("compact", False)])
def test_policies(tmp_path: Path, clock: ManualClock, policy: str, time_applies: bool) -> None:
    lg = make_log(tmp_path, clock, retention_ms=1_000, cleanup_policy=policy)
    fill(lg, clock, 20)
    lg.maybe_increment_log_start_offset(5)
    clock.advance(5_000)
    result = delete_old_segments(lg, clock())
    assert result.by_start_offset == 1
    assert result.by_time == (3 if time_applies else 0)
    assert result.total == result.by_start_offset + result.by_size + result.by_time
    assert bases(lg) == ([20] if time_applies else [5, 10, 15])


def test_deleted_segments_are_renamed_then_removed_after_the_delay(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=1_000)
    fill(lg, clock, 12)
    clock.advance(2_000)
    delete_old_segments(lg, clock())
    files = sorted(os.listdir(lg.dir))
    assert "00000000000000000000.log.deleted" in files
    assert "00000000000000000005.log.deleted" in files
    clock.advance(999)
    assert lg.delete_expired_files() == 0
    clock.advance(1)
    assert lg.delete_expired_files() == 3
    assert not [f for f in os.listdir(lg.dir) if f.endswith(".deleted")]


def test_closed_log_is_left_alone(tmp_path: Path, clock: ManualClock) -> None:
    lg = make_log(tmp_path, clock, retention_ms=0)
    fill(lg, clock, 12)
    lg.close()
    clock.advance(10)
    assert delete_old_segments(lg, clock()).total == 0
