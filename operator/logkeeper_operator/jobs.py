"""What the operator does to CompactionJobs against the API (the state machine itself is pure, in
compaction.py): made from the sidecar's hand-offs, driven a step per tick, their conditions from
the attempt's pod and events, cancelled when deleted, pruned when finished.

Finalizer (names.FINALIZER): set on every unfinished CompactionJob, dropped when it ends. A
deleted unfinished one is finalized by whichever operator leads (``finalize``, from the periodic
loop, which lists the jobs each tick: nothing is remembered, so a restart finishes what another
process began): its attempt Jobs deleted (their pods with them), the cancel Job made (the sidecar
then drops the hand-off and removes its staging directory: builders.cancel_job), the finalizer
removed. When the LogVolume is gone or going (a namespace deleted), its sidecar goes too and
removes its staging root at its next start: only the finalizer is removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import builders
from .compaction import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    WAITING,
    AttemptPod,
    HandOff,
    JobState,
    Step,
    attempt_pod,
    conditions,
    expired,
    next_step,
    progress_status,
)
from .jobspec import CompactionJobSpec, JobHistory, parse_compactionjob, parse_job_history
from .k8s import ApiError, Kube
from .names import (
    API_VERSION,
    CLEANERPOLICY,
    COMPACTIONJOB,
    FINALIZER,
    KOPF_FINALIZER,
    LABEL_COMPACTIONJOB,
    LABEL_LOGVOLUME,
    LOGVOLUME,
    batch_job_name,
    cancel_job_name,
    compaction_job_name,
    pod_name,
)
from .reconcile import default_image, parse, pod_state, sidecar_for, volume_of
from .sidecar_client import SidecarClient, SidecarError
from .spec import LogVolumeSpec, SpecError
from .status import Event, merge_conditions
from .times import epoch_of, now_iso, rfc3339

log = logging.getLogger(__name__)
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")  # set by the Job controller on its pods


# ------------------------------------------------------------------------------------- hand-offs
def submit_hand_offs(kube: Kube, body: Mapping[str, Any], spec: LogVolumeSpec, doc: Mapping[str, Any]) -> list[str]:
    """The CompactionJobs of the hand-offs the sidecar waits on (its /v1/status ``doc``)."""
    if not spec.spark.auto_submit:
        return []
    meta = body["metadata"]
    out = []
    for part in doc.get("partitions") or []:
        hand_off = part.get("offload") if isinstance(part, Mapping) else None
        if isinstance(hand_off, Mapping) and hand_off.get("state") == WAITING:
            cj = ensure_compaction_job(kube, meta["name"], meta["namespace"], meta["uid"], spec,
                                       doc.get("log_dirs") or [], part, hand_off)
            if cj:
                out.append(cj)
    return out


def ensure_compaction_job(kube: Kube, lv: str, namespace: str, uid: str, spec: LogVolumeSpec, log_dirs: list[Any],
                          part: Mapping[str, Any], hand_off: Mapping[str, Any]) -> str | None:
    """The CompactionJob of a hand-off the sidecar waits on, made once (named after its attempt);
    none while the cancel Job of a deleted one of the same hand-off exists."""
    topic, p = str(part.get("topic")), part.get("partition")
    directory = str(part.get("log_dir") or "").rstrip("/")
    volume = volume_of(spec, log_dirs, directory)
    attempt, args, staging = hand_off.get("attempt"), hand_off.get("job_args"), hand_off.get("staging")
    if volume is None or not isinstance(p, int) or not attempt or not args or not staging:
        log.warning("%s: hand-off of %s-%s not understood (directory %s, entry %s)", lv, topic, p, directory, hand_off)
        return None
    name = compaction_job_name(lv, topic, p, str(attempt))
    if kube.get(API_VERSION, COMPACTIONJOB, namespace, name) is not None:
        return name
    if kube.get("batch/v1", "Job", namespace, cancel_job_name(name)) is not None:
        return None  # deleted by a user: cancelled, the sidecar is about to drop the hand-off
    if not may_submit(kube.list(API_VERSION, COMPACTIONJOB, namespace, f"{LABEL_LOGVOLUME}={lv}"), topic, p,
                      spec.spark.cooldown_seconds, time.time()):
        return None
    size = part.get("size_bytes")
    cj = CompactionJobSpec(lv, topic, p, volume.id, directory, str(attempt), tuple(str(a) for a in args),
                           str(staging), spec.spark.timeout_seconds, spec.spark.max_attempts,
                           size if isinstance(size, int) and size > 0 else 0)
    _, created = kube.create_if_absent(builders.compaction_job_manifest(
        name, namespace, lv, uid, cj, spec.spark, builders.claim_for(lv, volume)))
    if created:
        log.info("hand-off %s of %s-%s: CompactionJob %s", attempt, topic, p, name)
    return name


def may_submit(jobs: list[dict[str, Any]], topic: str, partition: int, cooldown_s: int, now_s: float) -> bool:
    """At most one CompactionJob of a partition at a time, and none within cooldown_s of the end of
    the last one (a backlog the last job did not clear waits, instead of spawning jobs in a loop)."""
    for j in jobs:
        s, st = j.get("spec") or {}, j.get("status") or {}
        if s.get("topic") != topic or s.get("partition") != partition:
            continue
        if st.get("phase") not in (SUCCEEDED, FAILED):
            return False
        ended = epoch_of(st.get("completionTime"))
        if ended is not None and now_s - ended < cooldown_s:
            return False
    return True


def hand_off_of(client: SidecarClient | None, cj: CompactionJobSpec) -> HandOff:
    """The sidecar's word on ``cj``'s hand-off (unknown when it cannot be asked)."""
    if client is None:
        return HandOff(False)
    try:
        doc = client.status()
    except SidecarError:
        return HandOff(False)
    if not doc.get("ready"):
        return HandOff(False)
    entry = next((p.get("offload") for p in doc.get("partitions") or []
                  if isinstance(p, Mapping) and p.get("topic") == cj.topic and p.get("partition") == cj.partition),
                 None)
    return HandOff.of(entry if isinstance(entry, Mapping) else None, cj.hand_off, True)


# ------------------------------------------------------------------------------------------- ticks
@dataclass
class CompactionTick:
    step: Step
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)


def observe_attempt(kube: Kube, namespace: str, cj_name: str, job_name: str) -> AttemptPod:
    pods = [p for p in kube.list("v1", "Pod", namespace, f"{LABEL_COMPACTIONJOB}={cj_name}")
            if any((p["metadata"].get("labels") or {}).get(k) == job_name for k in JOB_NAME_LABELS)]
    running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
    events: list[dict[str, Any]] = []
    if not running:  # why it is not running: the Job's events (no pod) or the pod's
        target = ("Job", job_name) if not pods else ("Pod", str(pods[-1]["metadata"]["name"]))
        events = kube.list("v1", "Event", namespace,
                           field_selector=f"involvedObject.kind={target[0]},involvedObject.name={target[1]}")
    return attempt_pod(job_name, pods, events)


def drive_compaction(kube: Kube, body: Mapping[str, Any], now_s: float | None = None) -> CompactionTick:
    """One step of a CompactionJob's state machine (compaction.py), carried out, with its conditions."""
    now_s = time.time() if now_s is None else now_s
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    st = dict(body.get("status") or {})
    if (st.get("phase") or PENDING) in TERMINAL:
        return CompactionTick(Step("done", f"the job is {st.get('phase')}"), {}, [])
    cj = parse_compactionjob(body.get("spec") or {})
    out: dict[str, Any] = {"observedGeneration": meta.get("generation")}
    lv_body = kube.get(API_VERSION, LOGVOLUME, namespace, cj.log_volume)
    if lv_body is None:
        step = Step("fail", f"LogVolume {cj.log_volume} does not exist", int(st.get("attempts") or 0),
                    "LogVolumeMissing")
        return _finish(st, out, step, FAILED, [Event("Warning", "LogVolumeMissing", step.message)])
    spec = parse(lv_body)
    volume = next((v for v in spec.volumes if v.id == cj.volume_id), None)
    if volume is None:
        raise SpecError("spec.volumeId", f"LogVolume {cj.log_volume} has no volume {cj.volume_id!r}")
    attempts = int(st.get("attempts") or 0)
    job = kube.get("batch/v1", "Job", namespace, batch_job_name(name, attempts)) if attempts else None
    pod = pod_state(kube.get("v1", "Pod", namespace, pod_name(cj.log_volume)))
    sidecar = hand_off_of(sidecar_for(kube, namespace, cj.log_volume, spec, pod), cj)
    job_state = JobState.of(job)
    step = next_step(st, job_state, sidecar, now_s, cj.timeout_seconds, cj.max_attempts)
    events: list[Event] = []
    if step.kind == "submit":
        if spec.spark.mode == "kubernetes":  # before the driver starts: its executors talk to it at once
            kube.create_if_absent(builders.spark_network_policy(name, namespace, uid, cj.log_volume))
        job_body = builders.batch_job(name, namespace, uid, step.attempt, cj, spec.spark,
                                      builders.claim_for(cj.log_volume, volume),
                                      read_write_many="ReadWriteMany" in volume.access_modes)
        _, created = kube.create_if_absent(job_body)
        out.update(phase=RUNNING, attempts=step.attempt, submissionId=job_body["metadata"]["name"],
                   jobName=job_body["metadata"]["name"], staging=cj.staging, message=step.message)
        if created or st.get("attempts") != step.attempt:
            out["attemptStartTime"] = rfc3339(now_s)
            if "attemptStartedAt" in st:
                out["attemptStartedAt"] = None  # an older operator's Unix seconds: replaced
        if not st.get("startTime"):
            out["startTime"] = rfc3339(now_s)
        if created:
            events.append(Event("Normal", "Submitted", f"Job {job_body['metadata']['name']}: {step.message}"))
        return _with_conditions(st, out, RUNNING, "Submitted", step.message, step, events)
    if step.kind == "succeed":
        return _finish(st, out, step, SUCCEEDED, [Event("Normal", "Succeeded", step.message)], now_s)
    if step.kind == "fail":
        return _finish(st, out, step, FAILED, [Event("Warning", "Failed", step.message)], now_s)
    if step.kind == "retry":
        out.update(phase=PENDING, message=step.message)
        return _with_conditions(st, out, PENDING, "Retrying", step.message, step,
                                [Event("Warning", "AttemptFailed", step.message)])
    # waiting: what the attempt's pod is doing says why
    reason, message = "Pending", step.message
    if job_state.succeeded:
        reason = "AwaitingSwap"
    elif job is not None:
        seen = observe_attempt(kube, namespace, name, batch_job_name(name, attempts))
        # what the pod does is the message ("attempt 1: pod x: 0/1 nodes are available: ..."), not
        # the step's "is running", which an Unschedulable or refused pod is not
        reason, message = seen.reason, f"attempt {attempts}: {seen.message}"
        old = _condition(st, "Progressing")
        if seen.stuck and (old or {}).get("reason") != seen.reason:
            events.append(Event("Warning", seen.reason, seen.message))
    if st.get("message") != message:
        out["message"] = message
    progress = progress_status(sidecar.progress)
    if progress is not None and progress != st.get("progress"):
        out["progress"] = progress
    return _with_conditions(st, out, st.get("phase") or PENDING, reason, message, step, events)


