"""Writing one group's cleaned segment into the staging directory (the reduce side of the Spark
job; no pyspark here).

The same code as the in-process cleaner's ``Cleaner.clean_segments`` up to its swap: a new
segment at the group's first base offset, each source segment copied through
``SegmentFilter.clean_into`` (the compiled filter and re-encoder) with the group's transaction
state and aborted transactions from the plan, and the survivors decided by ``ExactDecisions``
instead of the offset map; then the final time index entry, trimmed indexes, fsync, and the
modification time of the group's last segment. The files are named as live segments
(``<base>.log``, ``.index``, ``.timeindex``, ``.txnindex`` when an aborted transaction is kept)
inside the staging directory; the sidecar renames them to ``.cleaned`` in the partition directory
when it swaps them in.

Each call writes into a private directory ``<out>/.group-<g>-<random>/`` and, once the files are
complete and fsynced, renames each into ``<out>/`` (then fsyncs ``<out>``): a retried or
speculative task attempt of the same group writes the same bytes (the rewrite depends on the
plan only), so whichever rename lands last leaves whole, identical files, and a killed attempt
leaves only its private directory behind.

The source segments are read by path and must still have the size the plan saw; each one's
CRC-32C (of the whole ``.log`` file) goes into the manifest so the sidecar can tell that what it
replaces is what was read.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cleaner.appender import WindowAppender
from ..cleaner.exact import ExactDecisions
from ..cleaner.filter import SegmentFilter
from ..cleaner.offload_manifest import InputSegment, Manifest, OutputSegment, StagedFile
from ..cleaner.stats import CleanerStats
from ..fileio import fsync_dir
from ..log import names
from ..log.segment import LogSegment
from ..records.batch import file_crc32c
from .plan import CompactionPlan


class StaleInputError(Exception):
    """A source segment changed since the plan was made."""


@dataclass(frozen=True)
class GroupOutput:
    group: int
    base_offset: int
    replaces: tuple[int, ...]
    inputs: tuple[InputSegment, ...]  # the source .log files read
    files: tuple[StagedFile, ...]  # the files written in the staging directory
    messages_read: int
    bytes_read: int
    messages_written: int
    bytes_written: int
    invalid_messages: int


def _noop() -> None:
    return None


def rewrite_group(plan: CompactionPlan, group_index: int, decisions: ExactDecisions, out_dir: Path) -> GroupOutput:
    """Clean the segments of one group into ``out_dir`` (replacing the files of an earlier attempt)."""
    group = plan.groups[group_index]
    config = plan.log_config()
    out_dir.mkdir(parents=False, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".group-{group_index}-", dir=out_dir))
    sources = [plan.open_segment(i, config) for i in group.segments]
    try:
        for i, seg in zip(group.segments, sources):
            if seg.size_in_bytes != plan.segments[i].size:
                raise StaleInputError(f"{seg.log.path} is {seg.size_in_bytes} bytes, the plan read "
                                      f"{plan.segments[i].size}: it changed")
        base = sources[0].base_offset
        cleaned = LogSegment.for_config(work, base, config, clock_ms=lambda: plan.now_ms, lazy_index_blocks=True)
        try:
            txns = copy.deepcopy(group.txns)
            stats = CleanerStats()
            filt = SegmentFilter(now_ms=plan.now_ms, delete_retention_ms=plan.config.delete_retention_ms,
                                 check_done=_noop)
            with WindowAppender(cleaned) as appender:  # writes a window while the next is cleaned
                kept = filt.clean_into(list(zip(sources, group.aborted)), appender, decisions, txns,
                                       plan.last_records, plan.end_offset, stats)
            for txn in kept:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified_ms(sources[-1].last_modified_ms)
        finally:
            cleaned.close_handlers()
        inputs = []
        for seg in sources:
            size, crc = file_crc32c(seg.log.path)
            inputs.append(InputSegment(seg.base_offset, seg.log.path.name, size, crc))
        files = []
        for suffix in names.SEGMENT_SUFFIXES:
            path = names.segment_file(work, base, suffix)
            if path.exists():
                size, crc = file_crc32c(path)
                files.append(StagedFile(path.name, size, crc))
        for f in files:
            os.replace(work / f.name, out_dir / f.name)
        fsync_dir(out_dir)
        return GroupOutput(group_index, base, tuple(s.base_offset for s in sources), tuple(inputs), tuple(files),
                           stats.messages_read, stats.bytes_read, stats.messages_written, stats.bytes_written,
                           stats.invalid_messages_read)
    finally:
        for seg in sources:
            seg.close_handlers()
        shutil.rmtree(work, ignore_errors=True)


def build_manifest(plan: CompactionPlan, outputs: Sequence[GroupOutput], keys: int, seconds: float,
                   spark: dict[str, Any]) -> Manifest:
    """The manifest of a round whose groups are all written (outputs in offset order)."""
    if [o.group for o in outputs] != [g.index for g in plan.groups]:
        raise RuntimeError(f"the job wrote groups {[o.group for o in outputs]}, the plan has {len(plan.groups)}")
    stats = {"keys": keys, "messages_read": sum(o.messages_read for o in outputs),
             "bytes_read": sum(o.bytes_read for o in outputs),
             "messages_written": sum(o.messages_written for o in outputs),
             "bytes_written": sum(o.bytes_written for o in outputs),
             "invalid_messages": sum(o.invalid_messages for o in outputs),
             "dirty_bytes": plan.dirty_bytes, "clean_bytes": plan.clean_bytes, "chunks": len(plan.chunks),
             "groups": len(plan.groups), "spark_seconds": round(seconds, 3)}
    return Manifest(plan.topic_partition, plan.partition_dir, plan.now_ms, plan.log_start_offset,
                    plan.first_dirty_offset, plan.end_offset, plan.end_offset, plan.config.to_props(),
                    tuple(i for o in outputs for i in o.inputs),
                    tuple(OutputSegment(o.base_offset, o.replaces, o.files) for o in outputs), stats, dict(spark))
