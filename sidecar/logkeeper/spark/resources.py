"""The Spark settings the job derives from its plan and master (no pyspark here).

Memory, from the bytes of segment the round reads (its dirty and clean sections):

- the JVM that runs the tasks holds the keys stage's hash aggregate and shuffle buffers, which
  grow with the keys (about 40-60 bytes a key in Spark's rows for 16-byte keys; a backlog of
  records of ~120 bytes has about a key per 120-180 bytes): ``1 GiB + bytes / 4`` keeps the
  aggregate of a backlog whose records are all distinct keys in memory with room to spare, at
  most 8 GiB (Spark spills to disk past that instead of failing). In local mode that JVM is the
  driver (``spark.driver.memory``); on a cluster it is each executor, and the bytes are split
  among ``spark.executor.instances`` when given (else the job cannot know how many there will
  be, and sizes each executor for the whole backlog);
- outside local mode the driver holds only the plan (a few hundred bytes a chunk, shipped with
  every task) and the groups' results: ``1 GiB + bytes / 256``, at most 4 GiB.

Every value is a default: a ``--conf`` of the same key (or spark-submit's, whose driver JVM has
started before the job runs: then spark.driver.memory is not set here at all) wins.

The keys aggregate (``groupBy(key).agg(max(p))``, job.py), from the same bytes:

- no partial aggregation before its shuffle (``spark.sql.execution.bypassPartialAggregation``):
  a chunk's keys are nearly all distinct (a backlog worth offloading has many keys), so the map
  side's hash aggregate cost its time and reduced nothing;
- ``spark.sql.shuffle.partitions`` = 3 x the cores, and at least a partition per
  SHUFFLE_PARTITION_BYTES of segment: with 3 x the cores alone, each task of a 30M-key backlog
  held 5-10M keys and spilled its hash map to disk (sorted, written, merged back); rounded up
  to a whole number of waves (a multiple of the cores), so no task runs alone at the stage's end;
- adaptive execution does not coalesce those partitions
  (``spark.sql.adaptive.coalescePartitions.enabled`` false): it merged a 10M-key backlog's 14
  into 5 tasks on 2 cores, 3 waves of which the last kept one core idle (the stage times with
  and without: bench/results/spark_cores.md).

Measured in bench/results/spark_scaling.md.

The Spark UI is on at ``spark.ui.port`` 4040 (Spark's own default; taken, Spark tries the next
ports, and the progress document names the URL it got); ``--conf spark.ui.enabled=false`` turns
it off.
"""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20
UI_PORT = 4040
MAX_TASK_HEAP = 8 * GIB
MAX_DRIVER_HEAP = 4 * GIB
SHUFFLE_PARTITION_BYTES = 128 * MIB


def _mib(n: int) -> str:
    return f"{max(1, n // MIB)}m"


def task_heap_bytes(read_bytes: int, executors: int = 1) -> int:
    """The heap of one JVM running the job's tasks for a round reading ``read_bytes``."""
    return min(MAX_TASK_HEAP, GIB + read_bytes // (4 * max(1, executors)))


def shuffle_partitions(read_bytes: int, cores: int) -> int:
    """The keys aggregate's shuffle partitions for a round reading ``read_bytes`` on ``cores``."""
    cores = max(1, cores)
    wanted = max(3 * cores, -(-read_bytes // SHUFFLE_PARTITION_BYTES))
    return -(-wanted // cores) * cores


def derived_conf(read_bytes: int, master: str | None, conf: dict[str, str], under_submit: bool = False
                 ) -> dict[str, str]:
    """The session's conf: ``conf`` (the user's, which wins) over the derived defaults."""
    out: dict[str, str] = {"spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT),
                           "spark.ui.showConsoleProgress": "false",
                           "spark.sql.execution.bypassPartialAggregation": "true",
                           "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    # no master and no spark-submit: the job's local[*]; no master under spark-submit: its master,
    # unknown here, so sized as a cluster's (spark.executor.memory is ignored in local mode)
    local = master.startswith("local") if master is not None else not under_submit
    if local:
        if not under_submit:
            out["spark.driver.memory"] = _mib(task_heap_bytes(read_bytes))
    else:
        executors = int(conf.get("spark.executor.instances", "0") or 0)
        out["spark.executor.memory"] = _mib(task_heap_bytes(read_bytes, executors))
        if not under_submit:
            out["spark.driver.memory"] = _mib(min(MAX_DRIVER_HEAP, GIB + read_bytes // 256))
    out.update(conf)
    return out
