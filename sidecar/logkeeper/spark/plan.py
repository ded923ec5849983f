"""The plan of a Spark compaction: what the driver reads from a partition directory before any
Spark work (no pyspark here).

The partition directory is opened read-only (``PartitionSnapshot``): every ``<base>.log`` with
its indexes, nothing renamed, recovered or deleted, so the job may run while the sidecar owns the
directory and appends to its active segment (the last one, never read past its current size and
never touched). Temporary files (``.cleaned``, ``.swap``, ``.deleted``) are ignored.

The round is the one the in-process cleaner would run with a map large enough for every key:

- first dirty offset: ``--first-dirty-offset``, else the ``cleaner-offset-checkpoint`` entry,
  reset to the log start offset when missing or out of range (selection.py's rules); the log
  start offset is ``--log-start-offset``, else the ``log-start-offset-checkpoint`` entry, never
  below the first segment's base;
- end offset (the first uncleanable offset, a segment base): ``--end-offset``, else the base of
  the segment holding min(last stable offset, active segment base, the first segment newer than
  min.compaction.lag.ms); the last stable offset comes from the transactional batch headers;
- the segments of [log start, end offset) are grouped as the cleaner groups them (grouping.py);
  the new cleaner checkpoint is the end offset.

Per group the plan carries what the in-process cleaner holds when it reaches the group: the
transaction state (``CleanedTransactionMetadata``, replayed with ``SegmentFilter.read_transactions``
over every earlier segment) and each segment's aborted transactions (txn.py); and, for the
whole round, the last records of the active producers (producers.py) and ``now_ms``.

Chunks (the map side): batch-aligned runs of about ``chunk_bytes`` of one segment, one per Spark
task. Dirty chunks cover the dirty segments from the offset-index position of the first dirty
offset, and list the positions of their aborted data batches (MapBuilder.batch_modes over
``collect_aborted`` of the dirty section: the batches the in-process map skips); clean chunks
cover the batches below the first dirty offset, when there are any.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cleaner.filter import SegmentFilter
from ..cleaner.grouping import group_segments_by_size
from ..cleaner.map_builder import MapBuilder
from ..cleaner.map_kernel import MODE_ABORTED
from ..cleaner.producers import LastRecord, last_records_in
from ..cleaner.segment_view import SegmentView
from ..cleaner.txn import AbortedTxns, CleanedTransactionMetadata, collect_aborted_in
from ..index.txn_index import AbortedTxn
from ..log import names
from ..log.checkpoint import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from ..log.log_config import LogConfig
from ..log.names import TopicPartition
from ..log.producer_state import ProducerStateManager, end_txn_marker_of
from ..log.segment import LogSegment
from ..log.segments import LogSegments
from ..records.batch import BatchHeader
from ..records.batch_format import TRANSACTIONAL_FLAG

DIRTY = 0
CLEAN = 1
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
MIN_OFFSET = -(1 << 62)
OFFSET_BITS = 43  # offsets are packed with a 20-bit group number into one int64
GROUP_BITS = 20


class PlanError(Exception):
    """The partition cannot be planned (no such directory, no dirty section, offsets too large)."""


def open_segment(partition_dir: Path, base_offset: int, config: LogConfig) -> LogSegment:
    """A segment opened read-only (its files are neither created, trimmed nor changed)."""
    return LogSegment.for_config(partition_dir, base_offset, config, writable=False)


class PartitionSnapshot:
    """The segments of a partition directory as they are now, read-only."""

    def __init__(self, partition_dir: Path, config: LogConfig) -> None:
        self.dir = Path(partition_dir)
        if not self.dir.is_dir():
            raise PlanError(f"{self.dir} is not a directory")
        self.topic_partition = names.PartitionDirName.parse(self.dir.name).topic_partition
        self.config = config
        self.segments = LogSegments()
        bases = []
        for entry in os.scandir(self.dir):
            name = entry.name
            if name.endswith(names.LOG_SUFFIX):
                try:
                    bases.append(names.offset_from_file_name(name))
                except ValueError:
                    continue
        try:
            for base in sorted(bases):
                self.segments.add(open_segment(self.dir, base, config))
        except BaseException:
            self.close()
            raise
        last = self.segments.last
        if last is None:
            raise PlanError(f"{self.dir} has no segment")
        self.active_segment: LogSegment = last  # a snapshot: its segments do not change

    def close(self) -> None:
        for seg in self.segments.values():
            seg.close_handlers()

    def __enter__(self) -> PartitionSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def last_stable_offset(self, log_end_offset: int) -> int:
        """From the transactional batch headers, as Log rebuilds its producer state."""
        state = ProducerStateManager()
        for seg in self.segments.values():
            table = seg.log.scan()
            for i in np.flatnonzero(table.attributes & TRANSACTIONAL_FLAG).tolist():
                raw = seg.log.read(int(table.position[i]), int(table.size[i]))
                header = BatchHeader.parse(raw)
                state.on_batch(header, end_txn_marker_of(raw, header) if header.is_control else None)
        return state.last_stable_offset(log_end_offset)


@dataclass(frozen=True)
class RewriteConfig:
    """The settings that shape the cleaned segments (their keys are the topic's)."""

    segment_bytes: int
    max_index_size: int
    index_interval_bytes: int
    delete_retention_ms: int
    producer_expiration_ms: int

    def to_props(self) -> dict[str, int]:
        return {"segment.bytes": self.segment_bytes, "segment.index.bytes": self.max_index_size,
                "index.interval.bytes": self.index_interval_bytes, "delete.retention.ms": self.delete_retention_ms,
                "producer.id.expiration.ms": self.producer_expiration_ms}


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    size: int


@dataclass(frozen=True)
class ChunkInfo:
    chunk_id: int
    segment: int  # index into CompactionPlan.segments
    start_position: int
    end_position: int
    group: int
    side: int  # DIRTY or CLEAN
    skip_positions: tuple[int, ...]  # aborted data batches (dirty chunks)


@dataclass(frozen=True)
class GroupPlan:
    index: int
    segments: tuple[int, ...]  # indexes into CompactionPlan.segments
    aborted: tuple[tuple[AbortedTxn, ...], ...]  # per segment, as Cleaner.clean_segments collects them
    txns: CleanedTransactionMetadata  # the transaction state when the cleaner reaches the group

    def first_offset(self, plan: CompactionPlan) -> int:
        return plan.segments[self.segments[0]].base_offset


@dataclass(frozen=True)
class CompactionPlan:
    partition_dir: str
    topic_partition: str
    now_ms: int
    log_start_offset: int
    first_dirty_offset: int
    end_offset: int
    config: RewriteConfig
    segments: tuple[SegmentInfo, ...]
    groups: tuple[GroupPlan, ...]
    chunks: tuple[ChunkInfo, ...]
    last_records: dict[int, LastRecord]
    dirty_bytes: int
    clean_bytes: int

    @property
    def latest_offset(self) -> int:
        return self.end_offset - 1

    @property
    def has_clean_side(self) -> bool:
        return any(c.side == CLEAN for c in self.chunks)

    def open_segment(self, index: int, config: LogConfig) -> LogSegment:
        return open_segment(Path(self.partition_dir), self.segments[index].base_offset, config)

    def log_config(self) -> LogConfig:
        c = self.config
        return LogConfig.from_props({"segment.bytes": c.segment_bytes, "segment.index.bytes": c.max_index_size,
                                     "index.interval.bytes": c.index_interval_bytes,
                                     "delete.retention.ms": c.delete_retention_ms})


@dataclass(frozen=True)
class Offsets:
    """Offsets the caller fixes (the sidecar passes its own view); None: read from the directory."""

    log_start_offset: int | None = None
    first_dirty_offset: int | None = None
    end_offset: int | None = None


def _checkpoint(path: Path, tp: TopicPartition) -> int | None:
    return OffsetCheckpointFile(path).read().get(tp) if path.exists() else None


def _round_offsets(snap: PartitionSnapshot, log_dir: Path, offsets: Offsets, now_ms: int) -> tuple[int, int, int]:
    tp = snap.topic_partition
    first_base = snap.segments.first.base_offset if snap.segments.first is not None else 0
    start = offsets.log_start_offset
    if start is None:
        start = _checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, tp) or 0
    start = max(start, first_base)
    active = snap.active_segment
    log_end = active.read_next_offset()
    dirty = offsets.first_dirty_offset
    if dirty is None:
        dirty = _checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, tp)
    if dirty is None or dirty < start or dirty > log_end:
        dirty = start
    end = offsets.end_offset
    if end is None:
        bounds = [snap.last_stable_offset(log_end), active.base_offset]
        lag = max(snap.config.min_compaction_lag_ms, 0)
        if lag > 0:
            for seg in snap.segments.values(dirty, active.base_offset):
                if seg.largest_timestamp > now_ms - lag:
                    bounds.append(seg.base_offset)
                    break
        uncleanable = max(dirty, min(bounds))
        after = snap.segments.values(uncleanable, active.base_offset)
        end = after[0].base_offset if after else active.base_offset
    if end not in snap.segments:
        raise PlanError(f"end offset {end} of {tp} is not a segment's base offset")
    if end > active.base_offset:
        raise PlanError(f"end offset {end} of {tp} is beyond its active segment (base {active.base_offset})")
    return start, dirty, end