def _condition(st: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c.get("type") == ctype), None)


def _with_conditions(st: Mapping[str, Any], out: dict[str, Any], phase: str, reason: str, message: str, step: Step,
                     events: list[Event]) -> CompactionTick:
    conds, _ = merge_conditions(st.get("conditions"), conditions(phase, reason, message), now_iso())
    if conds != st.get("conditions"):
        out["conditions"] = conds
    return CompactionTick(step, out, events)


def _finish(st: Mapping[str, Any], out: dict[str, Any], step: Step, phase: str, events: list[Event],
            now_s: float | None = None) -> CompactionTick:
    out.update(phase=phase, message=step.message, completionTime=rfc3339(time.time() if now_s is None else now_s))
    if st.get("progress") is not None:
        out["progress"] = None  # the last one seen mid-stage: stale once the job ended
    return _with_conditions(st, out, phase, step.reason or phase, step.message, step, events)


# ------------------------------------------------------------------------------ finalizer, deletion
def wanted_finalizers(body: Mapping[str, Any]) -> list[str] | None:
    """The finalizers a CompactionJob should carry (ours while unfinished; never kopf's), or None
    when it carries those already."""
    meta = body["metadata"]
    have = list(meta.get("finalizers") or [])
    unfinished = (body.get("status") or {}).get("phase") not in TERMINAL and not meta.get("deletionTimestamp")
    want = [f for f in have if f not in (FINALIZER, KOPF_FINALIZER)]
    if unfinished or (meta.get("deletionTimestamp") and FINALIZER in have):
        want.append(FINALIZER)  # a deleted one keeps it until finalize() has cancelled
    return None if sorted(want) == sorted(have) else want


