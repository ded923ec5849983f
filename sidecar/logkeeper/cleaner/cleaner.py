"""Cleaning one log, one round (Kafka's Cleaner).

A round (``do_clean``):

1. build the offset map of the dirty section [first dirty, first uncleanable) (map_builder.py);
   the round ends at the map's latest offset + 1 (``end_offset``: all of the dirty section, or
   less when the map filled);
2. group the segments from the log start up to ``end_offset`` (grouping.py);
3. clean each group into a new segment, consecutive small groups into one while their output
   fits (``_GroupWriter``), and swap them in for their groups, a batch of consecutive groups at
   a time (``clean_groups``, ``swap_batches``): with small segments (Kafka's 1 MiB) the fsyncs
   of each group's replacement, not the cleaning, were most of a round; a batch is written, then
   synced and swapped in by one replacement (each file fsynced, the directory twice). A crash
   before a batch's swap rolls the whole batch back. A batch's groups are cleaned as one stream
   of windows (filter.py ``clean_groups_into``): the next window, of this group or the next, is
   decided while this one is written.

Replacing a batch of groups, crash-safely (log/replace.py's numbered steps, Log.replace_segments):

1. ``written``: the batches of each group, or of consecutive groups merged, are in
   ``<first base>.log.cleaned`` (and its ``.index.cleaned``, ``.timeindex.cleaned``,
   ``.txnindex.cleaned``), indexes trimmed, fsynced, modification time set to its last group's
   last segment's;
2. ``swapped`` (``.cleaned`` -> ``.swap``), 3. ``old-deleted`` (old segments -> ``.deleted``),
4. ``renamed`` (``.swap`` dropped): see log/replace.py. The loader finishes or rolls back an
   interrupted replacement on the next load; ``crash_hook(step)`` runs after each step.

An abort (``check_done`` raising LogCleaningAbortedError), an error or a crash before step 1
leaves the old segments untouched; the cleaner removes its ``.cleaned`` files itself (Kafka
does on abort only; the loader removes any left by a crash).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..fileio import CrashHook
from ..index.txn_index import AbortedTxn
from ..log.log import Log
from ..log.log_config import LogConfig
from ..log.names import TopicPartition
from ..log.segment import INT32_MAX, LogSegment
from .appender import INLINE_GROUP_BYTES, appender_for
from .filter import Destination, SegmentFilter
from .grouping import group_segments_by_size
from .map_builder import MapBuilder
from .offset_map import OffsetMap
from .producers import LastRecord, last_records_of_active_producers
from .round_progress import LiveRound, RoundProgress
from .selection import LogToClean
from .stats import CleanerStats, MonotonicMs, monotonic_ms
from .throttler import Throttler
from .txn import AbortedTxns, CleanedTransactionMetadata

CheckDone = Callable[[TopicPartition], None]
INDEX_ENTRY_MAX_BYTES = 12  # a time index entry; an offset index entry is 8


# groups swapped in together: while their input stays within both bounds (module docstring)
SWAP_BATCH_BYTES = 32 << 20
SWAP_BATCH_GROUPS = 64


def swap_batches(groups: Sequence[Sequence[LogSegment]]) -> list[list[Sequence[LogSegment]]]:
    """Consecutive groups cut into the batches swapped in together: a batch ends before the group
    that would take its input past SWAP_BATCH_BYTES or its count past SWAP_BATCH_GROUPS (a group
    bigger than that is a batch of its own)."""
    batches: list[list[Sequence[LogSegment]]] = []
    size = 0
    for group in groups:
        group_bytes = sum(seg.size_in_bytes for seg in group)
        if not batches or size + group_bytes > SWAP_BATCH_BYTES or len(batches[-1]) >= SWAP_BATCH_GROUPS:
            batches.append([])
            size = 0
        batches[-1].append(group)
        size += group_bytes
    return batches


def _uppers(segments: Sequence[LogSegment]) -> list[int]:
    """Where each segment's offsets end: the next one's base, the last one's next offset."""
    return [seg.base_offset for seg in segments[1:]] + [segments[-1].read_next_offset()]


