"""SIGKILL the sidecar while producers write and the cleaner cleans; a restart loses no acknowledged record.

Acknowledged = the produce response said ``"flushed": true``: the producers send ``?flush=true``, so
the sidecar fsyncs the partition before answering. Two producer threads write numbered records to
a plain topic (value = ``<partition>:<sequence>``) and keyed records to a compacted topic (the
cleaner compacts it meanwhile: segments small, min.cleanable.dirty.ratio low). After a SIGKILL at a
random moment the sidecar restarts (recovery from the recovery points), and then:

- plain: every acknowledged offset holds its record, and the log end offset is past it;
- compacted: every key's acknowledged record with the highest offset is still there, or a record
  at a higher offset replaced it (compaction keeps the latest offset per key, never removes it).
  "Latest" is by offset, not by the producers' sequence: two threads may write the same key and
  the later-numbered one can be appended first.
- the directories verify after a final clean stop.

ROUNDS kills (3 by default; LOGKEEPER_SIDECAR_KILLS overrides).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from logkeeper.server.process import SidecarClient, SidecarError, SidecarProcess
from logkeeper.tools.verify import verify_path

ROUNDS = int(os.environ.get("LOGKEEPER_SIDECAR_KILLS", "3"))
PLAIN_PARTITIONS = 2


def config(root: Path) -> dict[str, Any]:
    return {
        "node": {"log.dirs": [str(root / "d0"), str(root / "d1")], "log.initial.task.delay.ms": 100,
                 "log.flush.offset.checkpoint.interval.ms": 200, "log.retention.check.interval.ms": 300},
        "cleaner": {"log.cleaner.backoff.ms": 50},
        "topics": {"plain": {"partitions": PLAIN_PARTITIONS, "configs": {"segment.bytes": 8192}},
                   "keyed": {"partitions": 1, "configs": {"cleanup.policy": "compact", "segment.bytes": 4096,
                                                          "min.cleanable.dirty.ratio": 0.1,
                                                          "file.delete.delay.ms": 100}}},
    }


class Acks:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.plain: dict[tuple[int, int], str] = {}  # (partition, offset) -> value
        self.keyed: dict[str, tuple[int, str]] = {}  # key -> (highest acknowledged offset, its value)
        self.seq = 0


def producer(client: SidecarClient, acks: Acks, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        try:
            if rng.random() < 0.5:
                p = rng.randrange(PLAIN_PARTITIONS)
                with acks.lock:
                    first = acks.seq
                    acks.seq += 8
                values = [f"{p}:{first + i}" for i in range(rng.randint(1, 8))]
                out = client.produce("plain", p, [{"key": None, "value": v} for v in values], flush=True)
                if out["flushed"]:
                    with acks.lock:
                        for i, v in enumerate(values):
                            acks.plain[(p, out["base_offset"] + i)] = v
            else:
                with acks.lock:
                    seq = acks.seq
                    acks.seq += 1
                key = f"key-{rng.randrange(30)}"
                out = client.produce("keyed", 0, [{"key": key, "value": str(seq)}], flush=True)
                if out["flushed"]:
                    with acks.lock:
                        acks.keyed[key] = max(acks.keyed.get(key, (-1, "")), (out["base_offset"], str(seq)))
        except (OSError, SidecarError):
            return  # the sidecar was killed


def check(client: SidecarClient, acks: Acks) -> None:
    for p in range(PLAIN_PARTITIONS):
        found = {r["offset"]: r["value"] for r in client.fetch_all("plain", p)}
        wanted = {off: v for (q, off), v in acks.plain.items() if q == p}
        lost = {off: v for off, v in wanted.items() if found.get(off) != v}
        assert not lost, f"plain-{p}: acknowledged records lost or changed: {sorted(lost.items())[:10]}"
    latest: dict[str, tuple[int, str]] = {}
    for r in client.fetch_all("keyed", 0):
        latest[r["key"]] = (r["offset"], r["value"])
    behind = {k: (acked, latest.get(k)) for k, acked in acks.keyed.items()
              if latest.get(k, (-1, "")) < acked or (latest[k][0] == acked[0] and latest[k] != acked)}
    assert not behind, f"keyed-0: keys behind their acknowledged record ((offset, value) acked, found): {behind}"


def test_sigkill_and_restart_lose_no_acknowledged_record(tmp_path: Path) -> None:
    proc = SidecarProcess(tmp_path, config(tmp_path))
    acks = Acks()
    rng = random.Random(11)
    proc.start()
    try:
        for _round in range(ROUNDS):
            stop = threading.Event()
            threads = [threading.Thread(target=producer, args=(proc.client, acks, stop, rng.random()))
                       for _ in range(2)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.8, 2.0))
            proc.kill()
            stop.set()
            for t in threads:
                t.join(30)
            proc.start()
            check(proc.client, acks)
        assert len(acks.plain) > 50 and len(acks.keyed) > 10
    finally:
        code = proc.stop()
    assert code == 0
    for d in proc.log_dirs:
        report = verify_path(d)
        assert report.ok, report.problems
