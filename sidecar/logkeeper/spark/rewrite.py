"""Writing one batch of groups' cleaned segments into the staging directory (the reduce side of
the Spark job; no pyspark here).

The same code as the in-process cleaner's ``Cleaner.clean_groups`` up to its swap: the groups are
cut into the same batches (group_writer.write_batches), and a batch's groups are cleaned as one
stream by ``SegmentFilter.clean_groups_into`` (the compiled filter and re-encoder) into the
segments ``GroupWriter`` makes, consecutive small groups merged as the cleaner merges them, so that
the staged segments are the cleaner's byte for byte. The transaction state at the batch's first
group and each segment's aborted transactions come from the plan, and the survivors are decided by
``ExactDecisions`` instead of the offset map; each segment is fsynced once written. The files are
named as live segments (``<base>.log``, ``.index``, ``.timeindex``, ``.txnindex`` when an aborted
transaction is kept) inside the staging directory; the sidecar renames them to ``.cleaned`` in the
partition directory when it swaps them in.

Each call writes into a private directory ``<out>/.batch-<first group>-<random>/`` and, once the
files are complete and fsynced, renames each into ``<out>/`` (then fsyncs ``<out>``): a retried or
speculative task attempt of the same batch writes the same bytes (the rewrite depends on the plan
only), so whichever rename lands last leaves whole, identical files, and a killed attempt leaves
only its private directory behind.

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

from ..cleaner.exact import ExactDecisions
from ..cleaner.filter import SegmentFilter
from ..cleaner.group_writer import GroupWriter, group_uppers, write_batches
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
class SegmentOutput:
    base_offset: int
    replaces: tuple[int, ...]
    inputs: tuple[InputSegment, ...]  # the source .log files read
    files: tuple[StagedFile, ...]  # the files written in the staging directory


@dataclass(frozen=True)
class BatchOutput:
    batch: int
    segments: tuple[SegmentOutput, ...]
    messages_read: int
    bytes_read: int
    messages_written: int
    bytes_written: int
    invalid_messages: int


def _noop() -> None:
    return None


def plan_batches(plan: CompactionPlan) -> list[range]:
    """The plan's groups cut into the batches the in-process cleaner writes together."""
    return write_batches([sum(plan.segments[i].size for i in g.segments) for g in plan.groups])


def rewrite_batch(plan: CompactionPlan, batch_index: int, decisions: ExactDecisions, out_dir: Path) -> BatchOutput:
    """Clean the groups of batch ``batch_index`` (``plan_batches``) into ``out_dir`` (replacing the
    files of an earlier attempt)."""
    batch = plan_batches(plan)[batch_index]
    groups = [plan.groups[g] for g in batch]
    config = plan.log_config()
    out_dir.mkdir(parents=False, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".batch-{batch.start}-", dir=out_dir))
    sources = [[plan.open_segment(i, config) for i in g.segments] for g in groups]
    try:
        for g, segs in zip(groups, sources):
            for i, seg in zip(g.segments, segs):
                if seg.size_in_bytes != plan.segments[i].size:
                    raise StaleInputError(f"{seg.log.path} is {seg.size_in_bytes} bytes, the plan read "
                                          f"{plan.segments[i].size}: it changed")
        writer = GroupWriter(lambda base, index_bytes: LogSegment.for_config(
            work, base, config, max_index_size=index_bytes, clock_ms=lambda: plan.now_ms, lazy_index_blocks=True),
            config, sources, [group_uppers(segs)[-1] for segs in sources])
        stats = CleanerStats()
        filt = SegmentFilter(now_ms=plan.now_ms, delete_retention_ms=plan.config.delete_retention_ms, check_done=_noop)
        try:
            filt.clean_groups_into([list(zip(segs, g.aborted)) for segs, g in zip(sources, groups)], writer.open,
                                   writer.finish, decisions, copy.deepcopy(groups[0].txns), plan.last_records,
                                   plan.end_offset, stats)
            for cleaned in writer.written:
                cleaned.flush()
        except BaseException as e:
            writer.abandon(e)  # deletes (and closes) what was made
            raise
        for cleaned in writer.written:
            cleaned.close_handlers()
        outputs = []
        for cleaned, merged in zip(writer.written, writer.merged):
            read = [seg for g in merged for seg in sources[g]]
            inputs = []
            for seg in read:
                size, crc = file_crc32c(seg.log.path)
                inputs.append(InputSegment(seg.base_offset, seg.log.path.name, size, crc))
            files = []
            for suffix in names.SEGMENT_SUFFIXES:
                path = names.segment_file(work, cleaned.base_offset, suffix)
                if path.exists():
                    size, crc = file_crc32c(path)
                    files.append(StagedFile(path.name, size, crc))
            outputs.append(SegmentOutput(cleaned.base_offset, tuple(seg.base_offset for seg in read), tuple(inputs),
                                         tuple(files)))
        for out in outputs:
            for f in out.files:
                os.replace(work / f.name, out_dir / f.name)
        fsync_dir(out_dir)
        return BatchOutput(batch_index, tuple(outputs), stats.messages_read, stats.bytes_read, stats.messages_written,
                           stats.bytes_written, stats.invalid_messages_read)
    finally:
        for segs in sources:
            for seg in segs:
                seg.close_handlers()
        shutil.rmtree(work, ignore_errors=True)


def build_manifest(plan: CompactionPlan, outputs: Sequence[BatchOutput], keys: int, seconds: float,
                   spark: dict[str, Any]) -> Manifest:
    """The manifest of a round whose batches are all written (outputs in offset order)."""
    batches = len(plan_batches(plan))
    if [o.batch for o in outputs] != list(range(batches)):
        raise RuntimeError(f"the job wrote batches {[o.batch for o in outputs]}, the plan has {batches}")
    segments = [seg for o in outputs for seg in o.segments]
    replaced = [b for seg in segments for b in seg.replaces]
    if replaced != [plan.segments[i].base_offset for g in plan.groups for i in g.segments]:
        raise RuntimeError("the job's cleaned segments do not replace the plan's groups in order")
    stats = {"keys": keys, "messages_read": sum(o.messages_read for o in outputs),
             "bytes_read": sum(o.bytes_read for o in outputs),
             "messages_written": sum(o.messages_written for o in outputs),
             "bytes_written": sum(o.bytes_written for o in outputs),
             "invalid_messages": sum(o.invalid_messages for o in outputs),
             "dirty_bytes": plan.dirty_bytes, "clean_bytes": plan.clean_bytes, "chunks": len(plan.chunks),
             "groups": len(plan.groups), "spark_seconds": round(seconds, 3)}
    return Manifest(plan.topic_partition, plan.partition_dir, plan.now_ms, plan.log_start_offset,
                    plan.first_dirty_offset, plan.end_offset, plan.end_offset, plan.config.to_props(),
                    tuple(i for seg in segments for i in seg.inputs),
                    tuple(OutputSegment(seg.base_offset, seg.replaces, seg.files) for seg in segments), stats,
                    dict(spark))
