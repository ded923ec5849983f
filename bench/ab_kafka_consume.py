"""A/B of the sidecar's fetch path: Kafka's ConsumerPerformance against two sidecars, one run from
another copy of the package (A, e.g. the commit before a change) and one from this tree (B), the
runs alternated so that the machine's drift falls on both. Prints each run and the medians:
MB/s overall and fetch-only, and the server's CPU per MB (user + system from /proc).

The client is what limits these runs on 2 cores, so the CPU per MB says more about a change to the
server than the throughput does. Prepare A as bench/ab_runs.py says.

Run: ``.venv/bin/python bench/ab_kafka_consume.py /tmp/lk/prev/sidecar [--record-bytes 100] [--runs 6]
[--isolation read_committed]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ab_runs import add_baseline, alternated, medians, prepare_baseline, sidecars  # noqa: E402
from bench.kafka_tools import ProducerCase, consume, create_topic, produce, with_server_cpu  # noqa: E402
from tests.kafka.kafka_harness import fetch_kafka  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_baseline(ap)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--mb", type=int, default=100, help="payload MB written once and read by each run")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                    help="the consumer's isolation.level (read_committed: librdkafka's default)")
    args = ap.parse_args(argv)
    prepare_baseline(ap, args.baseline)
    dist = fetch_kafka()
    work = Path(tempfile.mkdtemp(prefix="ab-consume-"))
    conf = {"sidecar": {"kafka.listen": ["127.0.0.1:0"], "group.initial.rebalance.delay.ms": 0}}
    runs: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
    case = ProducerCase("1", args.record_bytes, None)
    records = args.mb * 1_000_000 // args.record_bytes
    with sidecars(work, conf, args.baseline) as sides:
        for side in sides.values():
            create_topic(dist, side.kafka_bootstrap, case.topic)
            produce(dist, side.kafka_bootstrap, case, records)
            consume(dist, side.kafka_bootstrap, case.topic, records, args.isolation)  # warm-up, not counted
        for r, k in alternated(args.runs):
            side = sides[k]
            assert side.proc is not None
            c, cpu = with_server_cpu(side.proc.pid, records * args.record_bytes / 1e6, consume, dist,
                                     side.kafka_bootstrap, case.topic, records, args.isolation)
            runs[k].append((c.mb_per_s, c.fetch_mb_per_s, cpu))
            print(f"run {r} {k}: {c.mb_per_s:.1f} MB/s, fetch {c.fetch_mb_per_s:.1f} MB/s, "
                  f"server CPU {cpu:.2f} ms/MB", flush=True)
    med = medians(runs)
    for k, name in (("A", f"A ({args.baseline})"), ("B", "B (this tree)")):
        print(f"median {name}: {med[k][0]:.1f} MB/s, fetch {med[k][1]:.1f} MB/s, server CPU {med[k][2]:.2f} ms/MB")
    print(f"B/A, {args.record_bytes} B records, {args.isolation}, {args.runs} runs each: "
          f"{med['B'][0] / med['A'][0]:.2f}x MB/s, "
          f"{med['B'][1] / med['A'][1]:.2f}x fetch MB/s, {med['B'][2] / med['A'][2]:.2f}x server CPU per MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
