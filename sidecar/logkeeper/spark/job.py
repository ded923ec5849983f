"""The Spark compaction job: ``logkeeper spark-compact`` (the only module that imports pyspark).

One exact round over a partition's dirty section, in three stages:

1. plan (driver, plan.py): the segments, the round's offsets, the groups of cleaned segments
   with their transaction state, and batch-aligned chunks of the segments to read;
2. keys (Spark): one task per chunk; a Python worker maps the segment file by path and emits
   (key: binary, p: long) for every keyed data record (extract.py), p = offset << 20 | group.
   ``groupBy(key).agg(max(p))`` (a hash aggregate over the full key bytes: no hash collision
   can merge two keys) gives each key's latest offset in the dirty section and, in its low
   bits, the group that holds it. When the round has a clean section (the log start below
   the first dirty offset), its records are left-semi-joined with the dirty keys: those are
   superseded;
3. rewrite (Spark): the decisions are grouped by cleaned segment (``applyInArrow``); each group's
   worker writes its ``.cleaned`` segment into ``<staging>/segments/`` with the in-process
   cleaner's filter (rewrite.py) and returns its files' sizes and CRCs. The driver writes
   ``<staging>/manifest.json`` last (manifest.py).

Session: ``--master`` (default ``local[*]``, unless the job runs under spark-submit, which sets
the master); PYSPARK_PYTHON is this interpreter (set before the session starts: the
``spark.pyspark.python`` conf is not honoured outside spark-submit) and SPARK_LOCAL_IP loopback
for local masters; ``spark.sql.shuffle.partitions`` = 3 x the default parallelism.

For crash tests, LOGKEEPER_SPARK_CRASH_AT=<step> kills the job right after a step (command.py
lists them). The command line is command.py.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..cleaner.exact import ExactDecisions
from .command import maybe_crash, maybe_kill_group
from .extract import extract_keys
from .manifest import SEGMENTS_DIR, InputSegment, Manifest, StagedFile, write_manifest
from .plan import CLEAN, DIRTY, GROUP_BITS, MIN_OFFSET, CompactionPlan
from .rewrite import GroupOutput, build_manifest, rewrite_group

KEPT = 0
SUPERSEDED = 1
SENTINEL = 2
GROUP_MASK = (1 << GROUP_BITS) - 1


# ---------------------------------------------------------------------------------------------- session
def spark_session(master: str | None = None, conf: dict[str, str] | None = None,
                  app_name: str = "logkeeper-spark-compact") -> SparkSession:
    """A session for the job: local[*] unless a master is given or spark-submit chose one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_submit:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false")
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.driver.memory", "2g")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not (conf and "spark.sql.shuffle.partitions" in conf):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, 3 * spark.sparkContext.defaultParallelism)))
    return spark


# ---------------------------------------------------------------------------------------------- workers
def _chunk_key_batches(plan: CompactionPlan, chunk_ids: list[int], batches: Iterator[pa.RecordBatch]
                       ) -> Iterator[pa.RecordBatch]:
    config = plan.log_config()
    for batch in batches:
        for row in batch.column(0).to_pylist():
            chunk = plan.chunks[chunk_ids[int(row)]]
            lo, hi = (plan.first_dirty_offset, plan.end_offset) if chunk.side == DIRTY else \
                (MIN_OFFSET, plan.first_dirty_offset)
            seg = plan.open_segment(chunk.segment, config)
            try:
                skip = np.asarray(chunk.skip_positions, dtype=np.int64)
                for cols in extract_keys(seg, chunk.start_position, chunk.end_position, lo, hi, skip):
                    keys = pa.Array.from_buffers(pa.binary(), cols.rows,
                                                 [None, pa.py_buffer(cols.starts), pa.py_buffer(cols.data)])
                    packed = pa.array((cols.offsets << GROUP_BITS) | chunk.group, type=pa.int64())
                    yield pa.RecordBatch.from_arrays([keys, packed], names=["k", "p"])
            finally:
                seg.close_handlers()


