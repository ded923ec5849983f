"""The Spark compaction job: ``logkeeper spark-compact`` (the only module that imports pyspark).

One exact round over a partition's dirty section, in three stages:

1. plan (driver, plan.py): the segments, the round's offsets, the groups of cleaned segments
   with their transaction state, and batch-aligned chunks of the segments to read;
2. keys (Spark): a task per chunk, small chunks sharing tasks (partitioning.py); a Python
   worker maps the segment file by path and emits (key: binary, p: long) for every keyed data
   record (extract.py), p = offset << 20 | the write batch of its group (the groups the
   in-process cleaner writes together: group_writer.write_batches).
   ``groupBy(key).agg(max(p))`` (a hash aggregate over the full key bytes: no hash collision
   can merge two keys) gives each key's latest offset in the dirty section and, in its low
   bits, the batch that holds it. When the round has a clean section (the log start below
   the first dirty offset), its records are left-semi-joined with the dirty keys: those are
   superseded;
3. rewrite (Spark): the decisions leave the aggregate packed: a Python worker per partition
   (``mapInArrow``, _pack) splits the offsets by batch and emits each batch's as one binary
   value of int64s (a row a batch and PACK_OFFSETS offsets, not a row an offset: the second
   shuffle and the grouping sort then move a few rows instead of one per key). They are
   repartitioned so that each task gets whole batches, one task a batch up to 8 a core, the
   biggest first (partitioning.py: Spark's own hash partitioning, steered, not groupBy's hash
   buckets that adaptive execution coalesces), and grouped by batch (``applyInArrow``); each
   batch's worker writes its cleaned segments into ``<staging>/segments/`` with the in-process
   cleaner's filter and group writer (rewrite.py: the same segments, small groups merged) and
   returns their files' sizes and CRCs. The driver writes ``<staging>/manifest.json`` last
   (cleaner/offload_manifest.py).

Session: ``--master`` (default ``local[*]``, unless the job runs under spark-submit, which sets
the master); PYSPARK_PYTHON is this interpreter (set before the session starts: the
``spark.pyspark.python`` conf is not honoured outside spark-submit) and SPARK_LOCAL_IP loopback
for local masters; the keys aggregate without a partial aggregation, and its
``spark.sql.shuffle.partitions`` from the cores and the round's bytes; the UI on (port 4040) and
memory from the round's bytes unless ``--conf`` says otherwise (resources.py); with a k8s://
master in the operator's Job, the driver's pod IP and name and the executors' pod template
(on_k8s.py). Outside spark-submit the job starts the JVM itself, with its standard error relayed
(jvm_output.py): a JVM that exits before it starts fails the job with its own last lines.
Progress: accumulators the tasks add to (chunks and groups done, bytes read and written), written
by the driver to ``<staging>/progress.json`` every second (cleaner/offload_progress.py).

For crash tests, LOGKEEPER_SPARK_CRASH_AT=<step> kills the job right after a step (faults.py
lists them). The command line is command.py.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..cleaner.exact import ExactDecisions
from ..cleaner.offload_manifest import SEGMENTS_DIR, InputSegment, Manifest, StagedFile, write_manifest
from ..cleaner.offload_progress import CHECKING, KEYS, MANIFEST_STAGE, REWRITE, STARTING, Progress, write_progress
from .extract import extract_keys
from .faults import maybe_crash, maybe_delay_chunk, maybe_fail_task, maybe_kill_group
from .jvm_output import JvmOutput, SparkStartError
from .on_k8s import driver_conf
from .partitioning import keys_slices, pack_groups, partition_keys, rewrite_slots
from .plan import CLEAN, DIRTY, GROUP_BITS, MIN_OFFSET, CompactionPlan
from .resources import derived_conf, shuffle_partitions
from .rewrite import BatchOutput, SegmentOutput, build_manifest, plan_batches, rewrite_batch

KEPT = 0
SUPERSEDED = 1
SENTINEL = 2
GROUP_MASK = (1 << GROUP_BITS) - 1
PROGRESS_INTERVAL_S = 1.0
# offsets in one packed row (64 MiB of int64s): well under the 2 GiB an Arrow binary column holds
# in a batch, and what a partition's worker keeps in memory before it emits them
PACK_OFFSETS = 8 * 1024 * 1024
PACKED = "g int, t byte, o binary"


# ---------------------------------------------------------------------------------------------- session
def spark_session(master: str | None = None, conf: dict[str, str] | None = None,
                  app_name: str = "logkeeper-spark-compact", read_bytes: int = 0) -> SparkSession:
    """A session for the job: local[*] unless a master is given or spark-submit chose one; the
    UI on and memory from ``read_bytes`` unless ``conf`` says otherwise (resources.py)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_submit:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    options = {"spark.app.name": app_name, **({"spark.master": master} if master is not None else {})}
    conf = {**driver_conf(master, conf or {}, os.environ), **(conf or {})}  # executors as pods (on_k8s.py)
    options.update(derived_conf(read_bytes, master, conf, under_submit))
    # pyspark starts a JVM only when this process has none (its _gateway; kept after a stop), and
    # under spark-submit it joins spark-submit's: then the builder's own start is skipped
    if not under_submit and SparkContext._gateway is None:
        _start_jvm(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    got = spark.sparkContext.getConf()  # where executors reach the driver: the first thing to check when none does
    print(f"spark-compact: Spark {spark.version}, master {spark.sparkContext.master}, driver "
          f"{got.get('spark.driver.host', '?')}:{got.get('spark.driver.port', '?')}", file=sys.stderr, flush=True)
    if not (conf and "spark.sql.shuffle.partitions" in conf):
        spark.conf.set("spark.sql.shuffle.partitions",
                       str(shuffle_partitions(read_bytes, spark.sparkContext.defaultParallelism)))
    return spark


def _start_jvm(options: dict[str, str]) -> None:
    """Start the JVM and the SparkContext the session then takes, as the builder would, with
    the JVM's standard error relayed (jvm_output.py): a JVM that exits before it starts fails
    with its own last lines, not only pyspark's "Java gateway process exited"."""
    output = JvmOutput()
    conf = SparkConf().setAll(list(options.items()))
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": output.write_fd})  # type: ignore[no-untyped-call]
    except PySparkRuntimeError as e:
        if e.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        said = " / ".join(output.last_lines()) or "it wrote nothing"
        raise SparkStartError(f"Spark's JVM exited before it started: {said}") from e
    finally:
        output.close_writer()
    SparkContext(conf=conf, gateway=gateway)


class _Reporter:
    """The driver's progress.json writer (cleaner/offload_progress.py): the job's own units from accumulators the
    tasks add to (merged in the driver as each task succeeds), Spark's stages from its status
    tracker, once a second on a daemon thread and at every stage change."""

    def __init__(self, spark: SparkSession, plan: CompactionPlan, staging: Path, progress: Progress) -> None:
        sc = spark.sparkContext
        self.sc, self.staging, self.progress = sc, staging, progress
        self.chunks, self.chunk_bytes = sc.accumulator(0), sc.accumulator(0)
        self.groups, self.group_bytes, self.written = sc.accumulator(0), sc.accumulator(0), sc.accumulator(0)
        self.n_chunks = len(plan.chunks)
        self.read_bytes = sum(c.end_position - c.start_position for c in plan.chunks)
        self.n_groups = len(plan.groups)
        self.group_read_bytes = sum(plan.segments[i].size for g in plan.groups for i in g.segments)
        progress.spark_ui = sc.uiWebUrl or ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spark-compact-progress", daemon=True)

    def __enter__(self) -> _Reporter:
        self.update()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.update()

    def set_stage(self, stage: str) -> None:
        self.progress.stage = stage
        self.update()

    def update(self) -> None:
        p = self.progress
        chunks = min(self.n_chunks, int(self.chunks.value))
        if p.stage == KEYS and chunks >= self.n_chunks:
            p.stage = REWRITE  # every chunk read: the shuffle's other side runs
        if p.stage == KEYS:
            p.tasks_done, p.tasks_total = chunks, self.n_chunks
            p.bytes_done, p.bytes_total = min(self.read_bytes, int(self.chunk_bytes.value)), self.read_bytes
        elif p.stage != STARTING:  # the rewrite and the steps after it: the groups' figures
            p.tasks_done, p.tasks_total = min(self.n_groups, int(self.groups.value)), self.n_groups
            p.bytes_done = min(self.group_read_bytes, int(self.group_bytes.value))
            p.bytes_total = self.group_read_bytes
        p.bytes_written = int(self.written.value)
        try:
            tracker = self.sc.statusTracker()
            infos = (tracker.getStageInfo(i) for i in sorted(tracker.getActiveStageIds()))
            p.spark_stages = [{"id": i.stageId, "tasks_done": i.numCompletedTasks, "tasks_total": i.numTasks,
                               "tasks_active": i.numActiveTasks, "tasks_failed": i.numFailedTasks}
                              for i in infos if i is not None]
        except Exception:  # the context stopping under us: the job's own figures still go out
            p.spark_stages = []
        write_progress(self.staging, p)

    def _loop(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.update()


# ---------------------------------------------------------------------------------------------- workers
def _chunk_key_batches(plan: CompactionPlan, chunk_ids: list[int], done: tuple[Any, Any],
                       batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    config = plan.log_config()
    batch_of = [b for b, groups in enumerate(plan_batches(plan)) for _g in groups]  # by group
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
                    packed = pa.array((cols.offsets << GROUP_BITS) | batch_of[chunk.group], type=pa.int64())
                    yield pa.RecordBatch.from_arrays([keys, packed], names=["k", "p"])
            finally:
                seg.close_handlers()
            maybe_delay_chunk()
            done[0].add(1)
            done[1].add(chunk.end_position - chunk.start_position)


def _rewrite(plan: CompactionPlan, out_dir: str, done: tuple[Any, Any, Any], key: tuple[Any, ...],
             table: pa.Table) -> pa.Table:
    g = int(key[1].as_py())  # key: (the task's partition key b, the write batch)
    kinds = table.column("t").to_pylist()
    packed = table.column("o").to_pylist()

    def offsets_of(kind: int) -> npt.NDArray[np.int64]:
        parts = [np.frombuffer(b, dtype=np.int64) for t, b in zip(kinds, packed) if t == kind and b]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    kept = offsets_of(KEPT)
    decisions = ExactDecisions.of(plan.latest_offset, plan.first_dirty_offset, kept, offsets_of(SUPERSEDED))
    out = rewrite_batch(plan, g, decisions, Path(out_dir))
    maybe_kill_group("group-written")
    maybe_fail_task("group-written")
    done[0].add(len(plan_batches(plan)[g]))
    done[1].add(out.bytes_read)
    done[2].add(out.bytes_written)
    doc = {"batch": out.batch, "keys": int(kept.size), "messages_read": out.messages_read,
           "bytes_read": out.bytes_read, "messages_written": out.messages_written,
           "bytes_written": out.bytes_written, "invalid_messages": out.invalid_messages,
           "segments": [{"base_offset": seg.base_offset, "replaces": list(seg.replaces),
                         "inputs": [i.to_dict() for i in seg.inputs], "files": [f.to_dict() for f in seg.files]}
                        for seg in out.segments]}
    return pa.table({"g": pa.array([g], pa.int32()), "result": pa.array([json.dumps(doc)], pa.string())})


def _batch_output(doc: dict[str, Any]) -> BatchOutput:
    segments = tuple(SegmentOutput(int(s["base_offset"]), tuple(s["replaces"]),
                                   tuple(InputSegment(int(i["base_offset"]), i["name"], int(i["size"]),
                                                      int(i["crc32c"])) for i in s["inputs"]),
                                   tuple(StagedFile(f["name"], int(f["size"]), int(f["crc32c"])) for f in s["files"]))
                     for s in doc["segments"])
    return BatchOutput(int(doc["batch"]), segments, int(doc["messages_read"]), int(doc["bytes_read"]),
                       int(doc["messages_written"]), int(doc["bytes_written"]), int(doc["invalid_messages"]))


# ---------------------------------------------------------------------------------------------- the job
def _keys_frame(spark: SparkSession, plan: CompactionPlan, side: int, done: tuple[Any, Any]) -> DataFrame | None:
    ids = [c.chunk_id for c in plan.chunks if c.side == side]
    if not ids:
        return None
    fn = functools.partial(_chunk_key_batches, plan, ids, done)
    read = sum(plan.chunks[i].end_position - plan.chunks[i].start_position for i in ids)
    slices = keys_slices(len(ids), spark.sparkContext.defaultParallelism, read)
    return spark.range(0, len(ids), 1, slices).mapInArrow(fn, "k binary, p long")


def _pack(kind: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A partition's packed offsets (column 0: offset << GROUP_BITS | write batch): per batch, rows
    of (g: the batch, kind, up to PACK_OFFSETS offsets as native int64 bytes)."""
    held: list[npt.NDArray[np.int64]] = []
    count = 0

    def flush() -> Iterator[pa.RecordBatch]:
        p = np.concatenate(held)
        held.clear()
        groups = (p & GROUP_MASK).astype(np.int32)
        order = np.argsort(groups, kind="stable")
        offsets = (p >> GROUP_BITS)[order]
        ends = np.cumsum(np.bincount(groups))
        starts = ends - np.bincount(groups)
        present = np.flatnonzero(ends > starts)
        yield pa.RecordBatch.from_arrays(
            [pa.array(present.astype(np.int32), pa.int32()), pa.array(np.full(present.size, kind, np.int8), pa.int8()),
             pa.array([offsets[starts[g]:ends[g]].tobytes() for g in present.tolist()], pa.binary())],
            names=["g", "t", "o"])

    for batch in batches:
        col = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        held.append(col)
        count += col.size
        if count >= PACK_OFFSETS:
            yield from flush()
            count = 0
    if count:
        yield from flush()


def _decisions(spark: SparkSession, plan: CompactionPlan, done: tuple[Any, Any], p: str = "p") -> DataFrame:
    def split(df: DataFrame, kind: int) -> DataFrame:
        return df.select(p).mapInArrow(functools.partial(_pack, kind), PACKED)

    # a row per write batch (indexes 0..n-1), so that a batch none of whose keys won still gets its
    # rewrite task; from range: createDataFrame of a list infers and converts in the driver
    sentinels = spark.range(len(plan_batches(plan))).select(
        F.col("id").cast("int").alias("g"), F.lit(SENTINEL).cast("byte").alias("t"), F.lit(b"").alias("o"))
    dirty = _keys_frame(spark, plan, DIRTY, done)
    if dirty is None:
        return sentinels
    winners = dirty.groupBy("k").agg(F.max(p).alias(p))
    out = split(winners, KEPT).unionByName(sentinels)
    clean = _keys_frame(spark, plan, CLEAN, done)
    if clean is not None:
        superseded = clean.join(winners.select("k"), on="k", how="left_semi")
        out = out.unionByName(split(superseded, SUPERSEDED))
    return out


def _by_rewrite_task(spark: SparkSession, plan: CompactionPlan, decisions: DataFrame) -> DataFrame:
    """The decisions repartitioned so that each rewrite task gets whole write batches, evenly by
    bytes (partitioning.py): column b holds, per batch, a key that Spark hashes into its bin's
    partition."""
    batches = plan_batches(plan)
    slots = rewrite_slots(len(batches), spark.sparkContext.defaultParallelism)
    sizes = [sum(plan.segments[i].size for g in batch for i in plan.groups[g].segments) for batch in batches]
    keys = partition_keys(slots)
    by_group = F.array(*[F.lit(keys[b]) for b in pack_groups(sizes, slots)])
    return decisions.withColumn("b", F.element_at(by_group, F.col("g") + 1)).repartition(slots, "b")


def run_job(spark: SparkSession, plan: CompactionPlan, staging: Path, progress: Progress | None = None) -> Manifest:
    """Stages 2 and 3 on ``spark``; writes and returns the manifest. ``progress`` (the caller's, so
    that it knows the stage a failure happened in) is kept up to date in <staging>/progress.json."""
    progress = progress if progress is not None else Progress()
    with _Reporter(spark, plan, Path(staging), progress) as reporter:
        return _run(spark, plan, Path(staging), reporter)


def _run(spark: SparkSession, plan: CompactionPlan, staging: Path, reporter: _Reporter) -> Manifest:
    started = time.monotonic()
    out_dir = staging / SEGMENTS_DIR
    out_dir.mkdir(parents=False, exist_ok=True)
    where = str(out_dir)
    reporter.set_stage(KEYS)
    chunk_done = (reporter.chunks, reporter.chunk_bytes)
    group_done = (reporter.groups, reporter.group_bytes, reporter.written)
    # a lambda: applyInArrow reads the UDF's kind from type hints, and a partial has none it can read
    rows = _by_rewrite_task(spark, plan, _decisions(spark, plan, chunk_done)).groupBy("b", "g").applyInArrow(
        lambda key, table: _rewrite(plan, where, group_done, key, table), "g int, result string").collect()
    reporter.set_stage(CHECKING)
    outputs = sorted((_batch_output(json.loads(r["result"])) for r in rows), key=lambda o: o.batch)
    for out in outputs:  # build_manifest checks that they are every batch of the plan
        for f in (f for seg in out.segments for f in seg.files):
            size = (out_dir / f.name).stat().st_size
            if size != f.size:
                raise RuntimeError(f"staged {f.name} is {size} bytes, its batch wrote {f.size}")
    maybe_crash("written")
    reporter.set_stage(MANIFEST_STAGE)
    sc = spark.sparkContext
    keys = sum(int(json.loads(r["result"])["keys"]) for r in rows)
    manifest = build_manifest(plan, outputs, keys, time.monotonic() - started,
                              {"master": sc.master, "version": sc.version, "application_id": sc.applicationId,
                               "default_parallelism": sc.defaultParallelism})
    write_manifest(staging, manifest)
    maybe_crash("manifest")
    return manifest
