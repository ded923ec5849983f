"""Which part of a log is cleanable, and how dirty it is (Kafka's LogToClean and the helpers of
LogCleanerManager).

- ``cleanable_offsets``: the first dirty offset is the cleaner checkpoint, reset to the log start
  offset when missing, below the log start or beyond the log end (then the checkpoint must be
  rewritten: ``force_update_checkpoint``). The first uncleanable offset is the least of the last
  stable offset, the active segment's base offset and, when min.compaction.lag.ms > 0, the base
  offset of the first dirty non-active segment whose largest timestamp is newer than
  now - lag; never below the first dirty offset.
- ``calculate_cleanable_bytes``: the segment holding the uncleanable offset (or the active one)
  starts the uncleanable section; the cleanable bytes are those of the segments from the one
  holding the first dirty offset up to it.
- ``LogToClean``: clean bytes (segments starting below the first dirty offset), cleanable bytes,
  their ratio; ordered by that ratio.
- ``max_compaction_delay``: how long past max.compaction.lag.ms the earliest first-batch
  timestamp of the dirty non-active segments is (0 when not past).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import NamedTuple

from ..log.log import Log
from ..log.names import TopicPartition
from ..log.segment import LogSegment

_LOG = logging.getLogger(__name__)

LONG_MAX = (1 << 63) - 1


class OffsetsToClean(NamedTuple):
    """A log's cleanable range: first dirty offset, first uncleanable offset."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def non_active_segments_from(log: Log, offset: int) -> list[LogSegment]:
    """Segments from the one holding ``offset`` up to, not including, the active segment."""
    return log.segments.values(offset, log.active_segment.base_offset)


def cleanable_offsets(log: Log, last_clean_offset: int | None, now_ms: int) -> OffsetsToClean:
    start = log.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not (log.config.compact and log.config.delete):
            _LOG.warning("resetting first dirty offset of %s to log start offset %d: checkpoint %d is invalid",
                         log.name, start, checkpoint)
        first_dirty, force = start, True
    elif checkpoint > log.log_end_offset:
        _LOG.warning(
            "cleaner checkpoint %d of %s is beyond its log end offset %d: resetting to log start offset %d",
            checkpoint, log.name, log.log_end_offset, start)
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    bounds = [log.last_stable_offset, log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in non_active_segments_from(log, first_dirty):
            if seg.largest_timestamp > now_ms - lag:
                bounds.append(seg.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


def calculate_cleanable_bytes(log: Log, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """(first uncleanable offset: a segment base offset, cleanable bytes)."""
    after = non_active_segments_from(log, uncleanable_offset)
    first_uncleanable = after[0].base_offset if after else log.active_segment.base_offset
    segs = log.segments.values(min(first_dirty_offset, first_uncleanable), first_uncleanable)
    return first_uncleanable, sum(s.size_in_bytes for s in segs)


@dataclass(eq=False)
class LogToClean:
    """A log the cleaner may clean: its dirty range, clean bytes and cleanable bytes."""

    log: Log
    first_dirty_offset: int
    uncleanable_offset: int
    need_compaction_now: bool = False
    clean_bytes: int = field(init=False)
    first_uncleanable_offset: int = field(init=False)
    cleanable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.clean_bytes = sum(s.size_in_bytes for s in self.log.segments.values(-1, self.first_dirty_offset))
        self.first_uncleanable_offset, self.cleanable_bytes = calculate_cleanable_bytes(
            self.log, self.first_dirty_offset, self.uncleanable_offset)

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic_partition

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else float("nan")


def max_compaction_delay(log: Log, first_dirty_offset: int, now_ms: int) -> int:
    firsts = []
    for seg in non_active_segments_from(log, first_dirty_offset):
        header = seg.log.header_at(0) if seg.size_in_bytes else None
        if header is not None and header.max_timestamp > 0:
            firsts.append(header.max_timestamp)
    earliest = min(firsts, default=LONG_MAX)
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0
