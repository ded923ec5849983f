"""Log benchmarks, measured in one run on the same bytes:

1. appending 16 KiB uncompressed batches through Log.append vs a plain sequential write of the
   same bytes (target: at most 2x the cost); beside it, the same batches of an idempotent producer
   (a producer id and sequences in order: what the Java producer sends by default with acks=all),
   which the append also checks and records in the producer's state (a report);
2. recovering a 1 GB segment (CRC check and index rebuild) vs reading the file (target: at
   least half the read speed).

Run: ``.venv/bin/python bench/bench_log.py [--recovery-mb 1024] [--out bench/results/log.md]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from side_by_side import command_and_date, machine, publish

from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.segment import LogSegment
from logkeeper.records import batch_format as bf
from logkeeper.records.batch import compute_crc
from logkeeper.records.builder import Record, build_batch


def idempotent_batches(batch: bytes, count: int) -> list[bytes]:
    """``count`` copies of ``batch`` as one idempotent producer's next batches: each its sequences
    after the one before (the header's baseSequence and CRC patched, the records unchanged)."""
    records = struct.unpack_from(">i", batch, bf.RECORDS_COUNT_OFFSET)[0]
    out = []
    for i in range(count):
        b = bytearray(batch)
        struct.pack_into(">i", b, bf.BASE_SEQUENCE_OFFSET, i * records % (1 << 31))
        struct.pack_into(">I", b, bf.CRC_OFFSET, compute_crc(b, 0, len(b)))
        out.append(bytes(b))
    return out


def time_appends(log_dir: Path, config: LogConfig, batches: list[bytes]) -> float:
    """Seconds to Log.append ``batches`` to a new log in ``log_dir`` (removed after)."""
    lg = Log(log_dir, config)
    t0 = time.perf_counter()
    for b in batches:
        lg.append(b)
    seconds = time.perf_counter() - t0
    lg.close()
    shutil.rmtree(log_dir)
    return seconds


def make_batch(target_bytes: int, now_ms: int, **batch_fields: int) -> bytes:
    """One producer batch (base offset 0) of about ``target_bytes`` with 8-byte keys;
    ``batch_fields``: build_batch's producer fields."""
    value = b"v" * 100
    n = max(1, target_bytes // 115)
    records = [Record(i, now_ms, b"%08d" % i, value) for i in range(n)]
    return build_batch(records, **batch_fields)


def bench_append(tmp: Path, batch_count: int, rounds: int) -> dict[str, Any]:
    now = int(time.time() * 1000)
    batch = make_batch(16 * 1024, now)
    idempotent = idempotent_batches(make_batch(16 * 1024, now, producer_id=7, producer_epoch=0, base_sequence=0),
                                    batch_count)
    results: dict[str, list[float]] = {"plain": [], "log": [], "idempotent": []}
    config = LogConfig.from_props({"segment.bytes": 2 * 1024 * 1024 * 1024})
    for r in range(rounds):
        plain = tmp / f"plain-{r}.bin"
        t0 = time.perf_counter()
        with open(plain, "wb", buffering=0) as f:
            for _ in range(batch_count):
                f.write(batch)
        results["plain"].append(time.perf_counter() - t0)
        plain.unlink()
        log_dir = tmp / f"bench-{r}"
        results["log"].append(time_appends(log_dir, config, [batch] * batch_count))
        results["idempotent"].append(time_appends(log_dir, config, idempotent))
    total_mb = len(batch) * batch_count / 1e6
    plain_s = statistics.median(results["plain"])
    log_s = statistics.median(results["log"])
    idem_s = statistics.median(results["idempotent"])
    return {"batch_bytes": len(batch), "batches": batch_count, "mb": total_mb,
            "plain_s": plain_s, "log_s": log_s, "idem_s": idem_s,
            "plain_us": plain_s / batch_count * 1e6, "log_us": log_s / batch_count * 1e6,
            "idem_us": idem_s / batch_count * 1e6,
            "ratio": log_s / plain_s, "idem_ratio": idem_s / plain_s,
            # each round's Log.append time over the plain write of the same round: the spread
            "round_ratios": [lg / pl for pl, lg in zip(results["plain"], results["log"])]}


def bench_recovery(tmp: Path, size_mb: int) -> dict[str, float]:
    now = int(time.time() * 1000)
    batch = make_batch(16 * 1024, now)
    config = LogConfig.from_props({"segment.bytes": 2 * 1024 * 1024 * 1024})
    log_dir = tmp / "recover-0"
    lg = Log(log_dir, config)
    count = size_mb * 1024 * 1024 // len(batch)
    for _ in range(count):
        lg.append(batch)
    lg.flush()
    lg.close()
    log_file = log_dir / "00000000000000000000.log"
    size = log_file.stat().st_size
    # warm the page cache for both runs alike
    read_times, recover_times = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        with open(log_file, "rb", buffering=0) as f:
            buf = bytearray(8 * 1024 * 1024)
            while f.readinto(buf):
                pass
        read_times.append(time.perf_counter() - t0)
        seg = LogSegment(log_dir, 0, index_interval_bytes=config.index_interval_bytes,
                         max_index_size=config.max_index_size)
        t0 = time.perf_counter()
        result = seg.recover()
        recover_times.append(time.perf_counter() - t0)
        seg.close()
        assert result.truncated_bytes == 0
    read_s, rec_s = min(read_times), min(recover_times)
    return {"bytes": size, "read_s": read_s, "recover_s": rec_s,
            "read_mb_s": size / read_s / 1e6, "recover_mb_s": size / rec_s / 1e6,
            "share": read_s / rec_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--recovery-mb", type=int, default=1024)
    ap.add_argument("--out", default="bench/results/log.md")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="logkeeper-bench-", dir=os.environ.get("BENCH_TMP")))
    try:
        # one warm-up append to load compiled kernels
        bench_append(tmp, 10, 1)
        a = bench_append(tmp, args.batches, args.rounds)
        r = bench_recovery(tmp, args.recovery_mb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [
        "# Log benchmarks",
        "",
        *command_and_date(f"python bench/bench_log.py --batches {args.batches} --rounds {args.rounds} "
                          f"--recovery-mb {args.recovery_mb}"),
        f"- machine: {machine(unknown='unknown')}",
        "",
        "## Append: 16 KiB uncompressed batches (median of rounds, page cache, no fsync)",
        "",
        "| path | total s | µs / batch | MB/s | cost vs plain write |",
        "|---|---:|---:|---:|---:|",
        f"| plain sequential write | {a['plain_s']:.3f} | {a['plain_us']:.1f} | {a['mb'] / a['plain_s']:.0f} | 1.00x |",
        f"| Log.append | {a['log_s']:.3f} | {a['log_us']:.1f} | {a['mb'] / a['log_s']:.0f} | "
        f"**{a['ratio']:.2f}x** (target <= 2x) |",
        f"| Log.append, an idempotent producer's batches | {a['idem_s']:.3f} | {a['idem_us']:.1f} "
        f"| {a['mb'] / a['idem_s']:.0f} | {a['idem_ratio']:.2f}x (report) |",
        "",
        f"{a['batches']} batches of {a['batch_bytes']} bytes ({a['mb']:.0f} MB) a round; cost vs plain "
        f"write round by round: {', '.join(f'{r:.2f}x' for r in a['round_ratios'])}.",
        "",
        "## Recovery of one segment (CRC check + offset/time index rebuild) vs reading it",
        "",
        "| path | s | MB/s |",
        "|---|---:|---:|",
        f"| read the file (8 MiB readinto) | {r['read_s']:.3f} | {r['read_mb_s']:.0f} |",
        f"| LogSegment.recover | {r['recover_s']:.3f} | {r['recover_mb_s']:.0f} |",
        "",
        f"Segment of {r['bytes'] / 1e6:.0f} MB; recovery runs at **{r['share']:.2f}x** the read speed "
        "(target >= 0.5x); best of 3, warm page cache.",
        "",
    ]
    publish(lines, Path(args.out))


if __name__ == "__main__":
    main()