class _Output:
    """A cleaned segment being written: the last group it holds so far, what appends to it
    (entered; left by ``_GroupWriter._close`` or ``abandon``) and the aborted transactions it
    will index."""

    def __init__(self, segment: LogSegment, group: int, group_bytes: int) -> None:
        self.segment = segment
        self.last = group
        self.inline = group_bytes <= INLINE_GROUP_BYTES
        self.appender = appender_for(segment, group_bytes).__enter__()  # a big group: written on a helper
        self.aborted: list[AbortedTxn] = []


class _GroupWriter:
    """The cleaned segments of a batch of groups, written as the filter reaches each group
    (``open``, ``finish``); on a failure, ``abandon`` deletes them all.

    A group joins the cleaned segment of the group before when what it will add fits
    (``_joins``): Kafka groups segments by their bytes before cleaning, so a log of 1 MiB segments
    of which a round keeps a tenth came out as as many cleaned segments of a tenth of a MiB; here
    they come out as full ones. Creating, trimming, syncing and renaming a cleaned segment's files
    was most of such a round (bench/results/kafka_cleaner.md), and the next round reads fewer
    segments. Whether a group fits is decided with its first window cleaned: its bytes then are
    the window's output plus the group's input bytes still to come, an upper bound (a cleaned
    batch is never longer than its source, compression aside, as Kafka's grouping assumes too).
    The merged segment is what Kafka's grouping makes of the same segments one round later:
    within segment.bytes, its indexes within their size, its offsets within an int32 span of its
    base offset."""

    def __init__(self, log: Log, groups: Sequence[Sequence[LogSegment]], uppers: Sequence[int]) -> None:
        self._log = log
        self._groups = groups
        self._uppers = uppers  # the first offset after each group
        self._bytes = [sum(seg.size_in_bytes for seg in segments) for segments in groups]
        self.written: list[LogSegment] = []
        self._out: _Output | None = None

    def open(self, g: int, dropped: int) -> Destination:
        """Where group ``g``'s windows go: the cleaned segment being written when ``g`` fits in it,
        else a new ``.cleaned`` segment; ``dropped`` is how many bytes its first window's cleaning
        removed (0 before any window)."""
        out = self._out
        if out is not None and self._joins(out, g, self._bytes[g] - dropped):
            out.last = g
            return out.appender
        if out is not None:
            self._close(out)
        max_index_size = cleaned_index_bound(max(self._bytes[g], self._merge_bytes(g)), self._log.config)
        self._out = _Output(self._log.new_cleaned_segment(self._groups[g][0].base_offset,
                                                          max_index_size=max_index_size), g, self._bytes[g])
        return self._out.appender

    def finish(self, g: int, aborted: list[AbortedTxn]) -> None:
        """Group ``g`` is cleaned; after the batch's last group, its segment is closed (whole,
        indexed and trimmed, not yet synced)."""
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

    def _merge_bytes(self, g: int) -> int:
        """The bytes a cleaned segment opened for group ``g`` may grow to by merging."""
        return self._log.config.segment_bytes if self._bytes[g] <= INLINE_GROUP_BYTES else 0

    def _joins(self, out: _Output, g: int, bound: int) -> bool:
        seg = out.segment
        # a segment written by a helper (a big group) is closed with its group: its size is not
        # known on this thread until then
        if not out.inline or self._bytes[g] > INLINE_GROUP_BYTES:
            return False
        offset_entries = sum(s.offset_index.entries for s in self._groups[g])
        time_entries = sum(s.time_index.entries for s in self._groups[g]) + 1  # + the final entry
        return (seg.size_in_bytes + bound <= self._log.config.segment_bytes
                and (self._bytes[g] == 0 or self._uppers[g] - 1 - seg.base_offset <= INT32_MAX)
                and seg.offset_index.entries + offset_entries <= seg.offset_index.max_entries
                and seg.time_index.entries + time_entries <= seg.time_index.max_entries)

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


