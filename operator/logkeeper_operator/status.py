"""The LogVolume status model: a sidecar's ``/v1/status`` (logkeeper/server/status.py, typed as
its contract ``Status``, logkeeper/server/status_schema.py) and the pod's state in, the
resource's status and the events of its state changes out. Pure: the time is passed in.

The status written is ``LogVolumeStatus`` below; the CRD's status schema is generated from it
(crdgen.py), so mypy checks this module's reading of the sidecar's keys against the contract and
its writing against what the CRD admits. In short:

    observedGeneration   written by the change handlers only, once they applied that generation
                         (the periodic reconcile repairs only what a settled spec owns)
    conditions           Ready, Cleaning, Degraded
    summary              the printer columns read these
    cleaningState        "idle" | "cleaning N/M" | "unknown"
    lastSeenTime         when the sidecar last answered /v1/status; while it does not, Ready is
                         Unknown (SidecarUnreachable) and the rest is the last seen
    partitions           the first MAX_PARTITIONS_LISTED (partitionsTruncated says when more);
                         cleaningProgress while a round runs ("indexing 45%")
    offlineDirs, offlinePartitions (the first MAX_PARTITIONS_LISTED), uncleanablePartitions, backlogs

Conditions keep their lastTransitionTime while their status stays the same; each change of a
condition's status or reason is one event: Warning only for trouble (Degraded=True, Ready not True
for a reason outside the normal way up, START_REASONS), Normal otherwise, so a LogVolume that
comes up as it should raises no Warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar, cast

from logkeeper.server.status_schema import PartitionStatus, Status
from logkeeper.typed_schema import Also, Doc

from .times import rfc3339

MAX_PARTITIONS_LISTED = 200
READY, CLEANING, DEGRADED = "Ready", "Cleaning", "Degraded"
CONDITION_TYPES = (READY, CLEANING, DEGRADED)
# Ready=False reasons on the way up of a healthy LogVolume (or a roll): Normal events.
START_REASONS = frozenset({"Reconciling", "PodMissing", "PodPending", "SidecarStarting"})


DateTime = Annotated[str, Also(format="date-time")]


class Condition(TypedDict):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: NotRequired[str]
    message: NotRequired[str]
    lastTransitionTime: NotRequired[DateTime]


Conditions = Annotated[list[Condition],
                       Also(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})]


class Summary(TypedDict):
    partitions: int
    compacted: int
    cleaning: int
    maxDirtyRatio: Annotated[str, Doc("The largest dirty ratio of a compacted log, 2 decimals; - when none")]
    backlogs: int
    offlineDirs: int
    offlinePartitions: int
    uncleanable: int
    sizeBytes: int


# Entries that go through _present are written without their None values: those keys are
# NotRequired (the None in their types is what the parser holds before _present).
class PartitionEntry(TypedDict):
    partition: Annotated[str, Doc("topic-partition")]
    logDir: NotRequired[str | None]
    sizeBytes: int
    logStartOffset: NotRequired[int | None]
    logEndOffset: NotRequired[int | None]
    compacted: bool
    dirtyRatio: NotRequired[float | None]
    cleaningState: str
    cleaningProgress: NotRequired[Annotated[str | None, Doc("While a round runs: its phase and how far, e.g. "
                                                            "indexing 45%")]]
    lastCleanedTime: NotRequired[Annotated[str | None, Also(format="date-time")]]
    uncleanable: NotRequired[Annotated[str | None, Doc("Why it is uncleanable, while it is")]]
    backlog: bool


class OfflineDir(TypedDict):
    path: str
    error: str | None


class OfflinePartitionEntry(TypedDict):
    partition: str
    logDir: NotRequired[str | None]
    error: NotRequired[str | None]


class UncleanableEntry(TypedDict):
    partition: str
    reason: str
    failures: int


class BacklogEntry(TypedDict):
    partition: str
    logDir: NotRequired[str | None]
    firstDirtyOffset: NotRequired[int | None]
    estimatedKeys: NotRequired[int | None]
    passes: NotRequired[int | None]
    dirtyBytes: NotRequired[int | None]
    recopiedBytes: NotRequired[int | None]


class LogVolumeStatus(TypedDict, total=False):
    observedGeneration: int | None
    conditions: Conditions
    lastSeenTime: Annotated[DateTime, Doc("When the sidecar last answered /v1/status; while it does not, Ready is "
                                          "Unknown (SidecarUnreachable) and the rest of the status is from then.")]
    cleaningState: str
    summary: Summary
    partitions: Annotated[list[PartitionEntry], Doc("Per partition: size, offsets, dirty ratio, cleaning state, "
                                                    "last round.")]
    partitionsTruncated: bool
    offlineDirs: Annotated[list[OfflineDir], Doc("Log directories taken offline after an I/O error.")]
    offlinePartitions: Annotated[list[OfflinePartitionEntry], Doc(
        "Partitions that exist but cannot be served (their directory is offline, or they have a copy in two), "
        "with the repair to make.")]
    uncleanablePartitions: Annotated[list[UncleanableEntry], Doc("Partitions whose cleaning failed, with the "
                                                                 "reason.")]
    backlogs: Annotated[list[BacklogEntry], Doc("Compaction backlogs the sidecar reported.")]


_Entry = TypeVar("_Entry", PartitionEntry, OfflinePartitionEntry, BacklogEntry)


@dataclass(frozen=True)
class PodState:
    """What the operator read of the sidecar's pod (None fields: no pod yet)."""

    exists: bool
    phase: str | None = None
    ready: bool = False
    ip: str | None = None
    message: str | None = None
    # the sidecar container has passed its startup probe (containerStatuses[].started); until
    # then a sidecar that does not answer is starting, not unreachable
    started: bool = False


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def condition(ctype: str, ok: bool | None, reason: str, message: str) -> Condition:
    """A condition; ``ok`` None is status Unknown (the operator cannot tell)."""
    status: Literal["True", "False", "Unknown"] = "Unknown" if ok is None else "True" if ok else "False"
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def is_trouble(c: Mapping[str, Any]) -> bool:
    """Whether a condition's change is worth a Warning event."""
    if c["type"] == DEGRADED:
        return bool(c["status"] == "True")
    if c["type"] == READY:
        return bool(c["status"] != "True" and c.get("reason") not in START_REASONS)
    return False


