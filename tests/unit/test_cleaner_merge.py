"""Consecutive small groups cleaned into one segment while their output fits (group_writer.py):
what a merged segment must be (within segment.bytes, its offsets within an int32 span, valid
indexes, the modification time of its last group), that merging never changes the batches a
round keeps, and that groups written by a helper (big ones) are never merged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper.cleaner import group_writer
from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from tests.cleaner_logs import append_kvs, append_with_offsets, ensure_valid_segments, log_batches, read_log

START_MS = 1_700_000_000_000
SEGMENT_BYTES = 4096
CONFIG = LogConfig.from_props({"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 64,
                               "cleanup.policy": "compact", "file.delete.delay.ms": 0})


def build(path: Path, segments: int = 12, keys: int = 7) -> Log:
    """``segments`` full segments over ``keys`` keys, each segment's files dated a second apart."""
    log = Log(path, CONFIG, clock_ms=lambda: START_MS)
    i = 0
    while len(log.segments) < segments:
        append_kvs(log, [(b"k%d" % (i % keys), b"v%06d" % i)], timestamp=START_MS + i)
        i += 1
    for n, seg in enumerate(log.segments.values()):
        seg.set_last_modified_ms(START_MS + 1000 * n)
    return log


def clean(log: Log) -> None:
    c = Cleaner(0, SipHashOffsetMap(slots=1 << 12), clock_ms=lambda: START_MS)
    c.clean(LogToClean(log, 0, log.active_segment.base_offset))


def latest(log: Log) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {r.key: (r.offset, r.value) for r in read_log(log)}


def test_small_groups_that_fit_are_one_segment(tmp_path: Path) -> None:
    log = build(tmp_path / "t-0")
    expected = latest(log)
    old = log.segments.values()[:-1]
    old_bases = [s.base_offset for s in old]
    last_mtime = old[-1].last_modified_ms
    clean(log)
    cleaned = log.segments.values()[:-1]
    # 11 groups kept a record each: their output is far below one segment.bytes
    assert len(cleaned) == 1
    assert cleaned[0].base_offset == old_bases[0]
    assert cleaned[0].size_in_bytes <= SEGMENT_BYTES
    assert cleaned[0].last_modified_ms == last_mtime  # the last merged group's
    assert latest(log) == expected
    ensure_valid_segments(log)
    log.close()
    again = Log(tmp_path / "t-0", CONFIG, clock_ms=lambda: START_MS)  # the loader trusts what was written
    assert latest(again) == expected
    ensure_valid_segments(again)
    again.close()


def test_merging_keeps_the_same_batches_and_never_passes_segment_bytes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    merged = build(tmp_path / "merged-0", segments=16, keys=40)
    clean(merged)
    # each group on its own, as Kafka's grouping makes them
    alone = build(tmp_path / "alone-0", segments=16, keys=40)
    monkeypatch.setattr(group_writer.GroupWriter, "_joins", lambda *_a: False)
    clean(alone)
    assert [raw for _h, raw in log_batches(merged)] == [raw for _h, raw in log_batches(alone)]
    assert 1 < len(merged.segments) < len(alone.segments)
    assert all(s.size_in_bytes <= SEGMENT_BYTES for s in merged.segments.values())
    ensure_valid_segments(merged)
    merged.close()
    alone.close()


def test_a_group_past_an_int32_span_of_the_segment_base_starts_a_new_segment(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", CONFIG.with_overrides({"segment.bytes": 1 << 20}), clock_ms=lambda: START_MS)
    for i in range(3):  # distinct keys: every record stays
        append_kvs(log, [(b"a%d" % i, b"val")])
        append_with_offsets(log, [(b"b%d" % i, b"val")], [(i + 1) * (1 << 31) - 1])  # rolls: past the span
    append_kvs(log, [(b"last", b"val")])
    assert len(log.segments) == 4
    before = [raw for _h, raw in log_batches(log)]
    clean(log)
    assert [raw for _h, raw in log_batches(log)] == before
    assert len(log.segments) == 4  # no group within an int32 span of another's base
    for seg in log.segments.values():
        batches = [h for h, _raw in log_batches(log) if log.segments.floor_segment(h.base_offset) is seg]
        assert all(h.last_offset - seg.base_offset < 1 << 31 for h in batches)
    ensure_valid_segments(log)
    log.close()


def test_groups_written_by_a_helper_are_not_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_writer, "INLINE_GROUP_BYTES", 1)  # every group is "big"
    log = build(tmp_path / "t-0")
    groups = len(log.segments) - 1
    clean(log)
    assert len(log.segments) - 1 == groups
    ensure_valid_segments(log)
    log.close()


def test_a_failure_in_a_merged_segment_leaves_the_log_as_it_was(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    log = build(tmp_path / "t-0")
    expected = latest(log)
    files = sorted(os.listdir(log.dir))
    real = group_writer.GroupWriter.finish
    finished: list[int] = []

    def fail_fifth(self: group_writer.GroupWriter, g: int, aborted: list[object]) -> None:
        finished.append(g)
        if len(finished) == 5:  # groups 0-3 are in the segment being written, not closed yet
            raise OSError(5, "Input/output error")
        real(self, g, aborted)  # type: ignore[arg-type]

    monkeypatch.setattr(group_writer.GroupWriter, "finish", fail_fifth)
    with pytest.raises(OSError, match="Input/output"):
        clean(log)
    assert sorted(os.listdir(log.dir)) == files
    assert latest(log) == expected
    log.close()
