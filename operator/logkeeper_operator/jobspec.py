"""CompactionJob specs and the CleanerPolicy's history limits of finished CompactionJobs, parsed
and validated as spec.py does the LogVolume's (SpecError names the field)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logkeeper.log import names as log_names
from logkeeper.server.config import MAX_PARTITIONS_PER_TOPIC

from .spec import SpecError, _int, _list, _mapping, _required, _str


@dataclass(frozen=True)
class JobHistory:
    """CleanerPolicy spec.compactionJobs: how long finished CompactionJobs are kept (jobs.py)."""

    ttl_seconds: int = 86400
    successful_limit: int = 3
    failed_limit: int = 3


def parse_job_history(raw: Any, where: str = "spec.compactionJobs") -> JobHistory:
    h = _mapping(raw, where)
    return JobHistory(_int(h.get("ttlSecondsAfterFinished"), f"{where}.ttlSecondsAfterFinished", 86400, 0, 365 * 86400),
                      _int(h.get("successfulJobsHistoryLimit"), f"{where}.successfulJobsHistoryLimit", 3, 0, 100),
                      _int(h.get("failedJobsHistoryLimit"), f"{where}.failedJobsHistoryLimit", 3, 0, 100))


@dataclass(frozen=True)
class CompactionJobSpec:
    """One hand-off of a backlog from the sidecar to Spark (the sidecar fixed the round: its
    attempt id, the job's arguments and its staging directory come from its /v1/status)."""

    log_volume: str
    topic: str
    partition: int
    volume_id: str
    log_dir: str
    hand_off: str
    args: tuple[str, ...]
    staging: str
    timeout_seconds: int
    max_attempts: int
    backlog_bytes: int = 0  # the partition's bytes at the hand-off: sizes the Job's scratch space


def parse_compactionjob(spec: Mapping[str, Any]) -> CompactionJobSpec:
    spec = _mapping(spec, "spec")
    lv = _str(spec.get("logVolume"), "spec.logVolume", required=True) or ""
    topic = _str(spec.get("topic"), "spec.topic", required=True) or ""
    try:
        log_names.validate_topic(topic)
    except ValueError as e:
        raise SpecError("spec.topic", str(e)) from None
    args = _list(spec.get("args"), "spec.args")
    if not args or not all(isinstance(a, str) for a in args) or args[0] != "spark-compact":
        raise SpecError("spec.args", "must be the sidecar's `logkeeper spark-compact ...` arguments (strings, "
                                     "starting with spark-compact); the operator copies them from the hand-off")
    return CompactionJobSpec(
        log_volume=lv,
        topic=topic,
        partition=_int(_required(spec, "partition"), "spec.partition", 0, 0, MAX_PARTITIONS_PER_TOPIC - 1),
        volume_id=_str(spec.get("volumeId"), "spec.volumeId", required=True) or "",
        log_dir=_str(spec.get("logDir"), "spec.logDir", required=True) or "",
        hand_off=_str(spec.get("handOff"), "spec.handOff", required=True) or "",
        args=tuple(args),
        staging=_str(spec.get("staging"), "spec.staging", required=True) or "",
        timeout_seconds=_int(spec.get("timeoutSeconds"), "spec.timeoutSeconds", 3600, 60, 7 * 86400),
        max_attempts=_int(spec.get("maxAttempts"), "spec.maxAttempts", 3, 1, 10),
        backlog_bytes=_int(spec.get("backlogBytes"), "spec.backlogBytes", 0, 0, 2**63 - 1),
    )
