"""Benchmark: walking a ~100 MB segment buffer, kafka-python's parser vs logkeeper's compiled scan.

Run: ``.venv/bin/python bench/bench_walk.py [--records N]``. Prints a table and writes it, with the
command, date and machine, to ``bench/results/walk.md``. All figures come from one process/run:
(a) kafka-python ``DefaultRecordBatch`` iterating every record (on a subset, scaled to records/s),
(b) ``scan_batches`` + ``walk_batches`` (warm, after one call to compile/load),
(c) ``scan_batches`` + ``first_crc_mismatch`` (CRC-32C of every batch),
(d) scan + CRC + walk (what ``verify`` does per segment),
(e) (b) split over 2 threads (the kernels release the GIL),
plus the first call of the kernels as this process loads them (compiled ahead of time after make setup),
and what numba's JIT would cost instead (LOGKEEPER_KERNELS=jit), cold (empty cache) and warm (cache loaded),
in fresh subprocesses.
"""

from __future__ import annotations

import argparse
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from side_by_side import command_and_date, machine

from logkeeper import aot
from logkeeper.records.scan import first_crc_mismatch, scan_batches, walk_batches, walk_records

RESULTS = Path(__file__).resolve().parent / "results" / "walk.md"


def build_segment(n_records: int, seed: int = 7) -> tuple[bytes, int]:
    """~(n_records * 120) bytes of uncompressed batches of 100-500 records (8-byte keys, 100-byte
    values), built by kafka-python as 16 templates and tiled with patched base offsets."""
    rng = np.random.default_rng(seed)
    templates = []
    for t in range(16):
        count = int(rng.integers(100, 501))
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(count):
            key = struct.pack(">q", t * 1000 + i)
            value = rng.bytes(100)
            builder.append(i, 1_700_000_000_000 + i, key, value, [])
        templates.append((bytes(builder.build()), count))
    parts: list[bytes] = []
    offsets = []
    total = 0
    t = 0
    while total < n_records:
        raw, count = templates[t % len(templates)]
        parts.append(raw)
        offsets.append(total)
        total += count
        t += 1
    buf = bytearray(b"".join(parts))
    pos = 0
    for part, base in zip(parts, offsets):
        struct.pack_into(">q", buf, pos, base)  # baseOffset is not covered by the CRC
        pos += len(part)
    return bytes(buf), total


def kafka_python_rate(data: bytes, max_records: int) -> tuple[float, int]:
    view = memoryview(data)
    pos = 0
    seen = 0
    t0 = time.perf_counter()
    while seen < max_records and pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        batch = DefaultRecordBatch(view[pos : pos + 12 + length])
        for rec in batch:
            _ = (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)
            seen += 1
        pos += 12 + length
    return seen / (time.perf_counter() - t0), seen


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


_COMPILE_PROBE = """
import time, numpy as np
t0 = time.perf_counter()
from logkeeper.records.scan import scan_batches, walk_batches
t1 = time.perf_counter()
buf = np.frombuffer(open({path!r}, 'rb').read(), np.uint8)
walk_batches(buf, scan_batches(buf))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def compile_cost(sample: bytes) -> tuple[float, float]:
    """Seconds of the first scan+walk call in a fresh process with numba's JIT
    (LOGKEEPER_KERNELS=jit: what the ahead-of-time kernels save): (cold cache, warm cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sample.log")
        with open(path, "wb") as f:
            f.write(sample)
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "numba-cache"), LOGKEEPER_KERNELS="jit")
        runs = []
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", _COMPILE_PROBE.format(path=path)],
                env=env, check=True, capture_output=True, text=True,
            ).stdout.split()
            runs.append(float(out[1]))
    return runs[0], runs[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kafka-python-records", type=int, default=50_000)
    args = parser.parse_args()

    t0 = time.perf_counter()
    data, n = build_segment(args.records)
    build_s = time.perf_counter() - t0
    buf = np.frombuffer(data, dtype=np.uint8)

    kp_rate, kp_seen = kafka_python_rate(data, args.kafka_python_records)

    t0 = time.perf_counter()
    table = scan_batches(buf)
    records = walk_batches(buf, table)  # first call: compile or load from the numba cache
    first_call_s = time.perf_counter() - t0
    if len(records) != n or first_crc_mismatch(buf, table) != -1:
        raise SystemExit("benchmark segment did not walk cleanly")

    scan_s = best_of(lambda: scan_batches(buf))
    walk_s = best_of(lambda: walk_batches(buf, scan_batches(buf)))
    crc_s = best_of(lambda: first_crc_mismatch(buf, scan_batches(buf)))

    def verify() -> None:
        t = scan_batches(buf)
        first_crc_mismatch(buf, t)
        walk_batches(buf, t)

    verify_s = best_of(verify)

    half = len(table) // 2
    starts = table.position + 61
    ends = table.position + table.size.astype(np.int64)

    def walk_part(lo: int, hi: int) -> int:
        s = slice(lo, hi)
        return len(walk_records(buf, starts[s], ends[s], table.record_count[s],
                                table.base_offset[s], table.base_timestamp[s]))

    with ThreadPoolExecutor(2) as pool:
        threads_s = best_of(
            lambda: sum(pool.map(lambda r: walk_part(*r), [(0, half), (half, len(table))]))
        )

    first_batch_end = int(table.position[1]) if len(table) > 1 else len(data)
    cold_s, warm_s = compile_cost(data[: first_batch_end * 2])

    rows = [
        ("(a) kafka-python DefaultRecordBatch iteration", kp_rate, None),
        ("(b) scan_batches + walk_batches", n / walk_s, walk_s),
        ("(c) scan_batches + CRC-32C check", n / crc_s, crc_s),
        ("(d) scan + CRC + walk (verify)", n / verify_s, verify_s),
        ("(e) walk_records, 2 threads (nogil)", n / threads_s, threads_s),
        ("    scan_batches alone (header hops; records covered/s)", n / scan_s, scan_s),
    ]
    mb = len(data) / 1e6
    lines = [
        f"segment: {n:,} records, {len(table):,} batches, {mb:.1f} MB uncompressed "
        f"(8-byte keys, 100-byte values; built in {build_s:.1f} s); kafka-python timed on "
        f"{kp_seen:,} records",
        "",
        "| path | records/s | MB/s | seconds (whole segment) | vs kafka-python |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rate, secs in rows:
        seconds = f"{secs:.4f}" if secs is not None else f"{n / rate:.2f} (scaled)"
        mbps = rate * len(data) / n / 1e6
        lines.append(f"| {name} | {rate / 1e6:.2f}M | {mbps:,.0f} | {seconds} | {rate / kp_rate:.1f}x |")
    lines += [
        "",
        f"ratio ours/kafka-python (b): {n / walk_s / kp_rate:.1f}x (target >= 20x)",
        f"first scan+walk call in this process ({aot.mode()} kernels): {first_call_s:.3f} s; "
        f"in a fresh process with numba's JIT instead (LOGKEEPER_KERNELS=jit): cold cache {cold_s:.2f} s, "
        f"warm cache {warm_s:.2f} s",
    ]
    text = "\n".join(lines)
    print(text)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    command = ".venv/bin/python bench/bench_walk.py " + " ".join(sys.argv[1:])
    header = [
        "# bench_walk: record walk, kafka-python vs logkeeper.records.scan",
        "",
        *command_and_date(command),
        f"- machine: {machine(f'numpy {np.__version__}', unknown=platform.processor() or 'unknown')}",
        "",
        "",
    ]
    RESULTS.write_text("\n".join(header) + text + "\n")
    print(f"(written to {RESULTS})")


if __name__ == "__main__":
    main()