def set_finalizers(kube: Kube, kind: str, body: Mapping[str, Any], finalizers: list[str]) -> None:
    """Replace the finalizers, guarded by the resourceVersion read (a 409 retries next tick)."""
    meta = body["metadata"]
    kube.patch_metadata(API_VERSION, kind, meta["namespace"], meta["name"],
                        {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")})


def finalize(kube: Kube, body: Mapping[str, Any]) -> list[Event]:
    """A deleted CompactionJob: cancel what runs, tell the sidecar, then let it go."""
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    if FINALIZER not in (meta.get("finalizers") or []):
        return []
    events: list[Event] = []
    if (body.get("status") or {}).get("phase") not in TERMINAL:
        for job in kube.list("batch/v1", "Job", namespace, f"{LABEL_COMPACTIONJOB}={name}"):
            if job["metadata"]["name"] != cancel_job_name(name):
                kube.delete("batch/v1", "Job", namespace, job["metadata"]["name"])
        told = _tell_sidecar(kube, body)
        events.append(Event("Normal", "Cancelled", "the CompactionJob was deleted: its Job stopped" +
                            ("; the sidecar drops the hand-off and removes its staging directory" if told else "")))
    set_finalizers(kube, COMPACTIONJOB, body, [f for f in meta.get("finalizers") or [] if f != FINALIZER])
    return events


def _tell_sidecar(kube: Kube, body: Mapping[str, Any]) -> bool:
    meta, spec = body["metadata"], body.get("spec") or {}
    lv = kube.get(API_VERSION, LOGVOLUME, meta["namespace"], str(spec.get("logVolume")))
    if lv is None or lv["metadata"].get("deletionTimestamp"):
        return False  # its sidecar goes too, and removes its staging root when it starts again
    try:
        lv_spec = parse(lv)
        volume = next(v for v in lv_spec.volumes if v.id == spec.get("volumeId"))
        image = lv_spec.spark.image
    except (SpecError, StopIteration):
        return False
    claim = str(spec.get("claimName") or builders.claim_for(lv["metadata"]["name"], volume))
    job = builders.cancel_job(meta["name"], meta["namespace"], lv["metadata"]["name"], lv["metadata"]["uid"],
                              str(spec.get("staging")), volume.id, claim, image or default_image(),
                              f"the CompactionJob {meta['name']} was deleted")
    try:
        kube.create_if_absent(job)
    except ApiError as e:
        if e.is_transient:
            raise
        log.warning("CompactionJob %s: cancel Job refused (%s); the sidecar's own timeout ends the hand-off",
                    meta["name"], e)  # a namespace being deleted refuses new objects (403)
        return False
    return True


# ----------------------------------------------------------------------------------------- history
def history_of(kube: Kube, lv_body: Mapping[str, Any]) -> JobHistory:
    ref = ((lv_body.get("spec") or {}).get("cleanerPolicyRef") or {}).get("name")
    policy = kube.get(API_VERSION, CLEANERPOLICY, lv_body["metadata"]["namespace"], ref) if ref else None
    try:
        return parse_job_history((policy or {}).get("spec", {}).get("compactionJobs"))
    except SpecError:
        return JobHistory()


def prune(kube: Kube, lv_body: Mapping[str, Any], jobs: list[dict[str, Any]], now_s: float) -> list[str]:
    """Delete the LogVolume's finished CompactionJobs past its policy's TTL or history limits."""
    h = history_of(kube, lv_body)
    names = expired(jobs, h.ttl_seconds, h.successful_limit, h.failed_limit, now_s)
    for name in names:
        kube.delete(API_VERSION, COMPACTIONJOB, lv_body["metadata"]["namespace"], name)
    return names
