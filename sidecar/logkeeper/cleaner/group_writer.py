"""Writing the cleaned segments of a batch of groups: which groups are written together
(``write_batches``), and which cleaned segment each group's batches go to (``GroupWriter``).

The in-process cleaner (cleaner.py) and the Spark job (spark/rewrite.py) both write through this,
batch by batch, so that they make the same segments, byte for byte.

Batches: consecutive groups, cut before the group that would take a batch's input past
WRITE_BATCH_BYTES or its count past WRITE_BATCH_GROUPS (a group bigger than that is a batch of
its own). The in-process cleaner swaps a batch in by one replacement (with small segments, the
fsyncs of each group's replacement were most of a round); the Spark job writes a batch in one task.

Merging: a group joins the cleaned segment of the group before it in its batch when what it will
add fits (``GroupWriter._joins``). Kafka groups segments by their bytes before cleaning, so a log
of 1 MiB segments of which a round keeps a tenth came out as as many cleaned segments of a tenth
of a MiB: creating, trimming, syncing and renaming their files was most of such a round
(bench/results/kafka_cleaner.md), and the next round read that many segments again. Whether a
group fits is decided with its first window cleaned: its bytes then are that window's output plus
the group's input still to come, an upper bound (a cleaned batch is never longer than its source,
compression aside, as Kafka's grouping assumes too). A merged segment is what Kafka's grouping
makes of the same segments one round later: within segment.bytes, its indexes within their size,
its offsets within an int32 span of its base offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..index.txn_index import AbortedTxn
from ..log.log_config import LogConfig
from ..log.segment import INT32_MAX, LogSegment
from .appender import INLINE_GROUP_BYTES, appender_for
from .filter import Destination

INDEX_ENTRY_MAX_BYTES = 12  # a time index entry; an offset index entry is 8
WRITE_BATCH_BYTES = 32 << 20
WRITE_BATCH_GROUPS = 64

# a new cleaned segment: (base offset, max index size) -> the segment, empty
MakeSegment = Callable[[int, int], LogSegment]


def write_batches(group_bytes: Sequence[int]) -> list[range]:
    """The groups (by their input bytes, in offset order) cut into the batches written together."""
    batches: list[range] = []
    start, size = 0, 0
    for g, n in enumerate(group_bytes):
        if g > start and (size + n > WRITE_BATCH_BYTES or g - start >= WRITE_BATCH_GROUPS):
            batches.append(range(start, g))
            start, size = g, 0
        size += n
    if group_bytes:
        batches.append(range(start, len(group_bytes)))
    return batches


def cleaned_index_bound(group_bytes: int, config: LogConfig) -> int:
    """The bytes to allocate for each index of a cleaned segment of at most ``group_bytes``.

    Not ``segment.index.bytes`` (10 MiB) for every cleaned segment: allocating, mapping and then
    trimming that for each 1 MiB segment was a fixed cost of every group. An index entry follows
    more than ``index.interval.bytes`` of batches since the previous one (segment.py), so B bytes
    of batches make at most B // interval + 1 entries, the time index one more (the final entry
    when the segment becomes inactive). A cleaned segment holds fewer bytes than its input (records
    only go); the bound allows twice the bytes anyway, and never more than the config's.
    """
    entries = 2 * group_bytes // max(config.index_interval_bytes, 1) + 8
    return min(config.max_index_size, entries * INDEX_ENTRY_MAX_BYTES)


def group_uppers(segments: Sequence[LogSegment]) -> list[int]:
    """Where each segment of a group ends: the next one's base, the last one's next offset."""
    return [seg.base_offset for seg in segments[1:]] + [segments[-1].read_next_offset()]


class _Output:
    """A cleaned segment being written: the groups it holds so far, what appends to it (entered;
    left by ``GroupWriter._close`` or ``abandon``) and the aborted transactions it will index."""

    def __init__(self, segment: LogSegment, group: int, group_bytes: int) -> None:
        self.segment = segment
        self.first = self.last = group
        self.appender = appender_for(segment, group_bytes).__enter__()  # a big group: written on a helper
        self.aborted: list[AbortedTxn] = []


class GroupWriter:
    """The cleaned segments of a batch of groups, written as the filter reaches each group
    (``open``, ``finish``: SegmentFilter.clean_groups_into's callbacks); on a failure,
    ``abandon`` deletes them all. ``written`` holds the finished segments (whole, indexed and
    trimmed, not synced) and ``merged`` the groups each one holds (indexes into ``groups``)."""

    def __init__(self, make_segment: MakeSegment, config: LogConfig, groups: Sequence[Sequence[LogSegment]],
                 uppers: Sequence[int]) -> None:
        self._make_segment = make_segment
        self._config = config
        self._groups = groups
        self._uppers = uppers  # the first offset after each group
        self._bytes = [sum(seg.size_in_bytes for seg in segments) for segments in groups]
        self.written: list[LogSegment] = []
        self.merged: list[range] = []
        self._out: _Output | None = None

    def open(self, g: int, dropped: int) -> Destination:
        """Where group ``g``'s windows go: the cleaned segment being written when ``g`` fits in it,
        else a new one; ``dropped`` is how many bytes its first window's cleaning removed (0 when
        it has none)."""
        out = self._out
        if out is not None and self._joins(out, g, self._bytes[g] - dropped):
            out.last = g
            return out.appender
        if out is not None:
            self._close(out)
        merge_bytes = self._config.segment_bytes if self._small(g) else 0
        segment = self._make_segment(self._groups[g][0].base_offset,
                                     cleaned_index_bound(max(self._bytes[g], merge_bytes), self._config))
        self._out = _Output(segment, g, self._bytes[g])
        return self._out.appender

    def finish(self, g: int, aborted: list[AbortedTxn]) -> None:
        """Group ``g`` is cleaned; after the batch's last group, its segment is closed."""
        out = self._out
        if out is None or out.last != g:
            raise RuntimeError(f"group {g} finished before it was opened")
        out.aborted += aborted
        if g == len(self._groups) - 1:
            self._close(out)

    def abandon(self, error: BaseException) -> None:
        """Delete every segment made (the caller's stream is closed)."""
        out, self._out = self._out, None
        if out is not None:
            try:
                out.appender.__exit__(type(error), error, error.__traceback__)  # the helper drops what waits
            finally:
                out.segment.delete_if_exists()
        for cleaned in self.written:
            cleaned.delete_if_exists()

    def _joins(self, out: _Output, g: int, bound: int) -> bool:
        seg = out.segment
        # a segment written by a helper (a big group) is closed with its group: its size is not
        # known on this thread until then
        if not (self._small(out.first) and self._small(g)):
            return False
        # the replaced segments' entries, at most (their indexes may not be open: index_bytes_bound)
        bounds = [s.index_bytes_bound() for s in self._groups[g]]
        offset_entries = sum(b[0] for b in bounds) // OffsetIndex.entry_size
        time_entries = sum(b[1] for b in bounds) // TimeIndex.entry_size + 1  # + the final entry
        return (seg.size_in_bytes + bound <= self._config.segment_bytes
                and (self._bytes[g] == 0 or self._uppers[g] - 1 - seg.base_offset <= INT32_MAX)
                and seg.offset_index.entries + offset_entries <= seg.offset_index.max_entries
                and seg.time_index.entries + time_entries <= seg.time_index.max_entries)

    def _small(self, g: int) -> bool:
        """Whether group ``g`` is appended on this thread (appender.py), so that it may merge."""
        return self._bytes[g] <= INLINE_GROUP_BYTES

    def _close(self, out: _Output) -> None:
        self._out = None
        cleaned = out.segment
        try:
            out.appender.__exit__(None, None, None)  # every window appended (a helper raises its error here)
            for txn in out.aborted:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.set_last_modified_ms(self._groups[out.last][-1].last_modified_ms)
        except BaseException:
            cleaned.delete_if_exists()
            raise
        self.written.append(cleaned)
        self.merged.append(range(out.first, out.last + 1))
