"""Benchmark: the Spark compaction job (``logkeeper spark-compact``) against ``logkeeper clean`` on
backlogs from 1M distinct keys up (issue 21).

Run: ``make bench-spark`` (= ``.venv/bin/python bench/bench_spark.py`` with the spark extra
installed). Options: ``--keys 1M,4M,10M`` (the backlog sizes), ``--no-standalone``, ``--dir D``
(scratch space: about 3x the largest backlog's bytes, checked first), ``--paths`` (a subset of the paths below,
comma separated), ``--out NAME`` (default spark). Writes the table, with the command, date,
commit and machine, to ``bench/results/NAME.md`` and the plot to ``bench/results/NAME.svg``. Every figure
comes from one run of this script, page cache warm. For each size:

- backlog: exactly N distinct 8-byte keys in 1.5 x N records (every key once plus half as many
  overwrites of uniformly drawn keys, all shuffled), 100-byte values, batches of 100-500 records,
  uncompressed, 1M records a segment, then an empty active segment;
- ``plain read``: every ``.log`` byte read sequentially in this process: the baseline;
- ``clean``: ``logkeeper clean`` in this process (clean_command.run_clean: one cleaner thread,
  rounds until nothing is cleanable, replaced segments removed as they are replaced:
  ``file.delete.delay.ms=0``) with Kafka's default
  128 MiB dedupe buffer, and
  ``clean buffer 2 GiB`` with the largest buffer a cleaner thread takes (2^31 - 1 bytes, Kafka's
  cap: 89M slots, one round up to 80M keys); ``min.cleanable.dirty.ratio=0`` so that it cleans the
  whole backlog; on a fresh copy; bytes read and written summed over the rounds;
- ``spark local[N]``: ``python -m logkeeper.cli spark-compact --master local[N]`` in a child process,
  as the sidecar's embedded runner starts it (JVM start, session, plan, Spark stages, staged
  segments, manifest); ``spark standalone 2x1``: the same with ``--master spark://...`` of a real
  standalone cluster (tests/spark/standalone_cluster.py: a master and two one-core workers on
  127.0.0.1, started once for the run); ``sidecar checks``: the CRC-32C of every input and staged
  file, what the sidecar adds before a swap;
- ``CPU s (cores busy)``: CPU seconds (in-process: this process; Spark: every process of the job's
  session, sampled from /proc; the standalone executors are not in it) and that / wall time.

Every path must keep the same number of records (checked; tests/spark checks the bytes).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import numpy as np
from bench_cleaner import (
    TS,
    VALUE_BYTES,
    _fill,
    finish_log_dir,
    plain_read,
)
from side_by_side import cpu_model, date_and_commit

from logkeeper.cleaner.clean_command import run_clean
from logkeeper.cleaner.offload_manifest import SEGMENTS_DIR, read_manifest
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.records.batch import file_crc32c

RESULTS = Path(__file__).resolve().parent / "results" / "spark.md"
PARTITION = "bench-0"
RECORDS_PER_SEGMENT = 1_000_000
DEFAULT_BUFFER = 128 * 1024 * 1024  # Kafka's log.cleaner.dedupe.buffer.size
LARGEST_BUFFER = (1 << 31) - 1  # Kafka's (and CleanerConfig's) cap on one cleaner thread's buffer
# Scratch a run needs, checked before any work (a full disk otherwise failed a 100M-key run minutes
# in, writing its backlog): the backlog's .log bytes a key (spark_100m.md: 17,699 MB for 100M keys,
# 1.5 records a key), times the copies on disk at once (the source, a cleaned copy and its round's
# output, or the job's staging).
BACKLOG_BYTES_PER_KEY = 177
SCRATCH_COPIES = 3
JOB_LINE = re.compile(r"plan ([\d.]+) s, spark ([\d.]+) s, total ([\d.]+) s")


# ------------------------------------------------------------------------------------------- workloads
def segment_from_keys(first_offset: int, keys: np.ndarray, rng: np.random.Generator) -> bytes:
    """bench_cleaner's record and batch shape, with the given keys in order."""
    counts = []
    total = 0
    while total < keys.shape[0]:
        c = min(int(rng.integers(100, 501)), keys.shape[0] - total)
        counts.append(c)
        total += c
    counts_a = np.array(counts, dtype=np.int64)
    bases = first_offset + np.concatenate(([0], np.cumsum(counts_a)[:-1]))
    values = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    out = np.empty(keys.shape[0] * (VALUE_BYTES + 20) + len(counts) * 61, dtype=np.uint8)
    size, starts = _fill(out, bases, counts_a, keys.astype(np.int64), values, TS)
    data = bytearray(out[:size].tobytes())
    ends = [*starts[1:].tolist(), size]
    view = memoryview(data)
    for s, e in zip(starts.tolist(), ends):
        data[s + 17:s + 21] = crc32c.crc32c(view[s + 21:e]).to_bytes(4, "big")
    view.release()
    return bytes(data)