def _chunks_of(view: SegmentView, max_bytes: int) -> Iterable[tuple[int, int]]:
    """Batch-aligned (start, end) positions of runs of about ``max_bytes``."""
    t = view.table
    for lo, hi in view.windows(max_bytes):
        yield int(t.position[lo]), int(t.position[hi - 1] + t.size[hi - 1])


def plan_compaction(log_dir: Path, tp: TopicPartition, config: LogConfig, *, now_ms: int,
                    producer_expiration_ms: int, offsets: Offsets | None = None,
                    chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> CompactionPlan:
    """Read the partition ``tp`` of ``log_dir`` and plan one exact round over its dirty section."""
    partition_dir = Path(log_dir) / tp.dir_name
    with PartitionSnapshot(partition_dir, config) as snap:
        start, dirty, end = _round_offsets(snap, Path(log_dir), offsets or Offsets(), now_ms)
        if end <= dirty:
            raise PlanError(f"{tp} has no dirty section to clean: [{dirty}, {end})")
        if end >= 1 << OFFSET_BITS:
            raise PlanError(f"offsets of {tp} reach {end}, beyond the 2^{OFFSET_BITS} the job packs")
        segs = snap.segments.values(0, end)
        groups_segs = group_segments_by_size(segs, config.segment_bytes, config.max_index_size, end)
        if len(groups_segs) >= 1 << GROUP_BITS:
            raise PlanError(f"{tp} would need {len(groups_segs)} cleaned segments, more than the job packs")
        index_of = {s.base_offset: i for i, s in enumerate(segs)}
        infos = tuple(SegmentInfo(s.base_offset, s.size_in_bytes) for s in segs)
        dirty_segs = snap.segments.values(dirty, end)
        dirty_bases = {s.base_offset for s in dirty_segs}

        # the map side's aborted batches, as MapBuilder.build walks the dirty section
        map_txns = CleanedTransactionMetadata()
        map_txns.add_aborted_transactions(collect_aborted_in(snap.segments, start, dirty, end))
        # the rewriting side's transaction state, as Cleaner.clean_segments walks every group
        txns = CleanedTransactionMetadata()
        aborted_txns = AbortedTxns(snap.segments, start, segs[0].base_offset if segs else start)
        groups: list[GroupPlan] = []
        chunks: list[ChunkInfo] = []
        clean_bytes = dirty_bytes = 0
        for g, group in enumerate(groups_segs):
            txns.kept_aborted = []  # the walk's, not the group's: the rewrite collects its own
            snapshot = copy.deepcopy(txns)
            aborted: list[tuple[AbortedTxn, ...]] = []
            for i, seg in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else seg.read_next_offset()
                found = aborted_txns.collect(seg.base_offset, upper)
                aborted.append(tuple(found))
                txns.add_aborted_transactions(found)
                with SegmentView(seg) as view:
                    if view.count:
                        SegmentFilter.read_transactions(view, txns)
                    clean_rows = np.flatnonzero(view.table.base_offset < dirty)
                    if clean_rows.size:
                        last = int(clean_rows[-1])
                        end_pos = int(view.table.position[last] + view.table.size[last])
                        with SegmentView(seg, 0, end_pos) as clean_view:
                            for lo, hi in _chunks_of(clean_view, chunk_bytes):
                                chunks.append(ChunkInfo(len(chunks), index_of[seg.base_offset], lo, hi, g, CLEAN, ()))
                if seg.base_offset not in dirty_bases:
                    clean_bytes += seg.size_in_bytes
                    continue
                dirty_bytes += seg.size_in_bytes
                position = seg.start_position(dirty)
                with SegmentView(seg, position) as view:
                    if view.count == 0:
                        continue
                    modes = MapBuilder.batch_modes(view, map_txns)
                    aborted_positions = view.table.position[modes == MODE_ABORTED]
                    for lo, hi in _chunks_of(view, chunk_bytes):
                        skip = aborted_positions[(aborted_positions >= lo) & (aborted_positions < hi)]
                        chunks.append(ChunkInfo(len(chunks), index_of[seg.base_offset], lo, hi, g, DIRTY,
                                                tuple(int(x) for x in skip.tolist())))
            groups.append(GroupPlan(g, tuple(index_of[s.base_offset] for s in group), tuple(aborted), snapshot))
        last_records = last_records_in(snap.segments.values(), now_ms, producer_expiration_ms)
        rewrite = RewriteConfig(config.segment_bytes, config.max_index_size, config.index_interval_bytes,
                                config.delete_retention_ms, producer_expiration_ms)
        return CompactionPlan(str(partition_dir), str(tp), now_ms, start, dirty, end, rewrite, infos, tuple(groups),
                              tuple(chunks), last_records, dirty_bytes, clean_bytes)