def cleaned_index_bound(group_bytes: int, config: LogConfig) -> int:
    """The bytes to allocate for each index of the segment a group of ``group_bytes`` is cleaned into.

    Not ``segment.index.bytes`` (10 MiB) for every cleaned segment: allocating, mapping and then
    trimming that for each 1 MiB segment was a fixed cost of every group. An index entry follows
    more than ``index.interval.bytes`` of batches since the previous one (segment.py), so B bytes
    of batches make at most B // interval + 1 entries, the time index one more (the final entry
    when the segment becomes inactive). A cleaned segment holds fewer bytes than its group (records
    only go); the bound allows twice the group's bytes anyway, and never more than the config's.
    """
    entries = 2 * group_bytes // max(config.index_interval_bytes, 1) + 8
    return min(config.max_index_size, entries * INDEX_ENTRY_MAX_BYTES)


def _never_done(_tp: TopicPartition) -> None:
    return None


class Cleaner:
    def __init__(
        self,
        cleaner_id: int,
        offset_map: OffsetMap,
        *,
        io_buffer_size: int = 256 * 1024,
        max_io_buffer_size: int = 1048588,
        load_factor: float = 0.9,
        throttler: Throttler | None = None,
        clock_ms: Callable[[], int],
        stats_clock_ms: MonotonicMs = monotonic_ms,
        check_done: CheckDone = _never_done,
        producer_expiration_ms: int = 86_400_000,
        crash_hook: CrashHook | None = None,
    ) -> None:
        if offset_map.capacity_slots * load_factor <= 1:
            raise ValueError("offset map is too small to fit in even a single message, so log cleaning will "
                             "never make progress: raise log.cleaner.dedupe.buffer.size or lower "
                             "log.cleaner.threads")
        self.id = cleaner_id
        self.offset_map = offset_map
        self.io_buffer_size = io_buffer_size
        self.max_io_buffer_size = max_io_buffer_size
        self.load_factor = load_factor
        self.throttler = throttler
        self.clock_ms = clock_ms
        self.stats_clock_ms = stats_clock_ms
        self.check_done = check_done
        self.producer_expiration_ms = producer_expiration_ms
        self.crash_hook = crash_hook
        self._live: LiveRound | None = None  # the round running now (round_progress.py)

    # ------------------------------------------------------------------ a round
    def clean(self, cleanable: LogToClean) -> tuple[int, CleanerStats]:
        return self.do_clean(cleanable, self.clock_ms())

    def progress(self) -> RoundProgress | None:
        """How far the round running now has come; None between rounds. Any thread may ask."""
        live = self._live
        return live.snapshot() if live is not None else None

    def do_clean(self, cleanable: LogToClean, now_ms: int) -> tuple[int, CleanerStats]:
        """Clean the log of ``cleanable``; return the first offset not cleaned and the stats."""
        stats = CleanerStats(self.stats_clock_ms)
        live = LiveRound(cleanable.topic_partition, stats, cleanable.cleanable_bytes)
        self._live = live
        try:
            return self._do_clean(cleanable, now_ms, stats, live)
        finally:
            self._live = None

    def _do_clean(self, cleanable: LogToClean, now_ms: int, stats: CleanerStats,
                  live: LiveRound) -> tuple[int, CleanerStats]:
        log = cleanable.log
        upper_bound = cleanable.first_uncleanable_offset
        self.build_offset_map(log, cleanable.first_dirty_offset, upper_bound, self.offset_map, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.index_done()
        txns = CleanedTransactionMetadata()
        groups = group_segments_by_size(log.segments.values(0, end_offset), log.config.segment_bytes,
                                        log.config.max_index_size, upper_bound)
        live.rewrite_bytes = sum(seg.size_in_bytes for group in groups for seg in group)
        # once a round, not once a group (it reads every segment's batch headers: with 1 MiB segments
        # that made a round quadratic in the segments). Producers that append or expire meanwhile
        # only make this keep a batch the current state would let go: never the other way round.
        last_records = last_records_of_active_producers(log, self.clock_ms(), self.producer_expiration_ms)
        aborted = AbortedTxns(log.segments, log.log_start_offset, groups[0][0].base_offset) if groups else None
        batches = swap_batches(groups)
        for i, batch in enumerate(batches):
            # the last step's directory fsync of a batch is the next batch's first (replace.py)
            self.clean_groups(log, batch, self.offset_map, now_ms, stats, txns, upper_bound,
                              last_records=last_records, aborted=aborted, sync_renamed=i == len(batches) - 1)
        stats.buffer_utilization = self.offset_map.utilization
        stats.all_done()
        return end_offset, stats

    def build_offset_map(self, log: Log, start: int, end: int, offset_map: OffsetMap,
                         stats: CleanerStats) -> None:
        builder = MapBuilder(io_buffer_size=self.io_buffer_size, max_io_buffer_size=self.max_io_buffer_size,
                             load_factor=self.load_factor, check_done=self._checker(log),
                             throttler=self.throttler)
        builder.build(log, start, end, offset_map, stats)

    def clean_segments(self, log: Log, segments: Sequence[LogSegment], offset_map: OffsetMap,
                       now_ms: int, stats: CleanerStats, txns: CleanedTransactionMetadata,
                       upper_bound: int) -> None:
        """Clean ``segments`` into one segment and swap it in for them."""
        self.clean_groups(log, [segments], offset_map, now_ms, stats, txns, upper_bound)

    def clean_groups(self, log: Log, groups: Sequence[Sequence[LogSegment]], offset_map: OffsetMap,
                     now_ms: int, stats: CleanerStats, txns: CleanedTransactionMetadata, upper_bound: int, *,
                     last_records: dict[int, LastRecord] | None = None, aborted: AbortedTxns | None = None,
                     sync_renamed: bool = True) -> None:
        """Clean each group into one segment, then swap them all in for the groups in one
        replacement (one fsync of each file, two of the directory for all of them: ``swap_batches``)."""
        if last_records is None:
            # producers expire on the broker's clock; ``now_ms`` is the round's time for horizons
            last_records = last_records_of_active_producers(log, self.clock_ms(), self.producer_expiration_ms)
        if aborted is None:  # read once for every group, as a round does (AbortedTxns)
            first = groups[0][0].base_offset if groups and groups[0] else log.log_start_offset
            aborted = AbortedTxns(log.segments, log.log_start_offset, first)
        uppers = [_uppers(segments) for segments in groups]
        writer = _GroupWriter(log, groups, [up[-1] for up in uppers])
        swapping = False
        try:
            sources = [[(seg, aborted.collect(seg.base_offset, up)) for seg, up in zip(segments, ups)]
                       for segments, ups in zip(groups, uppers)]
            filt = SegmentFilter(now_ms=now_ms, delete_retention_ms=log.config.delete_retention_ms,
                                 check_done=self._checker(log), throttler=self.throttler)
            filt.clean_groups_into(sources, writer.open, writer.finish, offset_map, txns, last_records, upper_bound,
                                   stats)
            for cleaned in writer.written:
                cleaned.flush()  # their writeback was started as they were written
            swapping = True  # from here a failure is a crash between replace.py's steps
            log.replace_segments(writer.written, [seg for segments in groups for seg in segments],
                                 crash_hook=self.crash_hook, sync_renamed=sync_renamed)
        except BaseException as e:
            if not swapping:
                writer.abandon(e)
            raise

    def group_segments_by_size(self, segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                               first_uncleanable_offset: int) -> list[list[LogSegment]]:
        return group_segments_by_size(segments, max_size, max_index_size, first_uncleanable_offset)

    def _checker(self, log: Log) -> Callable[[], None]:
        tp = log.topic_partition
        check = self.check_done
        return lambda: check(tp)