def merge_conditions(old: Sequence[Mapping[str, Any]] | None, new: Sequence[Mapping[str, Any]],
                     now: str) -> tuple[list[Condition], list[Event]]:
    """New conditions with lastTransitionTime carried over while the status is unchanged, and one
    event per condition whose status changed."""
    before = {c.get("type"): c for c in (old or [])}
    out: list[Condition] = []
    events = []
    for c in new:
        prev = before.get(c["type"])
        changed = prev is None or prev.get("status") != c["status"]
        since = now if changed or prev is None or not prev.get("lastTransitionTime") else prev["lastTransitionTime"]
        out.append(Condition(type=c["type"], status=c["status"], reason=c["reason"], message=c["message"],
                             lastTransitionTime=since))
        quiet_start = prev is None and c["status"] == "False" and c["type"] != READY
        if (changed or prev is None or prev.get("reason") != c["reason"]) and not quiet_start:
            events.append(Event("Warning" if is_trouble(c) else "Normal", c["reason"],
                                f"{c['type']}={c['status']}: {c['message']}"))
    kept = [c for t, c in before.items() if t not in {x["type"] for x in new}]
    return [*out, *[cast(Condition, dict(c)) for c in kept]], events  # as stored: the CRD admitted them


def _name(p: Mapping[str, Any]) -> str:
    return f"{p['topic']}-{p['partition']}"


def _present(entry: _Entry) -> _Entry:
    """``entry`` without its None values: in a merge patch a null deletes the key, so the stored
    status would never equal the patch (kopf logs each such patch as inconsistent)."""
    return {k: v for k, v in entry.items() if v is not None}  # type: ignore[return-value]


