"""Helpers of the Spark hand-off tests: random workloads, the in-process reference round, and a
test double of the Spark stage (a Python dict over the same extracted keys, then the job's own
rewrite and manifest code) for tests that exercise the sidecar's side without a Spark session."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.exact import ExactDecisions
from logkeeper.cleaner.offload_manifest import SEGMENTS_DIR, Manifest, write_manifest
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean, cleanable_offsets
from logkeeper.fileio import CrashHook, no_crash
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.compression import Codec
from logkeeper.spark.extract import extract_keys
from logkeeper.spark.plan import CLEAN, DIRTY, MIN_OFFSET, CompactionPlan, Offsets, plan_compaction
from logkeeper.spark.rewrite import build_manifest, plan_batches, rewrite_batch
from tests.cleaner_logs import TxnProducer, append_kvs

NOW_MS = 1_700_000_000_000
HOUR = 3_600_000
TP = TopicPartition("t", 0)
CODECS = [Codec.NONE] * 4 + [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def config(seed: int = 0, **extra: object) -> LogConfig:
    """Topic settings of a workload (policy delete while writing: unkeyed records are allowed;
    the cleaner's round does not look at the policy; pass cleanup.policy=compact for a sidecar)."""
    rng = random.Random(seed)
    props: dict[str, object] = {"segment.bytes": rng.choice([1200, 3000, 6000]), "cleanup.policy": "delete",
                                "file.delete.delay.ms": 0, "delete.retention.ms": HOUR,
                                "index.interval.bytes": rng.choice([1, 200, 4096]),
                                "message.timestamp.before.max.ms": 100 * HOUR}
    props.update(extra)
    return LogConfig.from_props(props)


def write_workload(log: Log, rng: random.Random, steps: int, keys: int = 60) -> None:
    """Keyed records, tombstones, unkeyed records, headers, the five codecs, committed, aborted
    and empty transactions of three producers, an idempotent producer, rolls."""
    producers = {pid: TxnProducer(log, pid) for pid in (1, 2, 3)}
    open_txn: dict[int, bool] = dict.fromkeys(producers, False)
    # a new idempotent producer each call: the log checks a client's sequences (Log.append)
    idem_pid, idem_seq = rng.randrange(100, 1 << 40), 0
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.55:
            kvs = []
            for _ in range(rng.randrange(1, 6)):
                key = None if rng.random() < 0.04 else str(rng.randrange(keys)).encode()
                value = None if rng.random() < 0.15 else rng.randbytes(rng.randrange(0, 30))
                kvs.append((key, value))
            headers = (("h", b"x"),) if rng.random() < 0.2 else ()
            append_kvs(log, kvs, codec=rng.choice(CODECS), headers=headers)
        elif roll < 0.62:
            n = rng.randrange(1, 4)
            append_kvs(log, [(str(rng.randrange(keys)).encode(), b"i") for _ in range(n)], producer_id=idem_pid,
                       producer_epoch=0, base_sequence=idem_seq)
            idem_seq += n
        elif roll < 0.92:
            pid = rng.choice(list(producers))
            p = producers[pid]
            if not open_txn[pid] and rng.random() < 0.05:
                (p.commit if rng.random() < 0.5 else p.abort)()  # an empty transaction's marker
                continue
            p.append([rng.randrange(keys) for _ in range(rng.randrange(1, 4))], codec=rng.choice(CODECS),
                     value=None if rng.random() < 0.1 else b"t")
            open_txn[pid] = True
            if rng.random() < 0.4:
                (p.commit if rng.random() < 0.6 else p.abort)()
                open_txn[pid] = False
        elif roll < 0.97:
            log.roll()
    for pid, p in producers.items():
        if open_txn[pid]:
            (p.commit if rng.random() < 0.5 else p.abort)()
    log.roll()


def build_log(root: Path, seed: int, steps: int = 400, cfg: LogConfig | None = None,
              clock: Callable[[], int] = lambda: NOW_MS) -> Path:
    """A partition directory ``root/<log dir>/t-0`` with a random workload; returns the log dir."""
    log_dir = root / "data"
    log = Log(log_dir / TP.dir_name, cfg or config(seed), clock_ms=clock)
    write_workload(log, random.Random(seed), steps)
    log.flush()
    log.close()
    return log_dir


def copy_log_dir(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def workload_copies(root: Path, seed: int, *names: str, steps: int = 400) -> list[Path]:
    """The workload of ``seed`` built once (in root/src) and its log dir copied to root/<name> for
    each name: the copies a test compacts two ways (the in-process cleaner, the job) and compares."""
    src = build_log(root / "src", seed, steps=steps)
    return [copy_log_dir(src, root / name) for name in names]


def open_log(log_dir: Path, cfg: LogConfig, clock: Callable[[], int] = lambda: NOW_MS) -> Log:
    return Log(log_dir / TP.dir_name, cfg, clock_ms=clock)


def clean_in_process(log: Log, checkpoint: int | None, now_ms: int = NOW_MS,
                     map_slots: int = 1 << 20) -> int:
    """One round of the in-process cleaner (a map big enough for one pass); returns its end offset."""
    offsets = cleanable_offsets(log, checkpoint, now_ms)
    ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    cleaner = Cleaner(0, SipHashOffsetMap(slots=map_slots), clock_ms=lambda: now_ms)
    end, _stats = cleaner.do_clean(ltc, now_ms)
    return end


def clean_log_dir(log_dir: Path, cfg: LogConfig, checkpoint: int | None, now_ms: int = NOW_MS) -> int:
    """``clean_in_process`` on the partition of ``log_dir``, opened for the round (its clock at
    ``now_ms``) and closed after it; returns the round's end offset."""
    log = open_log(log_dir, cfg, clock=lambda: now_ms)
    try:
        return clean_in_process(log, checkpoint, now_ms)
    finally:
        log.close()


def set_checkpoint(log_dir: Path, offset: int) -> None:
    OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write({TP: offset})


def plan_of(log_dir: Path, cfg: LogConfig, now_ms: int = NOW_MS, offsets: Offsets | None = None,
            chunk_bytes: int = 64 * 1024 * 1024) -> CompactionPlan:
    return plan_compaction(log_dir, TP, cfg, now_ms=now_ms, producer_expiration_ms=86_400_000, offsets=offsets,
                           chunk_bytes=chunk_bytes)


def dict_decisions(plan: CompactionPlan) -> ExactDecisions:
    """What the Spark stage computes, with a Python dict over the same extracted keys."""
    cfg = plan.log_config()
    latest: dict[bytes, int] = {}
    clean: list[tuple[bytes, int]] = []
    for chunk in plan.chunks:
        lo, hi = (plan.first_dirty_offset, plan.end_offset) if chunk.side == DIRTY else (MIN_OFFSET,
                                                                                         plan.first_dirty_offset)
        seg = plan.open_segment(chunk.segment, cfg)
        try:
            import numpy as np

            for cols in extract_keys(seg, chunk.start_position, chunk.end_position, lo, hi,
                                     np.asarray(chunk.skip_positions, dtype=np.int64)):
                for i in range(cols.rows):
                    key, offset = cols.key(i), int(cols.offsets[i])
                    if chunk.side == CLEAN:
                        clean.append((key, offset))
                    elif offset > latest.get(key, -1):
                        latest[key] = offset
        finally:
            seg.close_handlers()
    superseded = [o for k, o in clean if k in latest]
    return ExactDecisions.of(plan.latest_offset, plan.first_dirty_offset, list(latest.values()), superseded)


def run_local_job(plan: CompactionPlan, staging: Path, crash: CrashHook = no_crash) -> Manifest:
    """The job with its Spark stage replaced by ``dict_decisions``: same rewrite, same manifest;
    ``crash(step)`` after the job's steps ``written`` and ``manifest``."""
    out_dir = staging / SEGMENTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    decisions = dict_decisions(plan)
    outputs = [rewrite_batch(plan, b, decisions, out_dir) for b in range(len(plan_batches(plan)))]
    crash("written")
    manifest = build_manifest(plan, outputs, int(decisions.kept.size), 0.0, {"master": "test-double"})
    write_manifest(staging, manifest)
    crash("manifest")
    return manifest


def segment_files(partition_dir: Path) -> dict[str, bytes]:
    """Every file of a partition directory (no sub-directory) by name."""
    return {p.name: p.read_bytes() for p in sorted(partition_dir.iterdir()) if p.is_file()}


def output_files(partition_dir: Path, bases: Iterable[int]) -> dict[str, bytes]:
    """The segment files of ``partition_dir`` at ``bases`` (a rewrite's outputs), by name: not
    the log's producer snapshots, which rolls leave at segment base offsets too."""
    wanted = set(bases)
    return {name: data for name, data in segment_files(partition_dir).items()
            if int(name.split(".")[0]) in wanted and not name.endswith(".snapshot")}


def staged_files(staging: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((staging / SEGMENTS_DIR).iterdir())}
