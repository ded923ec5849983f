"""CompactionJobs as the steps see them, and the backlog that makes the sidecar hand a partition to
one."""

from __future__ import annotations

import json
import time
from typing import Any

from logkeeper_operator.times import epoch_of

from .conftest import NAMESPACE
from .kube import Kubectl, Sidecar, produce_paused, wait_for

# the CleanerPolicy cleaner settings under which backlog() is handed to a CompactionJob: one
# thread, rounds every 300 ms, an offset map of 24 KiB (~900 keys) and a hand-off from 2 passes
HANDOFF_CLEANER = {"log.cleaner.threads": 1, "log.cleaner.backoff.ms": 300, "log.cleaner.dedupe.buffer.size": 24576,
                   "log.cleaner.offload.backlog.min.passes": 2}


def backlog(api: Sidecar, topic: str, prefix: str, value: str) -> list[list[dict[str, str]]]:
    """Write 3000 distinct keys to partition 0 of ``topic``, each twice, with its cleaning paused:
    more than one offset map of the steps' policies (24 KiB: ~900 keys) holds, so the sidecar hands
    the partition to a CompactionJob. The chunks written, in order (a key's last value is in the
    last chunk that has it)."""
    chunks = [[{"key": f"{prefix}{chunk % 15}-{i}", "value": f"{value}{chunk}"} for i in range(200)]
              for chunk in range(30)]
    produce_paused(api, topic, 0, chunks)
    return chunks


def after_retry_backoff(api: Sidecar, topic: str, whose: str) -> None:
    """Wait until the sidecar may hand partition 0 of ``topic`` off again (its offload entry's
    retry_at_ms): a backlog written before is the in-process cleaner's, which, a pass taking
    milliseconds, cleans all of it before the sidecar may hand it off."""
    retry_at = next(p["offload"] for p in api.call("GET", "/v1/status")[1]["partitions"]
                    if (p["topic"], p["partition"]) == (topic, 0)).get("retry_at_ms") or 0
    wait_for(lambda: time.time() * 1000 > retry_at + 500, 60, f"{whose} retry backoff over", every_s=0.2)


def compaction_jobs(kubectl: Kubectl) -> list[dict[str, Any]]:
    """The namespace's CompactionJobs that are not being deleted."""
    return [c for c in kubectl.json("get", "compactionjobs", "-n", NAMESPACE)["items"]
            if not c["metadata"].get("deletionTimestamp")]


def unfinished_jobs(kubectl: Kubectl) -> list[str]:
    return [c["metadata"]["name"] for c in kubectl.json("get", "compactionjobs", "-n", NAMESPACE)["items"]
            if (c.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def cj_or_none(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    out = kubectl("get", "compactionjob", name, "-n", NAMESPACE, "-o", "json", "--ignore-not-found").stdout
    return dict(json.loads(out)) if out.strip() else None


def finished(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    """CompactionJob ``name`` once it Succeeded or Failed."""
    cj = cj_or_none(kubectl, name)
    return cj if cj and (cj.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None


def progressing(cj: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (cj.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"), {})


def attempt_seconds(status: dict[str, Any]) -> float:
    """A finished CompactionJob's last attempt, start to end (RFC 3339 times, 1 s resolution)."""
    end, start = epoch_of(status["completionTime"]), epoch_of(status["attemptStartTime"])
    assert end is not None and start is not None, status
    return end - start