def _progress(p: PartitionStatus) -> str | None:
    running = p.get("round_progress")
    return f"{running['phase']} {running['percent']}%" if running else None


def _partition_entry(p: PartitionStatus) -> PartitionEntry:
    last = p.get("last_round")
    finished = last.get("finished_ms") if last else None
    unc = p.get("uncleanable")
    return _present(PartitionEntry(
        partition=_name(p),
        logDir=p.get("log_dir"),
        sizeBytes=p.get("size_bytes", 0),
        logStartOffset=p.get("log_start_offset"),
        logEndOffset=p.get("log_end_offset"),
        compacted=bool(p.get("compacted")),
        dirtyRatio=p.get("dirty_ratio"),
        cleaningState=p.get("cleaning_state") or "none",
        cleaningProgress=_progress(p),
        lastCleanedTime=rfc3339(finished / 1000) if isinstance(finished, int) else None,
        uncleanable=unc.get("reason") if unc else None,
        backlog=bool(p.get("backlog")),
    ))


def _backlog_entry(p: PartitionStatus) -> BacklogEntry:
    d = p.get("backlog_detail")
    if d is None:
        return _present(BacklogEntry(partition=_name(p), logDir=p.get("log_dir")))
    return _present(BacklogEntry(
        partition=_name(p), logDir=p.get("log_dir"), firstDirtyOffset=d.get("first_dirty_offset"),
        estimatedKeys=d.get("estimated_keys"), passes=d.get("passes"), dirtyBytes=d.get("dirty_bytes"),
        recopiedBytes=d.get("recopied_bytes")))


def _ready(pod: PodState, sidecar: Mapping[str, Any] | None, error: str | None,
           last_seen: str | None) -> Condition:
    if not pod.exists:
        return condition(READY, False, "PodMissing", "the sidecar's pod does not exist yet")
    if pod.phase != "Running":
        # Pending (scheduling, pulling, a roll's new pod) is on the way up; Failed or Unknown is not
        reason = "PodPending" if pod.phase in (None, "Pending", "Terminating") else "PodNotRunning"
        return condition(READY, False, reason, f"the pod is {pod.phase or 'pending'}"
                         + (f": {pod.message}" if pod.message else ""))
    if sidecar is None and not (pod.started or pod.ready):
        # a new container (a create, a roll, a restart) whose HTTP server is not up yet
        return condition(READY, False, "SidecarStarting",
                         f"the sidecar is starting (/v1/status: {error or 'no answer'})")
    if sidecar is None:
        # the pod runs, its sidecar started and now does not answer: what the status says may be stale
        seen = f"; the status below is from {last_seen}" if last_seen else "; never seen"
        return condition(READY, None, "SidecarUnreachable", f"/v1/status: {error or 'no answer'}{seen}")
    if not sidecar.get("ready"):
        return condition(READY, False, "SidecarStarting", "the sidecar is recovering its logs")
    return condition(READY, True, "SidecarReady", "the sidecar serves its logs")