def check_scratch(directory: Path, n_keys: int) -> None:
    """Exit with a message naming ``directory`` when it has less free space than a run over
    ``n_keys`` keys (the largest backlog) needs."""
    need = SCRATCH_COPIES * BACKLOG_BYTES_PER_KEY * n_keys
    free = shutil.disk_usage(directory).free
    if free < need:
        raise SystemExit(f"bench_spark: {n_keys:,} keys need about {need / 1e9:.1f} GB of scratch in {directory}, "
                         f"which has {free / 1e9:.1f} GB free: free some, pass --dir elsewhere or fewer --keys")


def make_backlog(root: Path, n_keys: int, seed: int = 11) -> int:
    """Exactly ``n_keys`` distinct keys in 1.5 x n_keys records, shuffled; returns the .log bytes."""
    rng = np.random.default_rng(seed)
    keys = np.concatenate([np.arange(n_keys, dtype=np.int64), rng.integers(0, n_keys, n_keys // 2, dtype=np.int64)])
    rng.shuffle(keys)
    part = root / PARTITION
    part.mkdir(parents=True)
    for first in range(0, keys.shape[0], RECORDS_PER_SEGMENT):
        chunk = keys[first:first + RECORDS_PER_SEGMENT]
        (part / f"{first:020d}.log").write_bytes(segment_from_keys(first, chunk, rng))
    return finish_log_dir(root, part)


# ------------------------------------------------------------------------------------------- the runs
@dataclass
class Run:
    path: str
    wall_s: float
    rounds: int
    bytes_read: int
    bytes_written: int
    records_out: int
    extra: dict[str, float] = field(default_factory=dict)


def in_process(src: Path, work: Path, buffer: int = DEFAULT_BUFFER) -> Run:
    """``logkeeper clean`` (run_clean, the command's own code: its rounds, and its removal of the
    replaced segments as it goes) on a fresh copy, with a dedupe buffer of ``buffer`` bytes and
    every round's stats kept."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    rounds: list[CleanerStats] = []
    out = io.StringIO()
    started = time.perf_counter()
    cpu_started = time.process_time()
    # file.delete.delay.ms=0: the clock is frozen at TS (the records' time), so Kafka's 60 s delay
    # would never pass and every round's replaced segments would pile up on the disk until the end
    # (a 100M-key backlog then fills this machine's disk); removed as they are replaced instead
    failed = run_clean(work, {"min.cleanable.dirty.ratio": "0", "log.cleaner.dedupe.buffer.size": str(buffer),
                              "file.delete.delay.ms": "0"},
                       out, lambda: TS, round_sink=lambda _tp, stats: rounds.append(stats))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    if failed:
        raise SystemExit(f"logkeeper clean failed:\n{out.getvalue()[-3000:]}")
    name = "clean" if buffer == DEFAULT_BUFFER else f"clean buffer {buffer / (1 << 30):.0f} GiB"
    return Run(name, wall, len(rounds), sum(r.bytes_read for r in rounds),
               sum(r.bytes_written for r in rounds), records_in(work), {"cpu_s": cpu})


def records_in(root: Path) -> int:
    """Records of the partition's segments (from the batch headers)."""
    total = 0
    for path in sorted((root / PARTITION).glob("*.log")):
        data = np.fromfile(path, dtype=np.uint8)
        pos = 0
        while pos < data.shape[0]:
            length = int.from_bytes(data[pos + 8:pos + 12].tobytes(), "big")
            total += int.from_bytes(data[pos + 57:pos + 61].tobytes(), "big")
            pos += 12 + length
    return total


class SessionCpu:
    """CPU seconds of the processes of a session (the job, its JVM, pyspark's daemon and workers),
    sampled from /proc every SAMPLE_S: each process counts with its last sample (a process that
    ends between two samples loses at most that interval's CPU)."""

    SAMPLE_S = 0.25

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.last: dict[int, float] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[3]) == self.sid:  # state ppid pgrp session ... utime(11) stime(12)
                self.last[int(entry)] = (int(fields[11]) + int(fields[12])) / tick

    def _run(self) -> None:
        while not self.done.wait(self.SAMPLE_S):
            self._sample()

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return sum(self.last.values())


def spark_job(src: Path, staging: Path, master: str, label: str | None = None, *, one_core: bool = False) -> Run:
    """One spark-compact run; ``one_core``: the job's process tree (driver JVM, Python workers)
    pinned to CPU 0, a one-core machine (local[1] alone keeps more than one core busy: a task is
    a JVM thread fed by a Python worker)."""
    if staging.exists():
        shutil.rmtree(staging)
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cmd = [sys.executable, "-m", "logkeeper.cli", "spark-compact", "--log-dir", str(src), "--partition", PARTITION,
           "--staging", str(staging), "--master", master, "--now-ms", str(TS)]
    started = time.perf_counter()
    pin = (lambda: os.sched_setaffinity(0, {0})) if one_core else None  # inherited by every child
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=pin)
    cpu = SessionCpu(proc.pid)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    cpu_s = cpu.stop()
    if proc.returncode != 0:
        raise SystemExit(f"spark-compact failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    m = JOB_LINE.search(stdout)
    manifest = read_manifest(staging)
    t0 = time.perf_counter()
    for spec in manifest.inputs:
        file_crc32c(src / PARTITION / spec.name)
    for out in manifest.outputs:
        for f in out.files:
            file_crc32c(staging / SEGMENTS_DIR / f.name)
    checks = time.perf_counter() - t0
    stats = manifest.stats
    extra = {"checks_s": checks, "outputs": float(len(manifest.outputs)), "cpu_s": cpu_s}
    if m:
        extra.update(plan_s=float(m.group(1)), spark_s=float(m.group(2)), total_s=float(m.group(3)))
    shutil.rmtree(staging, ignore_errors=True)
    return Run(label or f"spark {master}", wall, 1, int(stats["bytes_read"]), int(stats["bytes_written"]),
               int(stats["messages_written"]), extra)


# ------------------------------------------------------------------------------------------- report
@dataclass
class Workload:
    name: str
    dirty_bytes: int
    distinct_keys: int
    records: int
    read_s: float
    runs: list[Run]


def row(w: Workload, r: Run) -> str:
    mb = w.dirty_bytes / 1e6
    inner = ""
    if "spark_s" in r.extra:
        inner = (f"plan {r.extra['plan_s']:.1f} s, Spark stages {r.extra['spark_s']:.1f} s; sidecar checks "
                 f"+{r.extra['checks_s']:.1f} s")
    cpu = r.extra["cpu_s"]
    return (f"| {w.name} | {r.path} | {r.rounds} | {r.wall_s:,.1f} | {r.wall_s / w.read_s:,.0f}x | "
            f"{mb / r.wall_s:,.0f} | {cpu:,.0f} ({cpu / r.wall_s:.1f}) | {r.bytes_read / 1e6:,.0f} | "
            f"{r.bytes_written / 1e6:,.0f} | {r.records_out:,} | {inner} |")


PATHS = ["clean", f"clean buffer {LARGEST_BUFFER / (1 << 30):.0f} GiB", "spark local[1]", "spark local[2]",
         "spark standalone 2x1", "spark local[1] on 1 core"]


def sweep_size(scratch: Path, n_keys: int, cluster_url: str | None, log: list[str],
               paths: Sequence[str] = PATHS) -> Workload:
    src = scratch / "backlog-src"
    shutil.rmtree(src, ignore_errors=True)
    size = make_backlog(src, n_keys)
    read_s = min(plain_read(src) for _ in range(2))
    runs = []
    for buffer, name in ((DEFAULT_BUFFER, PATHS[0]), (LARGEST_BUFFER, PATHS[1])):
        if name in paths:
            runs.append(in_process(src, scratch / "work", buffer))
            shutil.rmtree(scratch / "work", ignore_errors=True)
    for master in ("local[1]", "local[2]"):
        if f"spark {master}" in paths:
            runs.append(spark_job(src, scratch / "staging", master))
    if PATHS[5] in paths:
        runs.append(spark_job(src, scratch / "staging", "local[1]", PATHS[5], one_core=True))
    if cluster_url and PATHS[4] in paths:
        runs.append(spark_job(src, scratch / "staging", cluster_url, "spark standalone 2x1"))
    shutil.rmtree(src, ignore_errors=True)
    w = Workload(f"{n_keys / 1e6:g}M keys", size, n_keys, n_keys + n_keys // 2, read_s, runs)
    log.append(f"{w.name}: " + ", ".join(f"{r.path} {r.wall_s:.1f} s" for r in runs))
    print(log[-1], flush=True)
    return w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", default="1M,4M,10M", help="backlog sizes in distinct keys, comma separated")
    parser.add_argument("--no-standalone", action="store_true", help="skip the standalone cluster runs")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"the paths to run, comma separated (default all: {', '.join(PATHS)})")
    parser.add_argument("--out", default="spark", help="results name: bench/results/NAME.md and NAME.svg")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",")]
    if unknown := [p for p in paths if p not in PATHS]:
        parser.error(f"--paths: unknown {unknown}; the paths are {PATHS}")
    results = RESULTS.with_name(f"{args.out}.md")
    sizes = [int(float(k.rstrip("Mm")) * 1e6) if k[-1] in "Mm" else int(k) for k in args.keys.split(",")]

    logging.getLogger("logkeeper.log").setLevel(logging.ERROR)  # "rebuilding indexes": none are written here
    # a SIGTERM (a stopped make, a killed run) unwinds through the finally below like an error, so
    # the standalone cluster's master and workers are stopped and the scratch removed
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    load_start = os.getloadavg()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)  # the commands in the results name one under /tmp
    check_scratch(args.dir or Path(tempfile.gettempdir()), max(sizes))
    scratch = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    started = time.perf_counter()
    workloads: list[Workload] = []
    progress: list[str] = []
    cluster = None
    try:
        if not args.no_standalone and PATHS[4] in paths:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.spark.standalone_cluster import StandaloneCluster

            # two one-core workers with room for the executor memory the job derives (resources.py)
            cluster = StandaloneCluster(scratch / "cluster", workers=2, cores=1, memory="9g").start()
        for n in sizes:
            workloads.append(sweep_size(scratch, n, cluster.url if cluster else None, progress, paths))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.perf_counter() - started

    for w in workloads:
        outs = {r.records_out for r in w.runs}
        if len(outs) != 1:
            kept = [(r.path, r.records_out) for r in w.runs]
            raise SystemExit(f"{w.name}: the paths kept different record counts: {kept}")

    lines = [
        "| backlog | path | rounds | wall s | x plain read | MB/s | CPU s (cores busy) | MB read | MB written "
        "| records kept | job's own figures |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in workloads:
        for r in w.runs:
            lines.append(row(w, r))
    lines.append("")
    for w in workloads:
        by = {r.path: r for r in w.runs}
        # --paths may leave one side out: then there is no cross-side ratio to print
        best_clean = min((r for r in w.runs if r.path.startswith("clean")), key=lambda r: r.wall_s, default=None)
        best_spark = min((r for r in w.runs if r.path.startswith("spark")), key=lambda r: r.wall_s, default=None)
        versus = (f"fastest Spark ({best_spark.path}) / fastest clean ({best_clean.path}) = "
                  f"{best_spark.wall_s / best_clean.wall_s:.2f}x wall time" if best_spark and best_clean else
                  "one side only")
        s1, s2 = by.get("spark local[1]"), by.get("spark local[2]")
        scaling = f"; local[1] / local[2] = {s1.wall_s / s2.wall_s:.2f}x" if s1 and s2 else ""
        stages = (f" (Spark stages alone {s1.extra.get('spark_s', 0) / max(s2.extra.get('spark_s', 1), 1e-9):.2f}x)"
                  if s1 and s2 else "")
        pinned = by.get(PATHS[5])
        cores = (f"; local[1] on 1 core / local[2] on 2 cores = {pinned.wall_s / s2.wall_s:.2f}x (Spark stages "
                 f"alone {pinned.extra.get('spark_s', 0) / max(s2.extra.get('spark_s', 1), 1e-9):.2f}x)"
                 if pinned and s2 else "")
        lines.append(f"- {w.name}: {w.dirty_bytes / 1e6:,.0f} MB, {w.records:,} records, plain read {w.read_s:.2f} s; "
                     f"{versus}{scaling}{stages}{cores}")
    lines += ["", "Reading:", f"- the whole script took {elapsed / 60:.0f} min."]
    text = "\n".join(lines)
    print(text)
    argv = shlex.join(sys.argv[1:])
    if os.environ.get("BENCH_VIA_MAKE"):
        command = f'make bench-spark BENCH_SPARK_ARGS="{argv}"' if argv else "make bench-spark"
    else:
        command = f".venv/bin/python bench/bench_spark.py {argv}"
    load_end = os.getloadavg()
    header = [
        "# bench_spark: the Spark compaction job vs `logkeeper clean` across backlog sizes",
        "",
        f"- command: `{command.strip()}` (this run took {elapsed / 60:.0f} min)",
        date_and_commit(),
        f"- machine: nproc {os.cpu_count()}, {cpu_model()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}; load average {', '.join(f'{x:.1f}' for x in load_start)} at the start, "
        f"{', '.join(f'{x:.1f}' for x in load_end)} at the end (this host's speed varies by "
        "2x over hours: compare the ratios measured in this run, not absolute seconds)",
        f"- plot: [{results.stem}.svg]({results.stem}.svg) (wall time against backlog keys, one line a path)",
        "",
        "",
    ]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("\n".join(header) + text + "\n")
    from spark_plot import write_svg

    write_svg(results.with_suffix(".svg"), [(w.distinct_keys, {r.path: r.wall_s for r in w.runs}) for w in workloads],
              PATHS)
    print(f"(written to {results} and {results.with_suffix('.svg')})")


if __name__ == "__main__":
    main()
