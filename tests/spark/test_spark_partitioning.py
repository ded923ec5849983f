"""The rewrite stage's tasks on real Spark (local[2]): each task gets whole write batches of groups, in the bin
partitioning.py packed them into, with Spark's own hash partitioning (not a reimplementation
that could drift from it): the Murmur3 keys land in the partitions they were chosen for, and 6
groups (the skew issue 21 measured: 6 groups ran as 2 tasks under groupBy + adaptive execution)
run as 6 tasks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from logkeeper.spark.partitioning import keys_slices, pack_groups, partition_keys, rewrite_slots, spark_partition


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 16, 61])
def test_partition_keys_land_where_spark_puts_them(spark: Any, n: int) -> None:
    from pyspark.sql import functions as F

    keys = partition_keys(n)
    assert len(set(keys)) == n and all(spark_partition(k, n) == p for p, k in enumerate(keys))
    df = spark.createDataFrame([(k,) for k in keys], "b int").repartition(n, "b")
    got = {r["b"]: r["p"] for r in df.select("b", F.spark_partition_id().alias("p")).collect()}
    assert got == {k: p for p, k in enumerate(keys)}


def test_six_groups_are_six_rewrite_tasks_biggest_first(spark: Any) -> None:
    from pyspark.sql import functions as F

    from logkeeper.spark.job import _by_rewrite_task

    sizes = [10, 700, 30, 500, 20, 900]
    # MiB: no two neighbours within group_writer.WRITE_BATCH_BYTES, so each group is a write batch
    plan = SimpleNamespace(groups=[SimpleNamespace(segments=(i,)) for i in range(len(sizes))],
                           segments=[SimpleNamespace(size=s << 20) for s in sizes])
    # many rows for a big group, one for a small one: hashing by g would not care, nor do the bins
    rows = [(g, o) for g in range(len(sizes)) for o in range(sizes[g] // 10)]
    decisions = spark.createDataFrame(rows, "g int, o long")
    out = _by_rewrite_task(spark, plan, decisions)  # type: ignore[arg-type]
    assert out.rdd.getNumPartitions() == 6
    where = {r["g"]: r["p"] for r in out.select("g", F.spark_partition_id().alias("p")).distinct().collect()}
    # one batch a task, the biggest in partition 0 (started first), then by size
    assert where == {5: 0, 1: 1, 3: 2, 2: 3, 4: 4, 0: 5}
    assert rewrite_slots(6, 2) == 6 and rewrite_slots(1000, 2) == 16


def test_packing_and_slices() -> None:
    assert pack_groups([5, 5, 5, 5], 2) == [0, 1, 0, 1]
    assert pack_groups([100, 1, 1, 1], 2) == [0, 1, 1, 1]
    assert pack_groups([3], 8) == [0]
    assert keys_slices(45, 2) == 4 and keys_slices(3, 2) == 3 and keys_slices(0, 2) == 1
    # a big backlog: a task per 64 MiB chunk (32 MiB a task at least)
    assert keys_slices(55, 2, 55 * (64 << 20)) == 55 and keys_slices(100, 2, 10 * (32 << 20)) == 10
