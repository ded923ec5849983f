"""Retention: which old segments of a log to delete, by time, by size and by log start offset.

Kafka's rules (UnifiedLog.deleteOldSegments), for a log without tiered storage:

- Segments are considered from the oldest on; the first one that fails the rule ends the run.
  The active segment is considered too, unless it is empty: a log always keeps one segment, so
  when every segment goes the log first rolls a new empty one at the log end offset, and the
  log start offset moves to it (readers get OffsetOutOfRange below it).
- By log start offset (every cleanup policy): a segment goes when the next segment's base
  offset is <= the log start offset (all its offsets are below the start).
- By time (policy includes ``delete``, retention.ms >= 0): a segment goes when
  ``now - largest_timestamp > retention.ms``; largest_timestamp is the largest record timestamp
  in the segment, or the file's modification time when it holds none.
- By size (policy includes ``delete``, retention.bytes >= 0): when the log is not smaller than
  retention.bytes, the oldest segments go while the excess still covers their whole size.

Deleted segments are renamed ``.deleted`` at once and removed after file.delete.delay.ms
(``Log.delete_segments``). Each rule holds the log's lock from choosing to renaming, so appends,
rolls and truncations never interleave with a deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from .log import Log
from .segment import LogSegment

log = logging.getLogger(__name__)

# (segment, next segment or None when it is the active one) -> delete it?
SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


class RetentionResult(NamedTuple):
    """How many segments a retention pass deleted, by cause."""

    by_start_offset: int
    by_size: int
    by_time: int

    @property
    def total(self) -> int:
        return self.by_start_offset + self.by_size + self.by_time


def deletable_segments(target: Log, predicate: SegmentPredicate) -> list[LogSegment]:
    """The oldest segments for which ``predicate`` holds, stopping at the first that fails; a last
    segment that is empty is never returned. Call with ``target.lock`` held."""
    segments = target.segments.values()
    out: list[LogSegment] = []
    for i, segment in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if nxt is None and segment.size_in_bytes == 0:
            break
        if not predicate(segment, nxt):
            break
        out.append(segment)
    return out


def _delete_while(target: Log, predicate: SegmentPredicate, reason: str) -> int:
    with target.lock:
        if target.closed:
            return 0
        doomed = deletable_segments(target, predicate)
        if doomed:
            log.info("deleting %d segment(s) of %s (%s): %s", len(doomed), target.name, reason,
                     ", ".join(s.name for s in doomed))
            target.delete_segments(doomed)
        return len(doomed)


def delete_log_start_offset_breached(target: Log) -> int:
    def below_start(_segment: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= target.log_start_offset

    return _delete_while(target, below_start, "below the log start offset")


def delete_retention_ms_breached(target: Log, now_ms: int) -> int:
    retention_ms = target.config.retention_ms
    if retention_ms < 0:
        return 0

    def expired(segment: LogSegment, _nxt: LogSegment | None) -> bool:
        return now_ms - segment.largest_timestamp > retention_ms

    return _delete_while(target, expired, f"retention.ms {retention_ms}")


def delete_retention_size_breached(target: Log) -> int:
    retention_bytes = target.config.retention_bytes
    with target.lock:
        size = target.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def over_size(segment: LogSegment, _nxt: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size_in_bytes < 0:
                return False
            excess -= segment.size_in_bytes
            return True

        return _delete_while(target, over_size, f"retention.bytes {retention_bytes}")


def delete_old_segments(target: Log, now_ms: int) -> RetentionResult:
    """Apply the rules in Kafka's order: log start offset, then size, then time (the size and time
    rules only when the cleanup policy includes ``delete``)."""
    by_start = delete_log_start_offset_breached(target)
    if not target.config.delete:
        return RetentionResult(by_start, 0, 0)
    by_size = delete_retention_size_breached(target)
    by_time = delete_retention_ms_breached(target, now_ms)
    return RetentionResult(by_start, by_size, by_time)
