"""Kafka's LogCleaner and logkeeper's, side by side on the same uncompressed keyed log (issue 23).

The workload is written once: W1-shaped records (8-byte keys, 100-byte values, batches of 100-500
records, uncompressed; bench_cleaner.py's generator) - ``--segments`` x 1M records over
``--keys`` distinct keys (default 10 x 1M over 1M keys: W10, ~1.19 GB) - re-cut at batch
boundaries into segments of at most ``segment.bytes`` (1 MiB, Kafka's minimum, and 100 MiB), with
indexes recovered by logkeeper and an empty active segment. The same bytes then go to:

- a KRaft broker (make interop's harness): topic ``bench`` (compact, that segment.bytes,
  min.cleanable.dirty.ratio 0.01) created, the broker stopped, the partition's files replaced by
  the workload's and its checkpoints set (as interop step 3 does), the broker restarted with its
  cleaner on. It first cleans ``warmup`` (the same shape, two W1 segments: warms its JIT) while
  ``bench`` is held back by min.compaction.lag.ms; the lag is then set to 0 and Kafka cleans
  ``bench`` in one round. Its figure: its own stats message in log-cleaner.log.
- ``logkeeper clean`` on a copy (same configs), ``--runs`` times (3), each on a fresh copy, the
  median by MB/s reported: its stats line (the same message), and the whole process's wall time
  (starting, opening, closing included), with where the time outside the round went (the
  command's last stderr line, clean_report.PhaseTimes), beside the floors under its two largest
  parts, measured in the same run: Python starting with numpy, and unlinking the same replaced files.

Both must keep the same number of messages and bytes. Each comparison prints
``side-by-side <case>: logkeeper <x> MB/s, kafka <y> MB/s, ratio <r>x``; the results go to
bench/results/kafka_cleaner.md with a plot (kafka_cleaner.svg).

Run: ``make bench-kafka`` or ``.venv/bin/python bench/bench_kafka_cleaner.py [--segments 10]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
from bench_cleaner import TS, finish_log_dir, segment_bytes  # noqa: E402
from side_by_side import (  # noqa: E402
    date_and_commit,
    kernels_line,
    machine_line,
    parse_bench_args,
    side_by_side_line,
    svg_bars,
)

from logkeeper.fileio import call_each  # noqa: E402
from logkeeper.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT  # noqa: E402
from logkeeper.log.names import TopicPartition  # noqa: E402
from tests.kafka.kafka_harness import (  # noqa: E402
    LOGKEEPER,
    Broker,
    CleanerRound,
    fetch_kafka,
    parse_cleaner_stats,
)
from tests.kafka.kafka_harness import wait_for_round as kafka_wait_for_round  # noqa: E402
from tests.kafka.workloads import replace_segments, set_checkpoint  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka_cleaner.md"
PLOT = REPO / "bench" / "results" / "kafka_cleaner.svg"
TOPIC = "bench"
WARMUP = "warmup"
TP = TopicPartition(TOPIC, 0)
HOLD_MS = 10 * 365 * 86_400_000  # the records' timestamps are from 2023: a lag of years holds them back
MIB = 1 << 20
SEGMENT_SIZES = (MIB, 100 * MIB)
ROUND_TIMEOUT_S = 900


def write_workload(part: Path, n_segments: int, n_keys: int, segment_max: int, seed: int) -> int:
    """W1-shaped batches, re-cut into ``.log`` files of at most ``segment_max`` bytes; the offsets."""
    part.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    offset = 0
    chunk: list[bytes] = []
    chunk_base, chunk_size = 0, 0

    def flush() -> None:
        if chunk:
            (part / f"{chunk_base:020d}.log").write_bytes(b"".join(chunk))
            chunk.clear()

    for _ in range(n_segments):
        data = segment_bytes(offset, 1_000_000, n_keys, rng)
        pos = 0
        while pos < len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            size = length + 12
            if chunk_size + size > segment_max and chunk:
                flush()
                chunk_size = 0
            if not chunk:
                chunk_base = base
            chunk.append(data[pos:pos + size])
            chunk_size += size
            pos += size
        offset += 1_000_000
    flush()
    return offset


def make_log_dir(root: Path, n_segments: int, n_keys: int, segment_max: int, seed: int) -> int:
    logging.getLogger("logkeeper").setLevel(logging.ERROR)  # not a line a segment about its new indexes
    end = write_workload(root / f"{TOPIC}-0", n_segments, n_keys, segment_max, seed)
    finish_log_dir(root, root / f"{TOPIC}-0")
    return end


def wait_for_round(broker: Broker, log_name: str, end: int) -> CleanerRound:
    found = kafka_wait_for_round(broker, log_name, end, ROUND_TIMEOUT_S)
    if found is not None:
        return found
    raise RuntimeError(f"no Kafka cleaner stats for {log_name} ending at {end}\n{broker.describe()}")


def kafka_clean(dist_work: Path, src: Path, warm_src: Path, end: int, warm_end: int, segment_max: int,
                dist: object) -> CleanerRound:
    config = {"cleanup.policy": "compact", "segment.bytes": segment_max, "min.cleanable.dirty.ratio": 0.01}
    broker = Broker(dist, dist_work, {"log.cleaner.backoff.ms": 200})  # type: ignore[arg-type]
    broker.format()
    try:
        broker.start()
        broker.create_topic(WARMUP, 1, {**config, "min.compaction.lag.ms": 0})
        broker.create_topic(TOPIC, 1, {**config, "min.compaction.lag.ms": HOLD_MS})
        broker.stop()
        for name, source, last in ((TOPIC, src, end), (WARMUP, warm_src, warm_end)):
            replace_segments(source / f"{TOPIC}-0", broker.data_dir / f"{name}-0")
            set_checkpoint(broker.data_dir, RECOVERY_POINT_CHECKPOINT, TopicPartition(name, 0), last)
            set_checkpoint(broker.data_dir, LOG_START_OFFSET_CHECKPOINT, TopicPartition(name, 0), 0)
        broker.start(timeout=300)
        wait_for_round(broker, f"{WARMUP}-0", warm_end)
        broker.alter_topic_config(TOPIC, {"min.compaction.lag.ms": 0})
        measured = wait_for_round(broker, f"{TOPIC}-0", end)
        broker.stop()
        return measured
    finally:
        broker.kill()


# the command's last stderr line (cleaner/clean_report.PhaseTimes): where its time went
PHASES = re.compile(r"logkeeper clean: (?P<total>[\d.]+) s: opening \d+ logs? (?P<opening>[\d.]+) s, "
                    r"cleaning (?P<cleaning>[\d.]+) s, closing (?P<closing>[\d.]+) s, "
                    r"removing replaced files (?P<removing>[\d.]+) s")


def outside_cleaning(wall: float, stderr: str) -> dict[str, float]:
    """The process's time outside its cleaning phase (the rounds, choosing the log and the closing
    lines included: the stats line's seconds have one decimal), by phase: Python's start and the
    imports (the wall time less the command's own), opening, closing, removing the replaced files."""
    m = PHASES.search(stderr)
    if m is None:
        raise RuntimeError(f"no phase times in logkeeper clean's stderr:\n{stderr[-2000:]}")
    t = {k: float(v) for k, v in m.groupdict().items()}
    return {"starting Python, importing": wall - t["total"], "opening": t["opening"], "closing": t["closing"],
            "removing replaced files": t["removing"]}


def python_numpy_start_s(runs: int = 3) -> float:
    """The floor under "starting Python, importing": the wall time of this Python starting,
    importing numpy (which the compiled kernels need) and exiting; the median of ``runs``."""
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import numpy"], check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
    return sorted(walls)[len(walls) // 2]


def unlink_replaced_s(src: Path, work: Path) -> float:
    """The floor under "removing replaced files": unlinking, on a fresh synced copy of the
    workload, the files a round replaces (every segment's but the active one's), overlapped on the
    threads the command's remover uses (fileio.call_each), without its bookkeeping and fsync."""
    shutil.copytree(src, work)
    subprocess.run(["sync"], check=True)
    part = work / f"{TOPIC}-0"
    active = max(p.name.split(".")[0] for p in part.glob("*.log"))
    doomed = [p for p in part.iterdir() if p.name.split(".")[0] < active
              and p.suffix in (".log", ".index", ".timeindex", ".txnindex")]
    started = time.perf_counter()
    call_each(os.unlink, doomed)
    seconds = time.perf_counter() - started
    shutil.rmtree(work)
    return seconds


def logkeeper_clean(src: Path, work: Path, segment_max: int) -> tuple[CleanerRound, float, dict[str, float]]:
    shutil.copytree(src, work)
    subprocess.run(["sync"], check=True)  # the copy's writeback is not the cleaner's
    started = time.perf_counter()
    proc = subprocess.run([str(LOGKEEPER), "clean", str(work), "--config", "min.cleanable.dirty.ratio=0.01",
                           "--config", f"segment.bytes={segment_max}"], capture_output=True, text=True,
                          timeout=ROUND_TIMEOUT_S)
    wall = time.perf_counter() - started
    rounds = [r for r in parse_cleaner_stats(proc.stdout) if r.log == f"{TOPIC}-0"]
    if proc.returncode != 0 or len(rounds) != 1:
        raise RuntimeError(f"logkeeper clean {work}: exit {proc.returncode}, {len(rounds)} rounds\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return rounds[0], wall, outside_cleaning(wall, proc.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=10, help="W1 segments of 1M records (10: ~1.19 GB)")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3,
                    help="logkeeper clean runs a size, each on a fresh copy; the median by MB/s is reported")
    args, command = parse_bench_args(ap, "bench_kafka_cleaner.py", argv)
    dist = fetch_kafka()
    kernels = kernels_line()  # before the runs: what `logkeeper clean` will load
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-cleaner-", dir=os.environ.get("TMPDIR")))
    rows = []
    outside_rows: list[str] = []
    lines = []
    bars = []
    try:
        for segment_max in SEGMENT_SIZES:
            case = f"uncompressed cleaner {segment_max // MIB} MiB segments"
            src, warm_src = work / f"src-{segment_max}", work / f"warm-{segment_max}"
            end = make_log_dir(src, args.segments, args.keys, segment_max, seed=7)
            warm_end = make_log_dir(warm_src, 2, args.keys // 5, segment_max, seed=8)
            files = len(list((src / f"{TOPIC}-0").glob("*.log")))
            kafka = kafka_clean(work / f"kafka-{segment_max}", src, warm_src, end, warm_end, segment_max, dist)
            load_k = os.getloadavg()[0]
            # one Kafka round, several of ours: the host's phases move a single round of ours by a
            # fifth (kafka_cleaner.md), Kafka's JIT-warmed round much less
            runs = []
            for i in range(max(1, args.runs)):
                runs.append(logkeeper_clean(src, work / f"lk-{segment_max}-{i}", segment_max))
                shutil.rmtree(work / f"lk-{segment_max}-{i}")
            runs.sort(key=lambda r: r[0].mb_per_sec)
            ours, wall, outside = runs[len(runs) // 2]
            spread = ", ".join(f"{r[0].mb_per_sec:.1f}" for r in runs)
            # the same-run floors under the two largest phases, which the command cannot go below
            floors = (python_numpy_start_s(), unlink_replaced_s(src, work / f"unlink-{segment_max}"))
            total = sum(outside.values())
            outside_rows.append(f"| {segment_max // MIB} MiB | {files:,} | {total:.2f} | "
                                + " | ".join(f"{v:.2f}" for v in outside.values())
                                + f" | {floors[0]:.2f} | {floors[1]:.2f} | {total - sum(floors):.2f} |")
            print(f"{case}: outside cleaning: " + ", ".join(f"{k} {v:.2f} s" for k, v in outside.items())
                  + f"; floors: Python with numpy {floors[0]:.2f} s, unlinking the replaced files {floors[1]:.2f} s")
            load_l = os.getloadavg()[0]
            if (ours.start_messages, ours.end_messages) != (kafka.start_messages, kafka.end_messages):
                raise RuntimeError(f"{case}: the cleaners disagree\n{kafka.text}\n{ours.text}")
            shutil.rmtree(work / f"kafka-{segment_max}")
            shutil.rmtree(src)
            shutil.rmtree(warm_src)
            lines.append(side_by_side_line(case, ours.mb_per_sec, kafka.mb_per_sec))
            lines.append(side_by_side_line(f"{case}, whole logkeeper process", ours.mb / wall, kafka.mb_per_sec))
            print(lines[-2], lines[-1], sep="\n", flush=True)
            bars += [(f"{segment_max // MIB} MiB segments (stats)", ours.mb_per_sec / kafka.mb_per_sec),
                     (f"{segment_max // MIB} MiB segments (process)", ours.mb / wall / kafka.mb_per_sec)]
            rows.append(f"| {segment_max // MIB} MiB | {files:,} | {kafka.mb:,.1f} | {kafka.start_messages:,} -> "
                        f"{kafka.end_messages:,} | {kafka.seconds:.1f} | **{kafka.mb_per_sec:.1f}** "
                        f"| {ours.seconds:.1f} "
                        f"| **{ours.mb_per_sec:.1f}** ({spread}) | {wall:.2f} | {sum(outside.values()):.2f} "
                        f"| **{ours.mb_per_sec / kafka.mb_per_sec:.2f}x** | {load_k:.1f} / {load_l:.1f} |")
            print(f"Kafka:\n{kafka.text}\nlogkeeper:\n{ours.text}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join([
        "# Kafka's LogCleaner and `logkeeper clean`, uncompressed, side by side",
        "",
        f"- command: `{command}` (`make bench-kafka`)",
        date_and_commit(),
        f"- machine: {machine_line()}",
        f"- Kafka {dist.version}: one KRaft node on 127.0.0.1, one cleaner thread, dedupe buffer 128 MiB "
        "(default), log.cleaner.backoff.ms 200; its JIT warmed by a first round on `warmup` (2M records); "
        "its figure is its own stats message (log-cleaner.log)",
        f"- workload, written once: {args.segments} x 1M W1-shaped records (8-byte keys over {args.keys:,} keys, "
        "100-byte values, 100-500 records a batch, uncompressed, no tombstones) re-cut into segments of at most "
        "segment.bytes; both cleaners clean all of it in one round (min.cleanable.dirty.ratio 0.01)",
        "- logkeeper: `logkeeper clean DIR --config min.cleanable.dirty.ratio=0.01 --config segment.bytes=S` "
        "on a copy of the same files (synced first); figure from its stats line, and the whole process; "
        f"{max(1, args.runs)} runs a size, each on a fresh copy, the median by MB/s reported (all of them in "
        f"brackets); kernels: {kernels}",
        "",
        "![ratios](kafka_cleaner.svg)",
        "",
        "| segment.bytes | segments | MB read | messages | Kafka s | Kafka MB/s | logkeeper s | logkeeper MB/s "
        "| logkeeper process wall s | outside cleaning s | ratio | load avg (after Kafka / logkeeper) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        "Target: >= 5x Kafka with both segment sizes.",
        "",
        "Where the logkeeper process's time outside cleaning went (seconds; the phases from the command's last "
        "stderr line, its cleaning phase being the rounds, choosing the log and the closing lines; starting "
        "Python and importing = the wall time less the command's own). Target: <= 0.1 s outside cleaning. "
        "Beside them, measured in the same run, the floors under the two largest phases: this Python "
        "starting, importing numpy and exiting (`python -c 'import numpy'`; the compiled kernels need numpy), "
        "and unlinking the files the round replaces (overlapped as the command does), on a fresh synced copy of the "
        "same workload; "
        "above the floors = outside cleaning less both.",
        "",
        "| segment.bytes | segments | outside cleaning | starting Python, importing | opening | closing "
        "| removing replaced files | floor: Python with numpy | floor: unlinking the same files | above the floors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *outside_rows,
        "",
        "```",
        *lines,
        "```",
        "",
    ])
    RESULTS.write_text(text)
    PLOT.write_text(svg_bars(f"logkeeper / Kafka {dist.version} LogCleaner, uncompressed (MB/s ratio)", bars,
                             target=5.0))
    print("\n".join(lines))
    print(f"(written to {RESULTS.relative_to(REPO)}, {PLOT.relative_to(REPO)}); records from {TS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
