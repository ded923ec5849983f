"""A/B of the Kafka listener's cost per request: raw Produce and Fetch requests of one small batch
against two sidecars, one run from another copy of the package (A, e.g. the commit before a
change) and one from this tree (B), the runs alternated so that the machine's drift falls on both.

Produce: ``--requests`` requests of one ``--batch-bytes`` batch (16 KiB: the Java producer's
default batch.size, where a fixed cost per request weighs most), 5 in flight on one socket, as in
bench_kafka_raw.py. Fetch: a walk over what the run produced, one Fetch of at most
``--batch-bytes`` at a time (one batch an answer). Prints each run and the medians of MB/s and of
the server's CPU per request (user + system from /proc).

Prepare A as bench/ab_runs.py says. Run:
``.venv/bin/python bench/ab_kafka_requests.py /tmp/lk/prev/sidecar [--requests 10000] [--runs 6]
[--value-bytes 1000]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ab_runs import add_baseline, alternated, medians, prepare_baseline, sidecars  # noqa: E402
from bench.bench_kafka_raw import PRODUCE_TOPIC, produce_batch, produce_burst, walk  # noqa: E402
from logkeeper.records.batch import BatchHeader  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_baseline(ap)
    ap.add_argument("--batch-bytes", type=int, default=16 << 10)
    ap.add_argument("--value-bytes", type=int, default=1000,
                    help="each record's value (100: ProducerPerformance's 100 B rows, ~150 records a batch)")
    ap.add_argument("--requests", type=int, default=10_000, help="Produce requests a run (and about as many fetches)")
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args(argv)
    prepare_baseline(ap, args.baseline)
    work = Path(tempfile.mkdtemp(prefix="ab-requests-"))
    conf = {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}, "topics": {PRODUCE_TOPIC: {"partitions": 1}}}
    batch = produce_batch(args.value_bytes, batch_bytes=args.batch_bytes)
    per_batch = BatchHeader.parse(batch).record_count
    runs: dict[str, list[tuple[float, float, float, float]]] = {"A": [], "B": []}
    with sidecars(work, conf, args.baseline) as sides:
        for side in sides.values():  # warm-up, not counted
            assert side.proc is not None
            produce_burst(side.kafka_bootstrap, side.proc.pid, batch, args.requests // 5)
        for r, k in alternated(args.runs):
            side = sides[k]
            assert side.proc is not None
            p = produce_burst(side.kafka_bootstrap, side.proc.pid, batch, args.requests)
            f = walk(side.kafka_bootstrap, side.proc.pid, PRODUCE_TOPIC, args.requests * per_batch, args.batch_bytes)
            row = (p.mb_per_s, p.server_cpu_s / p.count * 1e6, f.mb_per_s, f.server_cpu_s / f.count * 1e6)
            runs[k].append(row)
            print(f"run {r} {k}: produce {row[0]:.1f} MB/s, {row[1]:.0f} us CPU a request; "
                  f"fetch {row[2]:.1f} MB/s, {row[3]:.0f} us CPU a request", flush=True)
    med = medians(runs)
    for k, name in (("A", f"A ({args.baseline})"), ("B", "B (this tree)")):
        m = med[k]
        print(f"median {name}: produce {m[0]:.1f} MB/s, {m[1]:.0f} us CPU a request; "
              f"fetch {m[2]:.1f} MB/s, {m[3]:.0f} us CPU a request")
    a, b = med["A"], med["B"]
    print(f"B/A, {len(batch):,}-byte batches, {args.runs} runs each: produce {b[0] / a[0]:.2f}x MB/s, "
          f"{b[1] / a[1]:.2f}x CPU a request; fetch {b[2] / a[2]:.2f}x MB/s, {b[3] / a[3]:.2f}x CPU a request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
