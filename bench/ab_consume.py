"""A/B of the sidecar's Kafka listener under Kafka's ConsumerPerformance, between two source trees.

Run: ``.venv/bin/python bench/ab_consume.py OLD_TREE NEW_TREE [--record-bytes 1000] [--mb 200] [--rounds 6]``,
where each tree is a checkout of this repository with its kernels compiled (``make compile``; for
a ``git worktree`` of an older commit, ``PYTHONPATH=TREE/sidecar python -m logkeeper.aot.build``).
One sidecar is started from each tree (``PYTHONPATH`` = the tree's ``sidecar``), both on loopback;
each gets the same ``--mb`` of ``--record-bytes`` records from ProducerPerformance and one
unmeasured ConsumerPerformance run. Then ConsumerPerformance reads the whole topic from each, a
new group every run, ``--rounds`` times alternating which goes first, so that the host's drift
falls on both alike. Prints every run and the medians of MB/s and of the server's CPU per MB.
The Kafka tools are bench_kafka_perf's (the jars make interop fetches).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_kafka_perf import ProducerCase, consume, create_topic, produce, with_server_cpu  # noqa: E402
from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import fetch_kafka  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--mb", type=int, default=200, help="payload MB produced to each sidecar")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    dist = fetch_kafka()
    records = args.mb * 1_000_000 // args.record_bytes
    case = ProducerCase("1", args.record_bytes, None)  # the topic it writes is the one consumed
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    tmp = Path(tempfile.mkdtemp(prefix="ab-consume-"))
    sidecars: dict[str, SidecarProcess] = {}
    mb_s: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for name, tree in trees.items():
            sidecar = SidecarProcess(tmp / name, {"sidecar": {"kafka.listen": ["127.0.0.1:0"],
                                                              "group.initial.rebalance.delay.ms": 0}},
                                     env={"PYTHONPATH": str(tree / "sidecar")})
            sidecars[name] = sidecar.start()
            bootstrap = sidecar.kafka_bootstrap
            create_topic(dist, bootstrap, case.topic)
            produce(dist, bootstrap, case, records)
            consume(dist, bootstrap, case.topic, records)  # warm-up: not counted
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                sidecar = sidecars[name]
                assert sidecar.proc is not None
                c, used = with_server_cpu(sidecar.proc.pid, records * args.record_bytes / 1e6,
                                          consume, dist, sidecar.kafka_bootstrap, case.topic, records)
                mb_s[name].append(c.mb_per_s)
                cpu[name].append(used)
                print(f"round {r + 1} {name} ({trees[name]}): {c.mb_per_s:.1f} MB/s, "
                      f"fetch {c.fetch_mb_per_s:.1f} MB/s, server CPU {used:.1f} ms/MB", flush=True)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    old, new = statistics.median(mb_s["old"]), statistics.median(mb_s["new"])
    print(f"medians: old {old:.1f} MB/s ({statistics.median(cpu['old']):.1f} ms CPU/MB), "
          f"new {new:.1f} MB/s ({statistics.median(cpu['new']):.1f} ms CPU/MB): new / old = {new / old:.2f}")


if __name__ == "__main__":
    main()
