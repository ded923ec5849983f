"""How the job's work is cut into Spark tasks (no pyspark here).

The keys stage: one task per chunk when the chunks are big (a chunk is at most --chunk-bytes,
64 MiB by default), but small chunks share tasks, down to ``TASKS_PER_CORE`` x the cores: a Spark
task has a fixed cost whatever it reads (bench/results/design_figures.md: spark partitioning).

The rewrite stage: the groups are packed into ``rewrite_slots`` bins by their bytes (largest
first into the lightest bin, bin 0 first: Spark starts a stage's tasks in partition order, so
the biggest group starts first), so that each task writes whole groups and the bins are even;
one task per group unless there are more than 8 per core. Spark's ``groupBy(g)`` would hash the group
index into spark.sql.shuffle.partitions buckets, where two groups can share a bucket while another
stays empty, and adaptive execution then coalesces small buckets (6 groups ran as 2 tasks). The
job instead repartitions by a key column whose value is chosen so that Spark's hash partitioning
puts bin b in partition b exactly: Spark's partition of an int k among n is
pmod(murmur3_x86_32(k, seed 42), n) (``HashPartitioning``), computed here by ``spark_partition``
and checked against Spark itself in tests/spark. A repartition to an explicit number is not
coalesced by adaptive execution.
"""

from __future__ import annotations

from collections.abc import Sequence

TASKS_PER_CORE = 2
REWRITE_TASKS_PER_CORE = 8
MIN_TASK_BYTES = 32 << 20
SPARK_HASH_SEED = 42
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's Murmur3_x86_32.hashInt: the hash of a 4-byte int, as a signed 32-bit int."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = (seed & _M32) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition(value: int, partitions: int) -> int:
    """The partition Spark's hash partitioning gives an int column's ``value`` among ``partitions``."""
    return murmur3_int(value) % partitions  # Python's % of a positive modulus is pmod


def partition_keys(partitions: int) -> list[int]:
    """For each partition p, the smallest non-negative int that Spark hashes into p."""
    keys: list[int | None] = [None] * partitions
    left, k = partitions, 0
    while left:
        p = spark_partition(k, partitions)
        if keys[p] is None:
            keys[p] = k
            left -= 1
        k += 1
    return [int(x) for x in keys if x is not None]


def pack_groups(sizes: Sequence[int], bins: int) -> list[int]:
    """The bin of each group: largest first into the lightest bin (ties: the lower bin)."""
    bins = max(1, min(bins, len(sizes)))
    load = [0] * bins
    out = [0] * len(sizes)
    for g in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        b = min(range(bins), key=lambda i: (load[i], i))
        out[g] = b
        load[b] += sizes[g]
    return out


def rewrite_slots(groups: int, cores: int) -> int:
    """Tasks of the rewrite stage: one per group up to REWRITE_TASKS_PER_CORE x the cores (a big
    backlog's groups are few and big: one task each, the largest first; thousands of small groups
    share tasks)."""
    return max(1, min(groups, REWRITE_TASKS_PER_CORE * max(1, cores)))


def keys_slices(chunks: int, cores: int, read_bytes: int = 0) -> int:
    """Tasks of the keys stage for ``chunks`` chunks reading ``read_bytes``: at least
    TASKS_PER_CORE x the cores, and a task per MIN_TASK_BYTES beyond that (a task's progress is
    counted when it ends: big backlogs keep one task per chunk and so a progress step per chunk)."""
    return max(1, min(chunks, max(TASKS_PER_CORE * max(1, cores), read_bytes // MIN_TASK_BYTES)))
