"""A/B of `logkeeper clean`: the same W1-shaped log (bench_kafka_cleaner's workload), or with
``--mixed-codecs N`` make interop step 4's mixed-codec one (bench_codec_ceiling's log), cleaned by
another copy of the package (A, e.g. the commit before a change) and by this tree (B), each run
on a fresh synced copy, the runs alternated so that the machine's drift falls on both. Prints
each run's cleaning MB/s (the cleaner's stats line) and wall time, and the medians.

Prepare A as bench/ab_runs.py says. Run:
``.venv/bin/python bench/ab_clean.py /tmp/lk/prev/sidecar [--segments 4 | --mixed-codecs 1000000]
[--segment-bytes 1048576] [--runs 4]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ab_runs import add_baseline, alternated, medians, prepare_baseline  # noqa: E402
from bench_cleaner import finish_log_dir  # noqa: E402
from bench_kafka_cleaner import TOPIC, make_log_dir  # noqa: E402

from logkeeper.log.log import Log  # noqa: E402
from logkeeper.log.log_config import LogConfig  # noqa: E402
from tests.kafka.kafka_harness import parse_cleaner_stats  # noqa: E402
from tests.kafka.workloads import append_workload, keyed_workload  # noqa: E402


def make_mixed_log_dir(root: Path, records: int, segment_bytes: int) -> None:
    """A log directory of step 4's workload (bench_codec_ceiling's shape) as logkeeper writes it."""
    part = root / f"{TOPIC}-0"
    log = Log(part, LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": segment_bytes}))
    append_workload(log, keyed_workload(records, keys=max(1, records // 10), seed=44, value_bytes=60, run=5_000),
                    batch_records=250)
    log.close()
    finish_log_dir(root, part)


def clean(work: Path, segment_bytes: int, pythonpath: str | None) -> tuple[float, float]:
    """(cleaning MB/s from the stats line, the process's wall seconds)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from logkeeper.cli import run; run()", "clean", str(work),
                           "--config", "min.cleanable.dirty.ratio=0.01", "--config", f"segment.bytes={segment_bytes}"],
                          capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - started
    rounds = parse_cleaner_stats(proc.stdout)
    if proc.returncode != 0 or not rounds:
        raise RuntimeError(f"logkeeper clean {work}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return rounds[0].mb_per_sec, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_baseline(ap)
    ap.add_argument("--segments", type=int, default=4, help="W1 segments of 1M records (1: ~119 MB)")
    ap.add_argument("--mixed-codecs", type=int, default=0, metavar="RECORDS",
                    help="clean this many records of step 4's mixed-codec workload instead of W1 segments")
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args(argv)
    prepare_baseline(ap, args.baseline)
    root = Path(tempfile.mkdtemp(prefix="ab-clean-", dir="/var/tmp"))  # a disk, not a tmpfs
    try:
        src = root / "src"
        if args.mixed_codecs:
            make_mixed_log_dir(src, args.mixed_codecs, args.segment_bytes)
        else:
            make_log_dir(src, args.segments, 1_000_000, args.segment_bytes, 7)
        subprocess.run(["sync"], check=True)
        runs: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        for r, k in alternated(args.runs):
            work = root / f"run{r}{k}"
            shutil.copytree(src, work)
            subprocess.run(["sync"], check=True)  # the copy's writeback is not the cleaner's
            mb_s, wall = clean(work, args.segment_bytes, args.baseline if k == "A" else None)
            shutil.rmtree(work)
            runs[k].append((mb_s, wall))
            print(f"run {r} {k}: {mb_s:.1f} MB/s cleaning, process {wall:.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = medians(runs)
    (a, a_wall), (b, b_wall) = med["A"], med["B"]
    print(f"median A ({args.baseline}): {a:.1f} MB/s, process {a_wall:.2f} s; B (this tree): {b:.1f} MB/s, "
          f"process {b_wall:.2f} s; B/A {b / a:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
