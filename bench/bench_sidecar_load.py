"""Load on the sidecar over loopback: concurrent producers and readers for a bounded time while the
cleaner compacts; records per second, latency percentiles and the sidecar's RSS over time.

The sidecar runs as a subprocess (server/process.py) on 127.0.0.1 with one log directory and a
compacted topic of ``--partitions`` partitions (1 MiB segments, min.cleanable.dirty.ratio 0.3,
cleaner backoff 200 ms), so cleaning rounds run all through. In this process (asyncio + aiohttp):

- ``--producers`` tasks each send produce requests of ``--batch`` keyed records (keys drawn from
  ``--keys``) to a random partition, half of them as JSON bodies and half as record batch bytes
  (application/vnd.kafka.batch); the bodies are prepared before the run (64 of each kind) so the
  client's CPU goes to sending;
- ``--readers`` tasks each follow partitions with fetches of up to 256 KiB from their next offset
  (restarting at the log start offset on a 416), as consumers would: even-numbered readers ask
  for JSON records, odd-numbered ones for the batch bytes.

``--batch`` is 250 records of ~70 bytes: about 16 KiB, the Kafka producer's default batch.size.

Every ``--sample`` seconds the sidecar's RSS (from /proc) and its cleaner rounds are sampled.
The run stops after ``--seconds`` (60 by default); both sides share the machine's cores.
Results go to bench/results/sidecar_load.md (command, date, machine, figures, RSS series).

Run: ``.venv/bin/python bench/bench_sidecar_load.py [--seconds 60] [--producers 4] [--readers 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from side_by_side import command_and_date, machine

from logkeeper.records.builder import Record, build_batch
from logkeeper.records.scan import scan_batches
from logkeeper.server.process import SidecarProcess

TOPIC = "load"
BATCH = "application/vnd.kafka.batch"
RESULTS = Path(__file__).parent / "results" / "sidecar_load.md"


@dataclass
class Tally:
    records: int = 0
    requests: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, status: int, records: int, latency_ms: float) -> None:
        if status == 200:
            self.requests += 1
            self.records += records
            self.latencies_ms.append(latency_ms)
        else:
            self.errors[status] = self.errors.get(status, 0) + 1

    def percentile(self, q: float) -> float:
        return float(np.percentile(np.array(self.latencies_ms), q)) if self.latencies_ms else float("nan")


def bodies(batch: int, keys: int, seed: int) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    json_bodies, raw_bodies = [], []
    for _ in range(64):
        recs = [(f"user-{rng.randrange(keys):07d}", f"balance={rng.randrange(10**9)};" + "x" * 40)
                for _ in range(batch)]
        json_bodies.append(json.dumps({"records": [{"key": k, "value": v} for k, v in recs]}).encode())
        raw_bodies.append(build_batch([Record(i, now, k.encode(), v.encode()) for i, (k, v) in enumerate(recs)]))
    return json_bodies, raw_bodies


async def producer(session: aiohttp.ClientSession, base: str, token: str, partitions: int, batch: int,
                   pool: list[bytes], content_type: str, deadline: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    while time.monotonic() < deadline:
        p = rng.randrange(partitions)
        started = time.perf_counter()
        async with session.post(f"{base}/v1/topics/{TOPIC}/partitions/{p}/records", data=rng.choice(pool),
                                headers=headers) as resp:
            await resp.read()
            tally.add(resp.status, batch, (time.perf_counter() - started) * 1000)


async def reader(session: aiohttp.ClientSession, base: str, partitions: list[int], as_json: bool, deadline: float,
                 tally: Tally) -> None:
    """Follows ``partitions`` from offset 0: JSON records, or batch bytes (records counted from the headers)."""
    next_offset = dict.fromkeys(partitions, 0)
    i = 0
    while time.monotonic() < deadline:
        p = partitions[i % len(partitions)]
        i += 1
        params = {"offset": str(next_offset[p]), "max_bytes": str(256 * 1024),
                  "format": "json" if as_json else "batch", "encoding": "utf-8"}
        started = time.perf_counter()
        async with session.get(f"{base}/v1/topics/{TOPIC}/partitions/{p}/records", params=params) as resp:
            body = await resp.read()
            latency = (time.perf_counter() - started) * 1000
            if resp.status == 200:
                if as_json:
                    doc = json.loads(body)
                    count = len(doc["records"])
                else:
                    table = scan_batches(np.frombuffer(body, dtype=np.uint8)) if body else None
                    count = int(table.record_count.sum()) if table is not None else 0
                next_offset[p] = int(resp.headers["Logkeeper-Next-Offset"])
                tally.add(200, count, latency)
                if not count:
                    await asyncio.sleep(0.01)  # caught up
            else:
                tally.add(resp.status, 0, latency)
                if resp.status == 416:
                    async with session.get(f"{base}/v1/topics/{TOPIC}/partitions/{p}/offsets") as r:
                        next_offset[p] = (await r.json())["log_start_offset"]


async def sampler(proc: SidecarProcess, session: aiohttp.ClientSession, started: float, deadline: float,
                  every_s: float, samples: list[dict[str, Any]]) -> None:
    while True:
        now = time.monotonic()
        async with session.get(f"{proc.base_url}/v1/status") as resp:
            status = await resp.json()
        parts = [p for p in status["partitions"] if p["topic"] == TOPIC]
        samples.append({"t": now - started, "rss_mb": proc.rss_bytes() / 1e6,
                        "rounds": status["cleaner"]["rounds"],
                        "size_mb": sum(p["size_bytes"] for p in parts) / 1e6,
                        "end_offsets": sum(p["log_end_offset"] for p in parts)})
        if now >= deadline:
            return
        await asyncio.sleep(min(every_s, max(0.0, deadline - time.monotonic())))


async def run_load(proc: SidecarProcess, args: argparse.Namespace) -> dict[str, Any]:
    json_pool, raw_pool = bodies(args.batch, args.keys, seed=1)
    produced, fetched = Tally(), Tally()
    samples: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=args.producers + args.readers + 2)
    # reads need the token too (the sidecar's default): every request of the session carries it
    async with aiohttp.ClientSession(connector=connector,
                                     headers={"Authorization": f"Bearer {proc.token}"}) as session:
        started = time.monotonic()
        deadline = started + args.seconds
        tasks = [producer(session, proc.base_url, proc.token, args.partitions, args.batch,
                          json_pool if i % 2 == 0 else raw_pool, "application/json" if i % 2 == 0 else BATCH,
                          deadline, produced, seed=i) for i in range(args.producers)]
        tasks += [reader(session, proc.base_url, [p for p in range(args.partitions) if p % args.readers == r],
                         r % 2 == 0, deadline, fetched) for r in range(args.readers)]
        tasks.append(sampler(proc, session, started, deadline, args.sample, samples))
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    return {"produced": produced, "fetched": fetched, "samples": samples, "elapsed": elapsed}


def machine_with_libraries() -> str:
    return machine(f"numpy {np.__version__}", f"aiohttp {aiohttp.__version__}")


def report(args: argparse.Namespace, out: dict[str, Any], command: str) -> str:
    p, f, samples = out["produced"], out["fetched"], out["samples"]
    secs = out["elapsed"]
    rss = [s["rss_mb"] for s in samples]
    warm = [s for s in samples if s["t"] >= min(10.0, args.seconds / 4)] or samples
    start, middle, end = warm[0], warm[len(warm) // 2], warm[-1]
    growth = (end["rss_mb"] - middle["rss_mb"]) / middle["rss_mb"] * 100 if middle["rss_mb"] else float("nan")
    lines = [
        "# bench_sidecar_load: producers and readers over HTTP while the cleaner runs",
        "",
        *command_and_date(command),
        f"- machine: {machine_with_libraries()}",
        f"- load: {args.producers} producers (half JSON bodies, half record batch bytes) of {args.batch} keyed "
        f"records a request over {args.keys:,} keys, {args.readers} readers (fetches of up to 256 KiB, JSON and "
        f"batch bytes in turn), "
        f"{args.partitions} partitions of a compacted topic, {args.seconds} s, sidecar and client on the same "
        f"{os.cpu_count()} cores, loopback",
        "",
        "| | requests/s | records/s | p50 ms | p99 ms | max ms | non-200 |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| produce | {p.requests / secs:,.0f} | {p.records / secs:,.0f} | {p.percentile(50):.1f} | "
        f"{p.percentile(99):.1f} | {max(p.latencies_ms, default=0):.1f} | {p.errors or 'none'} |",
        f"| fetch | {f.requests / secs:,.0f} | {f.records / secs:,.0f} | {f.percentile(50):.1f} | "
        f"{f.percentile(99):.1f} | {max(f.latencies_ms, default=0):.1f} | {f.errors or 'none'} |",
        "",
        f"Cleaner: {samples[-1]['rounds'] - samples[0]['rounds']} rounds during the run; topic size at the end "
        f"{samples[-1]['size_mb']:.1f} MB for {samples[-1]['end_offsets']:,} offsets written.",
        "",
        f"Sidecar RSS (after {warm[0]['t']:.0f} s of warm-up): start {start['rss_mb']:.1f} MB, middle "
        f"{middle['rss_mb']:.1f} MB, end {end['rss_mb']:.1f} MB (middle to end {growth:+.1f}%); "
        f"min {min(rss):.1f} MB, max {max(rss):.1f} MB over the run.",
        "",
        "| t s | RSS MB | cleaner rounds | topic MB | offsets written |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in samples:
        lines.append(f"| {s['t']:.0f} | {s['rss_mb']:.1f} | {s['rounds']} | {s['size_mb']:.1f} | "
                     f"{s['end_offsets']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    command = ".venv/bin/python bench/bench_sidecar_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    root = Path(tempfile.mkdtemp(prefix="logkeeper-load-"))
    config = {"node": {"log.dirs": [str(root / "data")], "log.initial.task.delay.ms": 1000},
              "cleaner": {"log.cleaner.backoff.ms": 200},
              "topics": {TOPIC: {"partitions": args.partitions, "configs": {
                  "cleanup.policy": "compact", "segment.bytes": 1024 * 1024, "min.cleanable.dirty.ratio": 0.3,
                  "file.delete.delay.ms": 1000}}}}
    proc = SidecarProcess(root, config)
    try:
        proc.start()
        out = asyncio.run(run_load(proc, args))
        code = proc.stop()
        text = report(args, out, command.strip())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(text)
        if code != 0:
            print(f"the sidecar exited with {code}", file=sys.stderr)
            return 1
        return 0
    finally:
        proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
