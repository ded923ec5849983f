"""The codec-bound ceiling of cleaning a mixed-codec log: decompressing and recompressing every
compressed batch of it, nothing else, on one thread and on the cleaner's codec pool (the codec libraries
release the GIL), as MB/s of the log's bytes (issue 23, point 3).

The log is make interop's step-4 workload as logkeeper writes it (tests/kafka/workloads.py: keyed
records whose codec changes every 5,000 records through none, gzip, snappy, lz4, zstd; 3%
tombstones, 10% with headers), through the Log API with 250-record batches. A cleaner of that log
cannot be faster than this ceiling unless it avoids recompressing batches; the cleaners' own
figures on the same workload are in kafka_side_by_side.md (make interop, step 4).

Run: ``.venv/bin/python bench/bench_codec_ceiling.py [--records 1000000]``; results in
bench/results/codec_ceiling.md.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from side_by_side import date_and_commit, machine_line, parse_bench_args  # noqa: E402

from logkeeper.log.log import Log  # noqa: E402
from logkeeper.log.log_config import LogConfig  # noqa: E402
from logkeeper.records.codec_pool import POOL_THREADS, codec_map  # noqa: E402
from logkeeper.records.compression import Codec, compress, decompress  # noqa: E402
from tests.kafka.workloads import append_workload, keyed_workload  # noqa: E402

RESULTS = REPO / "bench" / "results" / "codec_ceiling.md"
HEADER = 61  # a v2 batch's header; the records (compressed or not) follow


def batches(data: bytes) -> list[tuple[Codec, memoryview]]:
    """(codec, records section) of every compressed batch of a .log file's bytes."""
    out: list[tuple[Codec, memoryview]] = []
    view = memoryview(data)
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        codec = Codec(attributes & 0x7)
        if codec != Codec.NONE:
            out.append((codec, view[pos + HEADER:pos + 12 + length]))
        pos += 12 + length
    return out


def recompress(item: tuple[Codec, memoryview]) -> int:
    codec, payload = item
    return len(compress(codec, decompress(codec, payload)))


def timed(items: list[tuple[Codec, memoryview]], threads: int) -> float:
    """Seconds to recompress every item on one thread, or through the cleaner's codec pool
    (records/codec_pool.py: one run of consecutive items a thread, ``threads`` being its size)."""
    started = time.perf_counter()
    if threads == 1:
        for item in items:
            recompress(item)
    else:
        codec_map(recompress, items)
    return time.perf_counter() - started


def gzip_libraries(items: list[tuple[Codec, memoryview]], repeat: int) -> dict[str, tuple[float, int]]:
    """(seconds, best of ``repeat``; bytes written) to decompress and recompress the gzip batches
    alone at level 6, one thread, through zlib-ng (what compression.py uses) and through the
    standard library's zlib (what Java's Deflater is: Kafka's own bytes)."""
    import zlib

    from zlib_ng import zlib_ng

    payloads = [bytes(p) for c, p in items if c == Codec.GZIP]
    out = {}
    for name, lib in (("zlib-ng", zlib_ng), ("zlib", zlib)):
        def run(lib: Any = lib) -> tuple[float, int]:
            started = time.perf_counter()
            size = sum(len(lib.compress(lib.decompress(p, wbits=31), 6, wbits=-15)) for p in payloads)
            return time.perf_counter() - started, size
        timings = [run() for _ in range(repeat)]
        out[name] = (min(t for t, _ in timings), timings[0][1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args, command = parse_bench_args(ap, "bench_codec_ceiling.py", argv)
    with tempfile.TemporaryDirectory(prefix="codec-ceiling-") as tmp:
        config = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 1 << 30})
        log = Log(Path(tmp) / "t-0", config)
        append_workload(log, keyed_workload(args.records, keys=max(1, args.records // 10), seed=44, value_bytes=60,
                                            run=5_000), batch_records=250)
        log.close()
        data = b"".join(p.read_bytes() for p in sorted((Path(tmp) / "t-0").glob("*.log")))
    items = batches(data)
    mb = len(data) / (1 << 20)
    rows = []
    for threads in sorted({1, POOL_THREADS}):
        best = min(timed(items, threads) for _ in range(args.repeat))
        rows.append((threads, best, mb / best))
        print(f"codec ceiling, {threads} thread(s): {mb / best:.1f} MB/s of the log ({best:.2f} s)", flush=True)
    gz = gzip_libraries(items, args.repeat)
    print("gzip batches alone, 1 thread: " + ", ".join(f"{k} {t:.2f} s, {n:,} bytes" for k, (t, n) in gz.items()),
          flush=True)
    compressed = sum(len(p) for _, p in items) / (1 << 20)
    text = "\n".join([
        "# The codec-bound ceiling of cleaning the mixed-codec log",
        "",
        f"- command: `{command}`",
        date_and_commit() + "; "
        f"1-minute load average {os.getloadavg()[0]:.1f}",
        f"- machine: {machine_line()}",
        f"- log: make interop step 4's workload, {args.records:,} records written by logkeeper's Log API "
        f"(250-record batches): {mb:.1f} MB (MiB), {len(items):,} compressed batches holding {compressed:.1f} MB",
        "- measured: decompress + recompress (same codec) of every compressed batch, nothing else; best of "
        f"{args.repeat}; MB/s = the log's MB / seconds",
        "",
        "| threads | seconds | MB/s of the log |",
        "|---:|---:|---:|",
        *[f"| {t} | {s:.2f} | **{r:.1f}** |" for t, s, r in rows],
        "",
        "A cleaner of this log that recompresses every batch it keeps part of is bound by this; both "
        "cleaners' figures on the same workload: kafka_side_by_side.md.",
        "",
        "The gzip batches alone (decompress + recompress at level 6, one thread, best of "
        f"{args.repeat}): through zlib-ng, what logkeeper uses, **{gz['zlib-ng'][0]:.2f} s** and "
        f"{gz['zlib-ng'][1]:,} bytes written; through the standard library's zlib, what Java's Deflater is, "
        f"**{gz['zlib'][0]:.2f} s** and {gz['zlib'][1]:,} bytes ({gz['zlib'][0] / gz['zlib-ng'][0]:.2f}x the "
        f"time, {gz['zlib-ng'][1] / gz['zlib'][1]:.3f}x the bytes with zlib-ng).",
        "",
    ])
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
