"""Clients that ask for big fetch answers and never read them; the sidecar's RSS from /proc
before, during and after.

The sidecar runs as a subprocess (server/process.py) with ``kafka.listen: 127.0.0.1:0`` and its
limits at their defaults (fetch.max.bytes 50 MiB, kafka.max.connections 128). A partition gets
``--data-mib`` MiB of records first. Then ``--connections`` connections, each with a 4 KiB
receive buffer, send one Fetch of ``--fetch-mib`` MiB from offset 0 and read nothing for
``--seconds`` seconds while the RSS is sampled every 0.1 s. Kafka's broker sends a fetch's
records from the page cache, so such an answer holds no memory there; the sidecar reads them
into memory, so without a bound each unread answer stayed resident until its connection went
idle. After the phase every connection is closed, the RSS is read after 2 s, and a Produce and
a Fetch on a fresh connection show the listener still serves. Loopback only; every loop is bounded in count
and time. ``--pythonpath DIR`` runs the sidecar from another copy of the package (e.g. ``git
archive`` of an older commit) to compare, written to the same file under its ``--label``.

Results: bench/results/fetch_flood.md. Run: ``.venv/bin/python bench/bench_fetch_flood.py
[--connections 60]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_kafka_flood import sample, still_serves

from logkeeper.server.process import KAFKA_LISTENING, SidecarProcess
from tests.kafka_wire import WireClient, fetch_frame, fill_partition

RESULTS = Path(__file__).parent / "results" / "fetch_flood.md"
MIB = 1 << 20
TOPIC = "flood"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--fetch-mib", type=int, default=50, help="the max_bytes of each fetch (fetch.max.bytes)")
    ap.add_argument("--data-mib", type=int, default=60, help="records in the partition first")
    ap.add_argument("--pythonpath", default="", help="run the sidecar from this copy of the package")
    ap.add_argument("--label", default="tip")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    # kafka.max.connections (128) is the most a sidecar admits at its defaults
    if not 1 <= args.connections <= 128 or args.seconds > 60 or not 1 <= args.fetch_mib <= 50 \
            or not 1 <= args.data_mib <= 200:
        ap.error("--connections 1-128, --seconds up to 60, --fetch-mib 1-50, --data-mib 1-200: bounded")
    env = {"PYTHONPATH": args.pythonpath} if args.pythonpath else None
    config: dict[str, Any] = {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}, "topics": {TOPIC: {"partitions": 1}}}
    with tempfile.TemporaryDirectory() as tmp:
        proc = SidecarProcess(Path(tmp) / "sidecar", config, env=env)
        with proc:
            bootstrap = KAFKA_LISTENING.findall(proc.output())[0]
            fill_partition(bootstrap, TOPIC, args.data_mib * MIB // 500_000 + 1)
            time.sleep(1.0)
            base = proc.rss_bytes()
            print(f"RSS at rest, {args.data_mib} MiB in the partition: {base / MIB:.1f} MiB", flush=True)
            frame = fetch_frame(TOPIC, args.fetch_mib * MIB)
            clients = []
            for _ in range(args.connections):
                client = WireClient(bootstrap, rcvbuf=4096)  # the answer waits in the sidecar
                client.send_raw(frame)
                clients.append(client)
            during = sample(proc, args.seconds)
            for client in clients:
                client.close()
            time.sleep(2.0)
            after = proc.rss_bytes()
            serves = still_serves(bootstrap)
    row = (base, max(during), after)
    print(f"{args.label}: {args.connections} unread fetches of {args.fetch_mib} MiB: RSS {base / MIB:.1f} -> "
          f"{max(during) / MIB:.1f} (max during) -> {after / MIB:.1f} MiB (after); serves after: {serves}")
    if not args.no_write:
        write_results(args, row, serves)
    return 0 if serves else 1


def write_results(args: argparse.Namespace, row: tuple[int, int, int], serves: bool) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cmd = shlex.join(["bench/bench_fetch_flood.py", *(sys.argv[1:])])
    base, during, after = row
    lines = [
        f"## {args.label}: {args.connections} unread fetches of {args.fetch_mib} MiB",
        "",
        f"- command: `.venv/bin/python {cmd}`",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, tip {commit}",
        f"- machine: nproc {os.cpu_count()}, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}",
        f"- partition: {args.data_mib} MiB of 1,000-byte records; each client: 4 KiB receive buffer, one Fetch "
        f"of {args.fetch_mib} MiB from offset 0, nothing read for {args.seconds:.0f} s",
        "",
        "| connections | RSS before MiB | RSS max during MiB | RSS after MiB | a fresh fetch after |",
        "|---:|---:|---:|---:|---|",
        f"| {args.connections} | {base / MIB:.1f} | {during / MIB:.1f} | {after / MIB:.1f} | "
        f"{'served' if serves else 'FAILED'} |",
        "", "",
    ]
    title = "# bench_fetch_flood: fetch answers their clients do not read\n\n"
    text = RESULTS.read_text() if RESULTS.exists() else title
    RESULTS.write_text(text + "\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
