"""A log's load after a crash, with and without the producer snapshot a roll writes.

After a crash (no clean-shutdown marker) a load rebuilds the producer state from the latest
``.snapshot`` at or below the log end and scans the batch headers after it. Before rolls wrote
snapshots, the latest one was the last clean close's, or none: the scan then covered every
segment. This measures that difference on one log of Kafka's minimum segment size: the
W1-shaped workload of bench_kafka_cleaner.py (``--segments`` x 1M records, 1 MiB segments),
loaded as after a crash with everything flushed (recovery point = log end), twice:

- ``no snapshot``: the baseline, every segment's headers scanned;
- ``roll snapshot``: the snapshot a roll writes at the active segment's base offset.

Rounds alternate the two, with the page cache warm and, when the process may drop it (root),
cold (``echo 3 > /proc/sys/vm/drop_caches`` before each load). Results: bench/results/snapshot_load.md.

Run: ``.venv/bin/python bench/bench_snapshot_load.py [--segments 10] [--rounds 6]`` (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
from bench_kafka_cleaner import TOPIC, make_log_dir  # noqa: E402
from side_by_side import command_and_date, machine, parse_bench_args, publish  # noqa: E402

from logkeeper.log import producer_snapshot  # noqa: E402
from logkeeper.log.log import Log  # noqa: E402
from logkeeper.log.log_config import LogConfig  # noqa: E402
from logkeeper.log.producer_state import rebuild_producer_state  # noqa: E402

SEGMENT_BYTES = 1 << 20
CASES = ("no snapshot", "roll snapshot")


def make_cases(root: Path, n_segments: int) -> tuple[dict[str, Path], int, int]:
    """The workload's partition twice: without any snapshot, and with a roll's at the last
    segment's base; (the directories, the segments, the log end offset)."""
    make_log_dir(root / "src", n_segments, 1_000_000, SEGMENT_BYTES, 7)
    src = root / "src" / f"{TOPIC}-0"
    config = LogConfig.from_props({"segment.bytes": SEGMENT_BYTES})
    dirs = {}
    for i, case in enumerate(CASES):
        d = root / f"case{i}" / f"{TOPIC}-0"
        shutil.copytree(src, d)
        for p in d.glob("*.snapshot"):
            p.unlink()
        dirs[case] = d
    log = Log(dirs["roll snapshot"], config)
    last, end, segments = log.active_segment.base_offset, log.log_end_offset, len(log.segments)
    state = rebuild_producer_state(log.segments.values(0, last))  # what the roll to ``last`` held
    log.close()
    producer_snapshot.write(dirs["roll snapshot"], last, state)
    shutil.rmtree(root / "src")
    return dirs, segments, end


def can_drop_caches() -> bool:
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def time_loads(dirs: dict[str, Path], end: int, rounds: int, cold: bool) -> dict[str, list[float]]:
    config = LogConfig.from_props({"segment.bytes": SEGMENT_BYTES})
    times: dict[str, list[float]] = {case: [] for case in CASES}
    for i in range(rounds):
        for case in CASES if i % 2 == 0 else tuple(reversed(CASES)):
            if cold:
                subprocess.run(["sync"], check=True)
                Path("/proc/sys/vm/drop_caches").write_text("3\n")
            started = time.perf_counter()
            log = Log(dirs[case], config, had_clean_shutdown=False, recovery_point=end)
            times[case].append(time.perf_counter() - started)
            log.close()  # not a clean close: the directory stays as it was for the next round
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=10, help="W1 segments of 1M records (10: ~1.19 GB)")
    ap.add_argument("--rounds", type=int, default=6, help="loads of each case, per page-cache state")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "snapshot_load.md")
    args, command = parse_bench_args(ap, "bench_snapshot_load.py", argv)
    with tempfile.TemporaryDirectory(prefix="bench-snapload-") as tmp:
        dirs, segments, end = make_cases(Path(tmp), args.segments)
        results = {"warm": time_loads(dirs, end, args.rounds, cold=False)}
        if can_drop_caches():
            results["cold"] = time_loads(dirs, end, args.rounds, cold=True)
    lines = ["# A log's load after a crash: with the snapshot a roll writes, and without", "",
             *command_and_date(command),
             f"- machine: {machine(f'numpy {np.__version__}')}",
             f"- log: {segments:,} segments of at most 1 MiB, {end:,} records (W1-shaped, uncompressed); loaded "
             "as after a crash with everything flushed (no clean-shutdown marker, recovery point = log end)",
             "- rounds alternate the cases; cold: the page cache dropped before each load", "",
             "| page cache | case | loads | median s | each s |", "|---|---|---:|---:|---|"]
    ratios = []
    for cache, times in results.items():
        for case in CASES:
            each = " ".join(f"{t:.3f}" for t in times[case])
            lines.append(f"| {cache} | {case} | {len(times[case])} | {statistics.median(times[case]):.3f} | {each} |")
        ratio = statistics.median(times["no snapshot"]) / statistics.median(times["roll snapshot"])
        ratios.append(f"load after a crash, page cache {cache}: {ratio:.2f}x faster from the roll's snapshot "
                      "than scanning every segment")
    if "cold" not in results:
        ratios.append("(cold rows need root to drop the page cache: not measured)")
    publish([*lines, "", *ratios, ""], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
