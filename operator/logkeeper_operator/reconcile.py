"""What the handlers and the periodic loops do to LogVolumes, apart from kopf: each function takes
the Kubernetes client and the resource's body, and is safe to repeat (server-side apply;
create-if-absent; deterministic names). CompactionJobs: jobs.py.

Drift: ``apply_logvolume`` reads each child before applying it and reports the children it had to
make again (missing) or change back (the apply changed their resourceVersion: server-side apply
writes nothing when the object already holds what the operator owns); periodic.py runs it every
reconcile.interval.seconds and raises one event per repair.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from logkeeper.server.status_schema import Status

from . import builders, tokens
from .k8s import Kube
from .names import (
    API_VERSION,
    CLEANERPOLICY,
    KEY_SECRET,
    LOGVOLUME,
    SIDECAR_CONTAINER,
    pod_name,
)
from .render import render_config, restart_hash, topic_actions
from .sidecar_client import SidecarClient, SidecarError
from .spec import (
    LogVolumeSpec,
    SpecError,
    VolumeSpec,
    check_topic_changes,
    parse_cleaner,
    parse_logvolume,
)
from .status import Event, LogVolumeStatus, PodState, build_status, condition, invalid_status, merge_conditions
from .times import now_iso

log = logging.getLogger(__name__)
BLOCKING_REASONS = frozenset({"InvalidSpec", "ApplyRejected", "PolicyNotFound"})


class PolicyMissing(Exception):
    pass


def default_image() -> str:
    return os.environ.get("LOGKEEPER_IMAGE") or "logkeeper:0.1.0"


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


@dataclass(frozen=True)
class Repair:
    kind: str
    name: str
    what: str  # "created" (it was missing) | "restored" (it had been changed)


def _apply(kube: Kube, obj: Mapping[str, Any], repairs: list[Repair]) -> None:
    meta = obj["metadata"]
    before = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    after = kube.apply(obj)
    if before is None:
        repairs.append(Repair(obj["kind"], meta["name"], "created"))
    elif (before.get("metadata") or {}).get("resourceVersion") != (after.get("metadata") or {}).get("resourceVersion"):
        repairs.append(Repair(obj["kind"], meta["name"], "restored"))


def apply_logvolume(kube: Kube, body: Mapping[str, Any], old_spec: Mapping[str, Any] | None = None) -> list[Repair]:
    """Parse, render, and create-or-patch every child object of a LogVolume; what had to be made
    or changed (after a spec change that is the change itself; on a periodic pass, drift)."""
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
    repairs: list[Repair] = []
    # create only: an existing token Secret is kept as it is (the operator may not read it)
    token = builders.secret(name, namespace, owner, token_of(kube, namespace, name))
    if kube.create(token):
        repairs.append(Repair("Secret", token["metadata"]["name"], "created"))
    _apply(kube, builders.configmap(name, namespace, owner, text), repairs)
    _apply(kube, builders.service(name, namespace, owner, spec), repairs)
    _apply(kube, builders.network_policy(name, namespace, owner, spec, operator_namespace()), repairs)
    for claim in builders.pvcs(name, namespace, owner, spec):
        # a claim's spec is immutable once bound: made again when missing, never changed back
        if kube.get("v1", "PersistentVolumeClaim", namespace, claim["metadata"]["name"]) is None:
            kube.apply(claim)
            repairs.append(Repair("PersistentVolumeClaim", claim["metadata"]["name"], "created"))
    _apply(kube, builders.statefulset(name, namespace, owner, spec, restart_hash(spec, cleaner)), repairs)
    return repairs


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


def reconciling_status(body: Mapping[str, Any], now: str) -> tuple[LogVolumeStatus, list[Event]]:
    """After a successful apply: clear a blocking Ready=False (the timer fills in the rest)."""
    st = body.get("status") or {}
    gen = body["metadata"].get("generation")
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("reason") in BLOCKING_REASONS:
        return invalid_status("children applied; waiting for the sidecar", gen, st.get("conditions"), now,
                              reason="Reconciling")
    return {"observedGeneration": gen}, []


def failure_status(body: Mapping[str, Any], message: str, reason: str, now: str) -> tuple[LogVolumeStatus, list[Event]]:
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
    started = any(c.get("name") == SIDECAR_CONTAINER and c.get("started") for c in st.get("containerStatuses") or [])
    return PodState(True, st.get("phase"), ready, st.get("podIP"), st.get("message"), started)


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
    status: LogVolumeStatus
    events: list[Event] = field(default_factory=list)
    spec: LogVolumeSpec | None = None
    sidecar: Status | None = None  # its /v1/status document, when it answered


def is_blocked(body: Mapping[str, Any]) -> bool:
    """Ready=False for a spec the operator refused: left as the handler wrote it until the spec changes."""
    ready = next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("reason") in BLOCKING_REASONS


def poll_logvolume(kube: Kube, body: Mapping[str, Any]) -> PollResult | None:
    """One status tick: the pod, the sidecar's /v1/status, live topic changes (the hand-offs it
    reports: jobs.submit_hand_offs). None when the spec is refused."""
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    st = body.get("status") or {}
    if is_blocked(body):
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
    status, cond_events = build_status(doc, pod, st.get("conditions"), now_iso(), error,
                                       st.get("lastSeenTime"))
    return PollResult(status, cond_events + events, spec, doc)


def volume_of(spec: LogVolumeSpec, log_dirs: list[Any], directory: str) -> VolumeSpec | None:
    """The volume holding ``directory``. The sidecar lists its log.dirs in the order the operator
    rendered them (spec.volumes' order), so the position names the volume whatever the directory's
    path is where the sidecar runs; a sidecar with another number of dirs (an old config during a
    roll) names none."""
    paths = [str(d.get("path") or "").rstrip("/") for d in log_dirs if isinstance(d, Mapping)]
    if len(paths) != len(spec.volumes) or directory not in paths:
        return None
    return spec.volumes[paths.index(directory)]


def policy_users(kube: Kube, namespace: str, policy: str) -> list[dict[str, Any]]:
    return [lv for lv in kube.list(API_VERSION, LOGVOLUME, namespace)
            if ((lv.get("spec") or {}).get("cleanerPolicyRef") or {}).get("name") == policy]


def invalid_status_ok(body: Mapping[str, Any], users: int) -> tuple[dict[str, Any], list[Event]]:
    """A CleanerPolicy's status: how many LogVolumes use it, Ready=True."""

    st = body.get("status") or {}
    conditions, events = merge_conditions(st.get("conditions"), [condition(
        "Ready", True, "Applied", f"applied to {users} LogVolume(s)")], now_iso())
    return {"logVolumes": users, "observedGeneration": body["metadata"].get("generation"),
            "conditions": conditions}, events