def _rewrite(plan: CompactionPlan, out_dir: str, key: tuple[Any, ...], table: pa.Table) -> pa.Table:
    g = int(key[0].as_py())
    kinds = table.column("t").to_numpy()
    offsets = table.column("o").to_numpy().astype(np.int64)
    kept = offsets[kinds == KEPT]
    decisions = ExactDecisions.of(plan.latest_offset, plan.first_dirty_offset, kept, offsets[kinds == SUPERSEDED])
    out = rewrite_group(plan, g, decisions, Path(out_dir))
    maybe_kill_group("group-written")
    doc = {"group": out.group, "base_offset": out.base_offset, "replaces": list(out.replaces),
           "inputs": [i.to_dict() for i in out.inputs], "files": [f.to_dict() for f in out.files],
           "keys": int(kept.size), "messages_read": out.messages_read, "bytes_read": out.bytes_read,
           "messages_written": out.messages_written, "bytes_written": out.bytes_written,
           "invalid_messages": out.invalid_messages}
    return pa.table({"g": pa.array([g], pa.int32()), "result": pa.array([json.dumps(doc)], pa.string())})


def _group_output(doc: dict[str, Any]) -> GroupOutput:
    return GroupOutput(int(doc["group"]), int(doc["base_offset"]), tuple(doc["replaces"]),
                       tuple(InputSegment(int(i["base_offset"]), i["name"], int(i["size"]), int(i["crc32c"]))
                             for i in doc["inputs"]),
                       tuple(StagedFile(f["name"], int(f["size"]), int(f["crc32c"])) for f in doc["files"]),
                       int(doc["messages_read"]), int(doc["bytes_read"]), int(doc["messages_written"]),
                       int(doc["bytes_written"]), int(doc["invalid_messages"]))


# ---------------------------------------------------------------------------------------------- the job
def _keys_frame(spark: SparkSession, plan: CompactionPlan, side: int) -> DataFrame | None:
    ids = [c.chunk_id for c in plan.chunks if c.side == side]
    if not ids:
        return None
    fn = functools.partial(_chunk_key_batches, plan, ids)
    return spark.range(0, len(ids), 1, len(ids)).mapInArrow(fn, "k binary, p long")


def _decisions(spark: SparkSession, plan: CompactionPlan, p: str = "p") -> DataFrame:
    def split(df: DataFrame, kind: int) -> DataFrame:
        return df.select(F.col(p).bitwiseAND(GROUP_MASK).cast("int").alias("g"),
                         F.shiftright(F.col(p), GROUP_BITS).alias("o"), F.lit(kind).cast("byte").alias("t"))

    sentinels = spark.createDataFrame([(g.index, -1, SENTINEL) for g in plan.groups], "g int, o long, t byte")
    dirty = _keys_frame(spark, plan, DIRTY)
    if dirty is None:
        return sentinels
    winners = dirty.groupBy("k").agg(F.max(p).alias(p))
    out = split(winners, KEPT).unionByName(sentinels)
    clean = _keys_frame(spark, plan, CLEAN)
    if clean is not None:
        superseded = clean.join(winners.select("k"), on="k", how="left_semi")
        out = out.unionByName(split(superseded, SUPERSEDED))
    return out


def run_job(spark: SparkSession, plan: CompactionPlan, staging: Path) -> Manifest:
    """Stages 2 and 3 on ``spark``; writes and returns the manifest."""
    started = time.monotonic()
    out_dir = Path(staging) / SEGMENTS_DIR
    out_dir.mkdir(parents=False, exist_ok=True)
    where = str(out_dir)
    # a lambda: applyInArrow reads the UDF's kind from type hints, and a partial has none it can read
    rows = _decisions(spark, plan).groupBy("g").applyInArrow(
        lambda key, table: _rewrite(plan, where, key, table), "g int, result string").collect()
    outputs = sorted((_group_output(json.loads(r["result"])) for r in rows), key=lambda o: o.base_offset)
    if [o.group for o in outputs] != [g.index for g in plan.groups]:
        raise RuntimeError(f"the job wrote groups {[o.group for o in outputs]}, the plan has {len(plan.groups)}")
    for out in outputs:
        for f in out.files:
            size = (out_dir / f.name).stat().st_size
            if size != f.size:
                raise RuntimeError(f"staged {f.name} is {size} bytes, its group wrote {f.size}")
    maybe_crash("written")
    sc = spark.sparkContext
    keys = sum(int(json.loads(r["result"])["keys"]) for r in rows)
    manifest = build_manifest(plan, outputs, keys, time.monotonic() - started,
                              {"master": sc.master, "version": sc.version, "application_id": sc.applicationId,
                               "default_parallelism": sc.defaultParallelism})
    write_manifest(staging, manifest)
    maybe_crash("manifest")
    return manifest
