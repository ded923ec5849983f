"""How far a cleaning round in progress has come: what users see of a long round before its stats
line, in ``logkeeper clean``'s progress lines (stderr) and in ``/v1/status`` (the partition's
``round_progress``, which the operator shows as ``cleaningProgress``).

``logkeeper clean`` prints the line through progress_lines.ProgressLines (every 10 s of a
longer round). A round has two phases (Cleaner.do_clean): ``indexing`` reads the dirty section
into the offset map (its total: the cleanable bytes the round was chosen for; a map that fills
stops the phase early), then ``cleaning`` rewrites the segments below the map's last offset (its total: their
bytes, known once they are grouped). The bytes done are the round's own CleanerStats counts
(map_bytes_read, then bytes_read), which the cleaner's thread adds to as it reads; another
thread reads them without a lock, each an int written whole, so a snapshot may lag by a chunk.
MB are Kafka's (MiB), as in the stats line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, TypedDict

from ..log.names import TopicPartition
from ..progress_lines import MIB
from ..typed_schema import Doc
from .stats import CleanerStats

Phase = Literal["indexing", "cleaning"]


class RoundProgressStatus(TypedDict):
    """The round cleaning a partition now, as /v1/status serves it (the partition's round_progress)."""

    phase: Annotated[Phase, Doc("indexing: reading the dirty section into the offset map; then cleaning: "
                                "rewriting the segments below the map's last offset")]
    done_bytes: Annotated[int, Doc("Bytes of the phase read so far")]
    total_bytes: Annotated[int, Doc("Bytes the phase reads (cleaning: 0 until the segments are grouped)")]
    percent: int
    elapsed_ms: Annotated[int, Doc("Since the round started")]


@dataclass(frozen=True)
class RoundProgress:
    topic_partition: TopicPartition
    phase: Phase
    done_bytes: int
    total_bytes: int
    elapsed_ms: int

    @property
    def percent(self) -> int:
        """Of the phase, 0-100 (a phase whose total is not known yet, or 0, is at 0)."""
        if self.total_bytes <= 0:
            return 0
        return min(100, self.done_bytes * 100 // self.total_bytes)

    def to_dict(self) -> RoundProgressStatus:
        return RoundProgressStatus(phase=self.phase, done_bytes=self.done_bytes, total_bytes=self.total_bytes,
                                   percent=self.percent, elapsed_ms=self.elapsed_ms)

    def line(self) -> str:
        return (f"{self.topic_partition}: {self.phase} {self.done_bytes / MIB:,.1f} of "
                f"{self.total_bytes / MIB:,.1f} MB ({self.percent}%), {self.elapsed_ms / 1000:,.0f} s into the round")


class LiveRound:
    """The figures of the round a cleaner runs now: written by its thread, read by any."""

    def __init__(self, topic_partition: TopicPartition, stats: CleanerStats, dirty_bytes: int) -> None:
        self.topic_partition = topic_partition
        self.stats = stats
        self.dirty_bytes = dirty_bytes
        self.rewrite_bytes = 0  # set once the segments to rewrite are grouped

    def snapshot(self) -> RoundProgress:
        s = self.stats
        elapsed = s.clock_ms() - s.start_ms
        if s.map_complete_ms < 0:
            return RoundProgress(self.topic_partition, "indexing", s.map_bytes_read, self.dirty_bytes, elapsed)
        return RoundProgress(self.topic_partition, "cleaning", s.bytes_read, self.rewrite_bytes, elapsed)


def progress_of(round_now: RoundProgress | None) -> tuple[float, str] | None:
    """A round's progress as progress_lines.ProgressLines takes it."""
    return (round_now.elapsed_ms / 1000, round_now.line()) if round_now is not None else None
