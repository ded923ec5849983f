"""The real Spark job (local[2]) against the in-process cleaner: byte-identical output.

On random workloads (keyed and unkeyed records, tombstones, headers, the five codecs, committed,
aborted and empty transactions, an idempotent producer, rolls; tests/spark_helpers.py), each of
two rounds runs ``logkeeper spark-compact``'s path — its command line parsed by the CLI's parser,
``plan_from_args``, then ``run_job`` on one SparkSession shared by the module — and the in-process
cleaner (one pass, a map large enough for every key) on a copy of the same directory with the
same settings and time. Every staged file (``.log``, ``.index``, ``.timeindex``, ``.txnindex``) is
byte-identical to the in-process cleaner's file of the same name, and the manifest's inputs,
outputs and checkpoint are the segments the in-process round replaced and its end offset.

The Spark output is then put in place of the segments it replaces (as the sidecar's swap does), so
that the whole partition directory equals the in-process one, and a second round runs after more
appends, two hours later: it has a clean section (the job's left-semi join of the clean keys) and
removes the tombstones and markers whose delete horizon the first round stamped. Round 1 lets the
job read its offsets from the directory; round 2 passes them as the sidecar does. Chunk sizes
vary, so that segments are read by one task or by several.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from logkeeper.cleaner.offload_job import JobRequest
from logkeeper.cleaner.offload_manifest import SEGMENTS_DIR, Manifest, read_manifest
from logkeeper.cli import build_parser
from logkeeper.log.log import Log
from logkeeper.log.names import SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX, segment_file
from logkeeper.records.builder import ControlType
from logkeeper.spark.command import plan_from_args
from tests.spark_helpers import (
    HOUR,
    NOW_MS,
    TP,
    clean_in_process,
    config,
    open_log,
    output_files,
    segment_files,
    set_checkpoint,
    staged_files,
    workload_copies,
    write_workload,
)

# (seed, chunk bytes): the seeds' settings differ in segment.bytes and index.interval.bytes
CASES = [(0, 64 << 20), (1, 700), (2, 3000)]
PRODUCER_EXPIRATION_MS = 86_400_000


def features(log: Log) -> set[str]:
    """What a workload holds, to show the test covers it."""
    from tests.cleaner_logs import read_log

    out = set()
    for r in read_log(log):
        h = r.batch
        out.add(f"codec-{h.codec}")
        if h.is_control:
            kind = int.from_bytes((r.key or b"\0\0\0\0")[2:4], "big")
            out.add("abort-marker" if kind == ControlType.ABORT else "commit-marker")
        elif r.key is None:
            out.add("unkeyed")
        elif r.value is None:
            out.add("tombstone")
        if h.is_transactional and not h.is_control:
            out.add("transactional")
        if h.has_delete_horizon:
            out.add("delete-horizon")
        if r.headers:
            out.add("headers")
    return out


def job_args(log_dir: Path, staging: Path, now_ms: int, seed: int, offsets: tuple[int, int, int] | None,
             chunk_bytes: int) -> list[str]:
    """The job's command line: the sidecar's (offload_job.JobRequest) when offsets are given,
    else the one a user types (offsets from the directory)."""
    c = config(seed)
    settings = {"segment.bytes": c.segment_bytes, "segment.index.bytes": c.max_index_size,
                "index.interval.bytes": c.index_interval_bytes, "delete.retention.ms": c.delete_retention_ms,
                "producer.id.expiration.ms": PRODUCER_EXPIRATION_MS}
    if offsets is not None:
        start, dirty, end = offsets
        args = JobRequest(log_dir, TP, staging, now_ms, start, dirty, end, settings, "local[2]").args()
    else:
        args = ["spark-compact", "--log-dir", str(log_dir), "--partition", str(TP), "--staging", str(staging),
                "--master", "local[2]", "--now-ms", str(now_ms)]
        args += [f"--config={k}={v}" for k, v in sorted(settings.items())]
    return [*args, "--chunk-bytes", str(chunk_bytes)]


def run_spark_round(spark: Any, args: list[str]) -> Manifest:
    from logkeeper.spark.job import run_job

    parsed = build_parser().parse_args(args)
    parsed.staging.mkdir(parents=True)
    plan = plan_from_args(parsed)
    written = run_job(spark, plan, parsed.staging)
    manifest = read_manifest(parsed.staging)
    assert manifest == written
    assert manifest.spark["master"] == "local[2]"
    return manifest


def put_in_place(log_dir: Path, staging: Path, manifest: Manifest) -> None:
    """What the sidecar's swap leaves: the replaced segments' files gone (with their producer
    snapshots, unless an output starts at the same offset), the staged ones in."""
    part = log_dir / TP.dir_name
    outputs = {o.base_offset for o in manifest.outputs}
    for spec in manifest.inputs:
        for suffix in SEGMENT_SUFFIXES:
            segment_file(part, spec.base_offset, suffix).unlink(missing_ok=True)
        if spec.base_offset not in outputs:
            segment_file(part, spec.base_offset, SNAPSHOT_SUFFIX).unlink(missing_ok=True)
    for path in sorted((staging / SEGMENTS_DIR).iterdir()):
        shutil.copyfile(path, part / path.name)
    set_checkpoint(log_dir, manifest.checkpoint)


@pytest.mark.parametrize(("seed", "chunk_bytes"), CASES, ids=[f"seed{s}-chunk{c}" for s, c in CASES])
def test_spark_output_is_byte_identical_to_the_in_process_cleaner(spark: Any, tmp_path: Path, seed: int,
                                                                  chunk_bytes: int) -> None:
    cfg = config(seed)
    ref, job = workload_copies(tmp_path, seed, "in-process", "spark")
    checkpoint: int | None = None
    seen: set[str] = set()
    for round_no, now in enumerate((NOW_MS, NOW_MS + 2 * HOUR)):
        if round_no:  # more of the workload on both copies, so that round 2 has a clean section
            for d in (ref, job):
                log = open_log(d, cfg)
                write_workload(log, random.Random(seed * 1000 + round_no), 200)
                log.close()
        before = {p.name: p.stat().st_size for p in (ref / TP.dir_name).glob("*.log")}
        log = open_log(ref, cfg, clock=lambda now=now: now)
        seen |= features(log)
        end = clean_in_process(log, checkpoint, now_ms=now)
        replaced = sorted(b for b in before if int(b.split(".")[0]) < end)
        log.close()

        staging = tmp_path / f"staging-{round_no}"
        offsets = None if round_no == 0 else (0, checkpoint or 0, end)
        manifest = run_spark_round(spark, job_args(job, staging, now, seed, offsets, chunk_bytes))
        assert (manifest.end_offset, manifest.checkpoint, manifest.now_ms) == (end, end, now)
        assert [i.name for i in manifest.inputs] == replaced, f"round {round_no}"
        assert manifest.stats["messages_read"] > manifest.stats["messages_written"] > 0
        expected = output_files(ref / TP.dir_name, (o.base_offset for o in manifest.outputs))
        got = staged_files(staging)
        assert sorted(got) == sorted(expected), f"round {round_no}: other files than the in-process cleaner's"
        for name in expected:
            assert got[name] == expected[name], f"round {round_no}: {name} differs from the in-process cleaner's"
        put_in_place(job, staging, manifest)
        assert segment_files(job / TP.dir_name) == segment_files(ref / TP.dir_name), f"round {round_no}"
        log = open_log(ref, cfg)
        seen |= {f"after-{f}" for f in features(log) if f == "delete-horizon"}
        log.close()
        checkpoint = end
    # what the workload exercised (all codecs, transactions with aborts and markers, tombstones)
    assert {f"codec-{c}" for c in range(5)} <= seen
    assert {"abort-marker", "commit-marker", "transactional", "tombstone", "unkeyed", "headers",
            "after-delete-horizon"} <= seen
