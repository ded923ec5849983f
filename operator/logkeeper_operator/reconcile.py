"""What the handlers do, apart from kopf: each function takes the Kubernetes client and the
resource's body, and is safe to repeat (server-side apply; create-if-absent; deterministic names).

Errors it raises, and what the handlers make of them:
- SpecError          the user's input: Ready=False (InvalidSpec), kopf.PermanentError
- PolicyMissing      the CleanerPolicy named does not exist (yet): Ready=False, retried
- ApiError           transient (5xx, 429, 409, no answer): kopf.TemporaryError; else the API
                     server refused a built object (422 ...): Ready=False (ApplyRejected)
- SidecarError       the sidecar did not answer: retried on the next tick
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import builders, tokens
from .compaction import FAILED, PENDING, RUNNING, SUCCEEDED, WAITING, HandOff, JobState, Step, next_step
from .k8s import Kube
from .names import (
    API_VERSION,
    CLEANERPOLICY,
    COMPACTIONJOB,
    KEY_SECRET,
    LABEL_LOGVOLUME,
    LOGVOLUME,
    batch_job_name,
    compaction_job_name,
    pod_name,
)
from .render import render_config, restart_hash, topic_actions
from .sidecar_client import SidecarClient, SidecarError
from .spec import (
    CompactionJobSpec,
    LogVolumeSpec,
    SpecError,
    VolumeSpec,
    check_topic_changes,
    parse_cleaner,
    parse_compactionjob,
    parse_logvolume,
)
from .status import Event, PodState, build_status, invalid_status

log = logging.getLogger(__name__)
BLOCKING_REASONS = frozenset({"InvalidSpec", "ApplyRejected", "PolicyNotFound"})


class PolicyMissing(Exception):
    pass


def default_image() -> str:
    return os.environ.get("LOGKEEPER_IMAGE") or "logkeeper:0.1.0"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(body: Mapping[str, Any]) -> LogVolumeSpec:
    return parse_logvolume(body.get("spec") or {}, default_image())


def resolve_cleaner(kube: Kube, namespace: str, spec: LogVolumeSpec) -> dict[str, Any]:
    if spec.cleaner_policy is None:
        return dict(spec.cleaner)
    policy = kube.get(API_VERSION, CLEANERPOLICY, namespace, spec.cleaner_policy)
    if policy is None:
        raise PolicyMissing(f"spec.cleanerPolicyRef.name: CleanerPolicy {spec.cleaner_policy!r} does not exist in "
                            f"namespace {namespace}")
    try:
        where = f"CleanerPolicy {spec.cleaner_policy} spec.cleaner"
        return parse_cleaner((policy.get("spec") or {}).get("cleaner"), where)
    except SpecError as e:
        raise SpecError(e.field, e.message) from None


def apply_logvolume(kube: Kube, body: Mapping[str, Any], old_spec: Mapping[str, Any] | None = None) -> LogVolumeSpec:
    """Parse, render, and create-or-patch every child object of a LogVolume."""
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    spec = parse(body)
    if old_spec is not None:
        try:
            previous: LogVolumeSpec | None = parse_logvolume(old_spec, default_image())
        except SpecError:
            previous = None
        check_topic_changes(previous, spec)
    cleaner = resolve_cleaner(kube, namespace, spec)
    text = render_config(spec, cleaner)
    owner = builders.owner_reference(LOGVOLUME, name, uid)
    # create only: an existing token Secret is kept as it is (the operator may not read it)
    kube.create(builders.secret(name, namespace, owner, token_of(kube, namespace, name)))
    kube.apply(builders.configmap(name, namespace, owner, text))
    kube.apply(builders.service(name, namespace, owner, spec))
    kube.apply(builders.network_policy(name, namespace, owner, spec, operator_namespace()))
    for claim in builders.pvcs(name, namespace, owner, spec):
        kube.apply(claim)
    kube.apply(builders.statefulset(name, namespace, owner, spec, restart_hash(spec, cleaner)))
    return spec


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def operator_namespace() -> str | None:
    """The operator's namespace, for the NetworkPolicies to admit its pod: the chart sets
    LOGKEEPER_OPERATOR_NAMESPACE (downward API); in a pod without it, the service account's
    namespace; None when run outside the cluster (make e2e)."""
    ns = os.environ.get("LOGKEEPER_OPERATOR_NAMESPACE", "").strip()
    if ns:
        return ns
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def reconciling_status(body: Mapping[str, Any], now: str) -> tuple[dict[str, Any], list[Event]]:
    """After a successful apply: clear a blocking Ready=False (the timer fills in the rest)."""
    st = body.get("status") or {}
    gen = body["metadata"].get("generation")
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("reason") in BLOCKING_REASONS:
        return invalid_status("children applied; waiting for the sidecar", gen, st.get("conditions"), now,
                              reason="Reconciling")
    return {"observedGeneration": gen}, []


def failure_status(body: Mapping[str, Any], message: str, reason: str, now: str) -> tuple[dict[str, Any], list[Event]]:
    st = body.get("status") or {}
    return invalid_status(message, body["metadata"].get("generation"), st.get("conditions"), now, reason)


# ---------------------------------------------------------------------------------------------- status
def pod_state(pod: Mapping[str, Any] | None) -> PodState:
    if pod is None:
        return PodState(False)
    st = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    if pod["metadata"].get("deletionTimestamp"):
        return PodState(True, "Terminating", False, None, "the pod is being replaced")
    return PodState(True, st.get("phase"), ready, st.get("podIP"), st.get("message"))


def token_of(kube: Kube, namespace: str, lv: str) -> str:
    """The LogVolume's token, derived from the namespace's key (made on first use; tokens.py)."""
    secret, _created = kube.create_if_absent(tokens.key_secret(namespace))
    try:
        key = tokens.key_of(secret)
    except ValueError as e:
        raise SpecError(f"Secret {KEY_SECRET}", str(e)) from None
    return tokens.derive_token(key, namespace, lv)


def sidecar_for(kube: Kube, namespace: str, lv: str, spec: LogVolumeSpec, pod: PodState) -> SidecarClient | None:
    if not pod.exists or pod.phase != "Running" or not pod.ip:
        return None
    return SidecarClient(f"http://{pod.ip}:{spec.sidecar.port}", token_of(kube, namespace, lv))


def sync_topics(client: SidecarClient, spec: LogVolumeSpec) -> list[str]:
    """Apply topic changes live (what the sidecar can change without a restart)."""
    done = []
    for action, topic, arg in topic_actions(spec.topics, client.topics()):
        if action == "create":
            client.create_topic(topic, arg.partitions, {k: v for k, v in arg.configs.items()})
        elif action == "grow":
            client.add_partitions(topic, arg)
        else:
            client.put_configs(topic, arg)
        done.append(f"{action} {topic}")
    return done


@dataclass
class PollResult:
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    compaction_jobs: list[str] = field(default_factory=list)


def poll_logvolume(kube: Kube, body: Mapping[str, Any]) -> PollResult | None:
    """One status tick: the pod, the sidecar's /v1/status, live topic changes, CompactionJobs for
    backlogs. None when the spec is refused (its Ready=False stays as the handler wrote it)."""
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    st = body.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("reason") in BLOCKING_REASONS:
        return None
    try:
        spec = parse(body)
    except SpecError:
        return None
    pod = pod_state(kube.get("v1", "Pod", namespace, pod_name(name)))
    client = sidecar_for(kube, namespace, name, spec, pod)
    doc, error = None, None
    events: list[Event] = []
    if client is not None:
        try:
            doc = client.status()
            if doc.get("ready"):
                for change in sync_topics(client, spec):
                    events.append(Event("Normal", "TopicChanged", f"applied live: {change}"))
        except SidecarError as e:
            error = str(e)
    status, cond_events = build_status(doc, pod, meta.get("generation"), st.get("conditions"), now_iso(), error)
    result = PollResult(status, cond_events + events)
    if doc is not None and spec.spark.auto_submit:
        for part in doc.get("partitions") or []:
            hand_off = part.get("offload") if isinstance(part, Mapping) else None
            if not isinstance(hand_off, Mapping) or hand_off.get("state") != WAITING:
                continue
            cj = ensure_compaction_job(kube, name, namespace, uid, spec, doc.get("log_dirs") or [], part, hand_off)
            if cj:
                result.compaction_jobs.append(cj)
    return result


def volume_of(spec: LogVolumeSpec, log_dirs: list[Any], directory: str) -> VolumeSpec | None:
    """The volume holding ``directory``. The sidecar lists its log.dirs in the order the operator
    rendered them (spec.volumes' order), so the position names the volume whatever the directory's
    path is where the sidecar runs; a sidecar with another number of dirs (an old config during a
    roll) names none."""
    paths = [str(d.get("path") or "").rstrip("/") for d in log_dirs if isinstance(d, Mapping)]
    if len(paths) != len(spec.volumes) or directory not in paths:
        return None
    return spec.volumes[paths.index(directory)]


def ensure_compaction_job(kube: Kube, lv: str, namespace: str, uid: str, spec: LogVolumeSpec, log_dirs: list[Any],
                          part: Mapping[str, Any], hand_off: Mapping[str, Any]) -> str | None:
    """The CompactionJob of a hand-off the sidecar waits on, made once (named after its attempt)."""
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
    if not may_submit(kube.list(API_VERSION, COMPACTIONJOB, namespace, f"{LABEL_LOGVOLUME}={lv}"), topic, p,
                      spec.spark.cooldown_seconds, time.time()):
        return None
    cj = CompactionJobSpec(lv, topic, p, volume.id, directory, str(attempt), tuple(str(a) for a in args),
                           str(staging), spec.spark.timeout_seconds, spec.spark.max_attempts)
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
        done = st.get("completionTime")
        if done:
            ended = datetime.strptime(done, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
            if now_s - ended < cooldown_s:
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


def policy_users(kube: Kube, namespace: str, policy: str) -> list[dict[str, Any]]:
    return [lv for lv in kube.list(API_VERSION, LOGVOLUME, namespace)
            if ((lv.get("spec") or {}).get("cleanerPolicyRef") or {}).get("name") == policy]


# ---------------------------------------------------------------------------------------- compaction
@dataclass
class CompactionTick:
    step: Step
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)


def drive_compaction(kube: Kube, body: Mapping[str, Any], now_s: float | None = None) -> CompactionTick:
    """One step of a CompactionJob's state machine (compaction.py), carried out."""
    now_s = time.time() if now_s is None else now_s
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    st = dict(body.get("status") or {})
    if (st.get("phase") or PENDING) in (SUCCEEDED, FAILED):
        return CompactionTick(Step("done", f"the job is {st.get('phase')}"), {}, [])
    cj = parse_compactionjob(body.get("spec") or {})
    out: dict[str, Any] = {"observedGeneration": meta.get("generation")}
    lv_body = kube.get(API_VERSION, LOGVOLUME, namespace, cj.log_volume)
    if lv_body is None:
        out.update(phase=FAILED, message=f"LogVolume {cj.log_volume} does not exist", completionTime=now_iso())
        return CompactionTick(Step("fail", out["message"]), out, [Event("Warning", "LogVolumeMissing", out["message"])])
    spec = parse(lv_body)
    volume = next((v for v in spec.volumes if v.id == cj.volume_id), None)
    if volume is None:
        raise SpecError("spec.volumeId", f"LogVolume {cj.log_volume} has no volume {cj.volume_id!r}")
    attempts = int(st.get("attempts") or 0)
    job = kube.get("batch/v1", "Job", namespace, batch_job_name(name, attempts)) if attempts else None
    pod = pod_state(kube.get("v1", "Pod", namespace, pod_name(cj.log_volume)))
    sidecar = hand_off_of(sidecar_for(kube, namespace, cj.log_volume, spec, pod), cj)
    step = next_step(st, JobState.of(job), sidecar, now_s, cj.timeout_seconds, cj.max_attempts)
    events: list[Event] = []
    if step.kind == "submit":
        job_body = builders.batch_job(name, namespace, uid, step.attempt, cj, spec.spark,
                                      builders.claim_for(cj.log_volume, volume))
        _, created = kube.create_if_absent(job_body)
        out.update(phase=RUNNING, attempts=step.attempt, submissionId=job_body["metadata"]["name"],
                   jobName=job_body["metadata"]["name"], staging=cj.staging, message=step.message)
        if created or st.get("attempts") != step.attempt:
            out["attemptStartedAt"] = now_s
        if not st.get("startTime"):
            out["startTime"] = now_iso()
        if created:
            events.append(Event("Normal", "Submitted", f"Job {job_body['metadata']['name']}: {step.message}"))
    elif step.kind == "succeed":
        out.update(phase=SUCCEEDED, message=step.message, completionTime=now_iso())
        events.append(Event("Normal", "Succeeded", step.message))
    elif step.kind == "retry":
        out.update(phase=PENDING, message=step.message)
        events.append(Event("Warning", "AttemptFailed", step.message))
    elif step.kind == "fail":
        out.update(phase=FAILED, message=step.message, completionTime=now_iso())
        events.append(Event("Warning", "Failed", step.message))
    elif st.get("message") != step.message:
        out["message"] = step.message
    return CompactionTick(step, out, events)


def invalid_status_ok(body: Mapping[str, Any], users: int) -> tuple[dict[str, Any], list[Event]]:
    """A CleanerPolicy's status: how many LogVolumes use it, Ready=True."""
    from .status import condition, merge_conditions

    st = body.get("status") or {}
    conditions, events = merge_conditions(st.get("conditions"), [condition(
        "Ready", True, "Applied", f"applied to {users} LogVolume(s)")], now_iso())
    return {"logVolumes": users, "observedGeneration": body["metadata"].get("generation"),
            "conditions": conditions}, events
