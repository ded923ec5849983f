"""`make demo`: the sidecar on ./demo-data with no cluster, driven over HTTP.

1. Starts ``logkeeper sidecar`` as a subprocess on 127.0.0.1 (a free port, a generated token
   file), with two log directories and a compacted topic ``accounts`` of two partitions.
2. Pauses cleaning of both partitions (so the dirty ratio can be seen before), produces a keyed
   workload as JSON over HTTP (showing progress), and prints the status: cleaning state and
   dirty ratio per partition.
3. Resumes cleaning, waits for the cleaner threads, and prints the status again with the
   cleaner's stats line (Kafka's wording) and its metrics as /metrics serves them.
4. Reads partition 0 back: every key's latest value must be there.
5. Stops the sidecar with SIGTERM and shows the clean-shutdown markers it left.

Safe to rerun: ./demo-data is recreated each time. Takes well under a minute.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .log.log_dir import CLEAN_SHUTDOWN_FILE
from .server.process import SidecarClient, SidecarError, SidecarProcess

TOPIC = "accounts"
PARTITIONS = 2


def sidecar_config(root: Path) -> dict[str, Any]:
    return {
        "node": {"log.dirs": [str(root / "disk-0"), str(root / "disk-1")], "log.initial.task.delay.ms": 1000},
        "cleaner": {"log.cleaner.backoff.ms": 500, "log.cleaner.threads": 1},
        "topics": {TOPIC: {"partitions": PARTITIONS, "configs": {
            "cleanup.policy": "compact", "segment.bytes": 1024 * 1024, "min.cleanable.dirty.ratio": 0.5,
            "delete.retention.ms": 60000}}},
    }


def produce_workload(client: SidecarClient, *, records: int, keys: int, batch: int,
                     seed: int) -> dict[tuple[int, str], str | None]:
    """Keyed records over both partitions; returns each key's latest value."""
    rng = random.Random(seed)
    latest: dict[tuple[int, str], str | None] = {}
    written, started, last_report = 0, time.perf_counter(), 0.0
    while written < records:
        n = min(batch, records - written)
        partition = (written // batch) % PARTITIONS
        recs = []
        for _ in range(n):
            key = f"user-{rng.randrange(keys):06d}"
            value = None if rng.random() < 0.02 else f"balance={rng.randrange(10**6)}"
            recs.append({"key": key, "value": value})
            latest[(partition, key)] = value
        client.produce(TOPIC, partition, recs)
        written += n
        elapsed = time.perf_counter() - started
        if elapsed - last_report > 0.5 or written == records:
            last_report = elapsed
            print(f"\r  produced {written:>9,} / {records:,} records over HTTP ({written / max(elapsed, 1e-9):,.0f}/s)",
                  end="", flush=True)
    print()
    return latest


def print_status(client: SidecarClient, title: str) -> dict[int, dict[str, Any]]:
    parts = {p["partition"]: p for p in client.status()["partitions"] if p["topic"] == TOPIC}
    print(f"\n{title}")
    print(f"  {'partition':<10} {'size':>10} {'segments':>9} {'end offset':>11} {'dirty ratio':>12}  cleaning state")
    for n, p in sorted(parts.items()):
        ratio = "-" if p["dirty_ratio"] is None else f"{p['dirty_ratio']:.3f}"
        print(f"  {TOPIC}-{n:<3} {p['size_bytes'] / 1e6:>8.2f} MB {p['segments']:>9} {p['log_end_offset']:>11,} "
              f"{ratio:>12}  {p['cleaning_state']}")
    return parts


def wait_for_cleaner(client: SidecarClient, timeout_s: float) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        parts = {p["partition"]: p for p in client.status()["partitions"] if p["topic"] == TOPIC}
        if all(p["last_round"] is not None and p["cleaning_state"] == "none" and (p["dirty_ratio"] or 0) < 0.5
               for p in parts.values()):
            return parts
        if time.monotonic() > deadline:
            raise SidecarError(f"the cleaner did not clean every partition within {timeout_s} s")
        time.sleep(0.25)


def check_latest(client: SidecarClient, latest: dict[tuple[int, str], str | None]) -> int:
    found: dict[str, str | None] = {}
    for r in client.fetch_all(TOPIC, 0):
        found[r["key"]] = r["value"]
    wanted = {k: v for (p, k), v in latest.items() if p == 0}
    missing = [k for k, v in wanted.items() if found.get(k, "<absent>") != v and not (v is None and k not in found)]
    return len(missing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="./demo-data")
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--keys", type=int, default=20_000)
    args = ap.parse_args(argv)
    root = Path(args.dir).resolve()
    shutil.rmtree(root, ignore_errors=True)
    sidecar = SidecarProcess(root, sidecar_config(root))
    print(f"logkeeper demo: starting the sidecar on {root} (config {sidecar.config_path}, token file "
          f"{sidecar.token_path})")
    started = time.perf_counter()
    sidecar.start()
    client = sidecar.client
    try:
        print(f"  ready at {sidecar.base_url} in {time.perf_counter() - started:.1f} s "
              f"(API described at {sidecar.base_url}/openapi.json)")
        for p in range(PARTITIONS):
            client.json("POST", f"/v1/topics/{TOPIC}/partitions/{p}/cleaning/pause")
        print(f"  cleaning paused on {TOPIC}-0 and {TOPIC}-1 while the workload is written")
        print(f"\nProducing {args.records:,} records over {args.keys:,} keys (2% tombstones) as JSON:")
        latest = produce_workload(client, records=args.records, keys=args.keys, batch=1000, seed=7)
        before = print_status(client, "Status before cleaning (GET /v1/status):")
        for p in range(PARTITIONS):
            client.json("POST", f"/v1/topics/{TOPIC}/partitions/{p}/cleaning/resume")
        print("\nCleaning resumed; waiting for the cleaner threads ...")
        wait_for_cleaner(client, timeout_s=40)
        after = print_status(client, "Status after cleaning:")
        for n in sorted(after):
            b, a = before[n], after[n]
            print(f"  {TOPIC}-{n}: dirty ratio {b['dirty_ratio']:.3f} -> {a['dirty_ratio'] or 0:.3f}, "
                  f"{b['size_bytes'] / 1e6:.2f} MB -> {a['size_bytes'] / 1e6:.2f} MB")
        print("\nThe cleaner's stats line (last round of accounts-0):")
        print(after[0]["last_round"]["stats_line"].rstrip())
        _status, _h, metrics = client.request("GET", "/metrics")
        print("\nCleaner metrics (GET /metrics):")
        for line in metrics.decode().splitlines():
            if line.startswith(("kafka_log_LogCleaner", "logkeeper_cleaner_rounds_total")):
                print("  " + line)
        bad = check_latest(client, latest)
        print(f"\nRead back {TOPIC}-0: {'every key has its latest value' if not bad else f'{bad} keys WRONG'}")
    except BaseException:
        sidecar.kill()
        raise
    code = sidecar.stop()
    markers = [d for d in sidecar.log_dirs if (d / CLEAN_SHUTDOWN_FILE).exists()]
    print(f"\nSidecar stopped with SIGTERM (exit {code}); clean-shutdown marker in {len(markers)} of "
          f"{len(sidecar.log_dirs)} log directories. Total {time.perf_counter() - started:.1f} s.")
    return 0 if code == 0 and not bad and len(markers) == len(sidecar.log_dirs) else 1


if __name__ == "__main__":
    sys.exit(main())
