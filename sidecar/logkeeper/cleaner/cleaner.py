"""Cleaning one log, one round (Kafka's Cleaner).

A round (``do_clean``):

1. build the offset map of the dirty section [first dirty, first uncleanable) (map_builder.py);
   the round ends at the map's latest offset + 1 (``end_offset``: all of the dirty section, or
   less when the map filled);
2. group the segments from the log start up to ``end_offset`` (grouping.py);
3. clean each group into a new segment, consecutive small groups into one while their output
   fits, and swap them in for their groups, a batch of consecutive groups at a time
   (``clean_groups``; group_writer.py: the batches and the merging): with small segments
   (Kafka's 1 MiB) the fsyncs of each group's replacement, not the cleaning, were most of a
   round; a batch is written, then synced and swapped in by one replacement (each file fsynced,
   the directory twice). A crash before a batch's swap rolls the whole batch back. A batch's
   groups are cleaned as one stream of windows (filter.py ``clean_groups_into``): the next
   window, of this group or the next, is decided while this one is written.

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
from ..log.log import Log
from ..log.names import TopicPartition
from ..log.segment import LogSegment
from .filter import SegmentFilter
from .group_writer import GroupWriter, group_uppers, write_batches
from .grouping import group_segments_by_size
from .inflated import InflatedBatches, inflated_budget
from .map_builder import MapBuilder
from .offset_map import OffsetMap
from .producers import LastRecord, last_records_of_active_producers
from .round_progress import LiveRound, RoundProgress
from .selection import LogToClean
from .stats import CleanerStats, MonotonicMs, monotonic_ms
from .throttler import Throttler
from .txn import AbortedTxns, CleanedTransactionMetadata

CheckDone = Callable[[TopicPartition], None]


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
        inflated = InflatedBatches(inflated_budget(self.offset_map.capacity_slots))
        self.build_offset_map(log, cleanable.first_dirty_offset, upper_bound, self.offset_map, stats,
                              inflated=inflated)
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
        batches = write_batches([sum(seg.size_in_bytes for seg in group) for group in groups])
        for i, batch in enumerate(batches):
            # the last step's directory fsync of a batch is the next batch's first (replace.py)
            self.clean_groups(log, groups[batch.start:batch.stop], self.offset_map, now_ms, stats, txns, upper_bound,
                              last_records=last_records, aborted=aborted, sync_renamed=i == len(batches) - 1,
                              inflated=inflated)
        stats.buffer_utilization = self.offset_map.utilization
        stats.all_done()
        return end_offset, stats

    def build_offset_map(self, log: Log, start: int, end: int, offset_map: OffsetMap,
                         stats: CleanerStats, *, inflated: InflatedBatches | None = None) -> None:
        builder = MapBuilder(io_buffer_size=self.io_buffer_size, max_io_buffer_size=self.max_io_buffer_size,
                             load_factor=self.load_factor, check_done=self._checker(log),
                             throttler=self.throttler, inflated=inflated)
        builder.build(log, start, end, offset_map, stats)

    def clean_segments(self, log: Log, segments: Sequence[LogSegment], offset_map: OffsetMap,
                       now_ms: int, stats: CleanerStats, txns: CleanedTransactionMetadata,
                       upper_bound: int) -> None:
        """Clean ``segments`` into one segment and swap it in for them."""
        self.clean_groups(log, [segments], offset_map, now_ms, stats, txns, upper_bound)

    def clean_groups(self, log: Log, groups: Sequence[Sequence[LogSegment]], offset_map: OffsetMap,
                     now_ms: int, stats: CleanerStats, txns: CleanedTransactionMetadata, upper_bound: int, *,
                     last_records: dict[int, LastRecord] | None = None, aborted: AbortedTxns | None = None,
                     sync_renamed: bool = True, inflated: InflatedBatches | None = None) -> None:
        """Clean the groups into segments (group_writer.py: consecutive small ones merged), then
        swap them all in for the groups in one replacement (one fsync of each file, two of the
        directory for all of them)."""
        if last_records is None:
            # producers expire on the broker's clock; ``now_ms`` is the round's time for horizons
            last_records = last_records_of_active_producers(log, self.clock_ms(), self.producer_expiration_ms)
        if aborted is None:  # read once for every group, as a round does (AbortedTxns)
            first = groups[0][0].base_offset if groups and groups[0] else log.log_start_offset
            aborted = AbortedTxns(log.segments, log.log_start_offset, first)
        uppers = [group_uppers(segments) for segments in groups]
        writer = GroupWriter(lambda base, index_bytes: log.new_cleaned_segment(base, max_index_size=index_bytes),
                             log.config, groups, [up[-1] for up in uppers])
        swapping = False
        try:
            sources = [[(seg, aborted.collect(seg.base_offset, up)) for seg, up in zip(segments, ups)]
                       for segments, ups in zip(groups, uppers)]
            filt = SegmentFilter(now_ms=now_ms, delete_retention_ms=log.config.delete_retention_ms,
                                 check_done=self._checker(log), throttler=self.throttler, inflated=inflated)
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
