"""``logkeeper clean``'s closing lines: one per log, saying what was done or why nothing was;
and on stderr where the command's time went (``PhaseTimes``).

Kafka's cleaner is silent about the logs it skips; a user of the command cannot tell "nothing to
do" from "did not look". The reasons follow the cleaner's own selection (selection.py,
CleanerManager.grab_filthiest_compacted_log), checked in the order it applies them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..log.log import Log
from .selection import LogToClean, cleanable_offsets
from .stats import CleanerStats


@dataclass
class Tally:
    """What the rounds of one log did: their read and written counts summed in one CleanerStats
    (the counters' owner), with how many rounds there were."""

    rounds: int = 0
    total: CleanerStats = field(default_factory=CleanerStats)

    def add(self, stats: CleanerStats) -> None:
        self.rounds += 1
        self.total.read_messages(stats.messages_read, stats.bytes_read)
        self.total.recopy_messages(stats.messages_written, stats.bytes_written)

    def line(self) -> str:
        rounds = "1 round" if self.rounds == 1 else f"{self.rounds} rounds"
        t = self.total
        return (f"cleaned in {rounds}: {t.messages_read:,} records read, {t.messages_written:,} kept; "
                f"{t.bytes_read:,} bytes read, {t.bytes_written:,} written")


class PhaseTimes:
    """Where the command's time went, phase by phase, for its last stderr line: ``logkeeper clean:
    12.31 s: opening 1 log 0.30 s, cleaning 10.90 s, closing 0.10 s, removing replaced files 0.74
    s``. Starting Python and importing come before it: a process's wall time less the total
    (bench/bench_kafka_cleaner.py reports both)."""

    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        self._start = self._last = clock_s()
        self.phases: list[tuple[str, float]] = []

    def done(self, phase: str) -> None:
        now = self._clock_s()
        self.phases.append((phase, now - self._last))
        self._last = now

    def line(self) -> str:
        return (f"logkeeper clean: {self._last - self._start:.2f} s: "
                + ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in self.phases))


def why_not_cleaned(log: Log, checkpoint: int | None, now_ms: int) -> str:
    """Why the cleaner leaves ``log`` as it is now (read-only)."""
    config = log.config
    if not config.compact:
        return "not cleaned: cleanup.policy has no compact (only compacted logs are cleaned)"
    active = log.active_segment.base_offset
    if not log.segments.values(-1, active):
        return "not cleaned: nothing below the active segment (the active segment is never cleaned)"
    offsets = cleanable_offsets(log, checkpoint, now_ms)
    first_dirty = offsets.first_dirty_offset
    if first_dirty >= active:
        return f"not cleaned: already clean up to the active segment (offset {active})"
    if offsets.first_uncleanable_dirty_offset <= first_dirty:
        if log.last_stable_offset <= first_dirty:
            return (f"not cleaned: an open transaction holds the last stable offset at {log.last_stable_offset}, "
                    "at the start of the dirty section")
        return (f"not cleaned: the dirty records are younger than min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms})")
    ratio = LogToClean(log, first_dirty, offsets.first_uncleanable_dirty_offset).cleanable_ratio
    if ratio <= config.min_cleanable_dirty_ratio:
        return (f"not cleaned: dirty ratio {ratio:.2f} is not above min.cleanable.dirty.ratio "
                f"{config.min_cleanable_dirty_ratio:g} (--config min.cleanable.dirty.ratio=0 cleans whatever is "
                "dirty)")
    return "not cleaned: the cleaner chose no round for it"