def build_status(sidecar: Status | None, pod: PodState,
                 old_conditions: Sequence[Mapping[str, Any]] | None, now: str,
                 error: str | None = None, last_seen: str | None = None) -> tuple[LogVolumeStatus, list[Event]]:
    """The status patch and the events to raise. ``sidecar``: the /v1/status document, or None
    when it could not be read (``error`` says why; ``last_seen``: the status's lastSeenTime, kept
    with the rest of what was last seen: a merge patch leaves the keys it does not name)."""
    ready = _ready(pod, sidecar, error, last_seen)
    status = LogVolumeStatus()
    if sidecar is None:
        cleaning = condition(CLEANING, False, "Unknown", "no status from the sidecar")
        degraded = condition(DEGRADED, False, "Unknown", "no status from the sidecar")
        status["cleaningState"] = "unknown"
    else:
        parts = [p for p in sidecar.get("partitions", []) if isinstance(p, Mapping)]
        dirs = [d for d in sidecar.get("log_dirs", []) if isinstance(d, Mapping)]
        offline = [OfflineDir(path=d["path"], error=d.get("error")) for d in dirs if not d.get("online", True)]
        offline_parts = [_present(OfflinePartitionEntry(partition=_name(p), logDir=p.get("log_dir"),
                                                        error=p.get("error")))
                         for p in sidecar.get("offline_partitions", []) if isinstance(p, Mapping)]
        unclean = [UncleanableEntry(partition=_name(p), reason=u["reason"], failures=u["failures"])
                   for p in parts if (u := p.get("uncleanable"))]
        backlogs = [_backlog_entry(p) for p in parts if p.get("backlog")]
        active = [_name(p) + (f" ({how})" if (how := _progress(p)) else "")
                  for p in parts if p.get("cleaning_state") == "in-progress"]
        compacted = [p for p in parts if p.get("compacted")]
        ratios = [float(r) for p in parts if (r := p.get("dirty_ratio")) is not None]
        cleaner = sidecar.get("cleaner") or {}
        threads, alive = cleaner.get("threads"), cleaner.get("alive_threads")
        status.update({
            "lastSeenTime": now,
            "summary": {"partitions": len(parts), "compacted": len(compacted), "cleaning": len(active),
                        "maxDirtyRatio": f"{max(ratios):.2f}" if ratios else "-",
                        "backlogs": len(backlogs), "offlineDirs": len(offline),
                        "offlinePartitions": len(offline_parts), "uncleanable": len(unclean),
                        "sizeBytes": sum(int(p.get("size_bytes") or 0) for p in parts)},
            "cleaningState": f"cleaning {len(active)}/{len(compacted)}" if active else "idle",
            "partitions": [_partition_entry(p) for p in parts[:MAX_PARTITIONS_LISTED]],
            "partitionsTruncated": len(parts) > MAX_PARTITIONS_LISTED,
            "offlineDirs": offline,
            "offlinePartitions": offline_parts[:MAX_PARTITIONS_LISTED],
            "uncleanablePartitions": unclean,
            "backlogs": backlogs,
        })
        cleaning = (condition(CLEANING, True, "CleaningInProgress", "cleaning " + ", ".join(active[:10]))
                    if active else condition(CLEANING, False, "Idle", "no partition is being cleaned"))
        problems = []
        if offline:
            problems.append(("OfflineDirectories", "offline: " + ", ".join(str(d["path"]) for d in offline)))
        if offline_parts:
            problems.append(("OfflinePartitions", "offline partitions: " + ", ".join(
                str(p["partition"]) for p in offline_parts[:10])))
        if unclean:
            problems.append(("UncleanablePartitions",
                             "uncleanable: " + ", ".join(f"{u['partition']} ({u['reason']})" for u in unclean[:5])))
        if isinstance(threads, int) and isinstance(alive, int) and alive < threads:
            problems.append(("CleanerThreadsDied", f"{alive} of {threads} cleaner threads alive"))
        degraded = (condition(DEGRADED, True, problems[0][0], "; ".join(m for _, m in problems)) if problems
                    else condition(DEGRADED, False, "Healthy", "every log directory is online and every log cleanable"))
    conditions, events = merge_conditions(old_conditions, [ready, cleaning, degraded], now)
    status["conditions"] = conditions
    return status, events


def invalid_status(field_message: str, generation: int | None, old_conditions: Sequence[Mapping[str, Any]] | None,
                   now: str, reason: str = "InvalidSpec") -> tuple[LogVolumeStatus, list[Event]]:
    """Ready=False for a spec the operator refuses; the other conditions are left as they were."""
    conditions, events = merge_conditions(old_conditions, [condition(READY, False, reason, field_message)], now)
    return {"observedGeneration": generation, "conditions": conditions}, events


def is_ready(conditions: Sequence[Mapping[str, Any]] | None) -> bool:
    return any(c.get("type") == READY and c.get("status") == "True" for c in conditions or [])
