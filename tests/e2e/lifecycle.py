"""The lifecycle steps' (test_operator_lifecycle.py) LogVolume, operator values and policies, and
what they ask of it: its readiness, its Repaired events, where a hand-off's staging is on the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .compaction_jobs import HANDOFF_CLEANER
from .conftest import NAMESPACE, OPERATOR_VALUES
from .kube import Kubectl, condition, container_ready
from .realnode import RealNode

LV, POD = "lifecycle", "lifecycle-0"
RECONCILE_S = 10
LEASE_S, RETRY_S = 15, 2  # the chart's lease.duration.seconds and lease.retry.seconds (kept)
# test_e2e.py's operator settings, with drift repair every RECONCILE_S
VALUES = OPERATOR_VALUES + f"    reconcile.interval.seconds: {RECONCILE_S}\n"
LOGVOLUME = {
    "apiVersion": "logkeeper.io/v1alpha1", "kind": "LogVolume", "metadata": {"name": LV, "namespace": NAMESPACE},
    "spec": {"volumes": [{"id": "disk-0", "size": "1Gi", "deleteClaim": True}],
             "topics": [{"name": "t", "partitions": 2}]},
}
CHILDREN = (("statefulset", LV), ("service", LV), ("configmap", f"{LV}-config"), ("secret", f"{LV}-token"),
            ("networkpolicy", LV), ("pvc", f"{LV}-disk-0"), ("pod", POD))
# step 17: a policy that hands a small backlog to Spark, retries a failed hand-off after 2 s and
# deletes a finished CompactionJob 5 s after it ended
JOBS_POLICY = "lc-jobs"
JOBS_POLICY_YAML = {"apiVersion": "logkeeper.io/v1alpha1", "kind": "CleanerPolicy",
                    "metadata": {"name": JOBS_POLICY, "namespace": NAMESPACE},
                    "spec": {"cleaner": {**HANDOFF_CLEANER, "log.cleaner.uncleanable.retry.initial.ms": 2000,
                                         "log.cleaner.uncleanable.retry.max.ms": 2000},
                             "compactionJobs": {"ttlSecondsAfterFinished": 5}}}
BACKLOG_TOPIC = {"name": "acc", "partitions": 1, "configs": {"cleanup.policy": ["compact"], "segment.bytes": 16384,
                                                             "min.cleanable.dirty.ratio": 0.01}}


def lv_json(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "logvolume", LV, "-n", NAMESPACE))


def lv_ready(kubectl: Kubectl) -> bool:
    """The LogVolume Ready and its StatefulSet's pod (not one being deleted) serving."""
    pod = kubectl.json("get", "pod", POD, "-n", NAMESPACE)
    return bool(condition(lv_json(kubectl), "Ready").get("status") == "True"
                and not pod["metadata"].get("deletionTimestamp") and container_ready(pod, "sidecar"))


def repaired(kubectl: Kubectl) -> dict[str, str]:
    """The LogVolume's `Repaired` events, name -> message (each repair is a new event)."""
    events = kubectl.json("get", "events", "-n", NAMESPACE, "--field-selector",
                          f"involvedObject.name={LV},involvedObject.kind=LogVolume,reason=Repaired")["items"]
    assert all(e["type"] == "Normal" for e in events), [(e["type"], e["message"]) for e in events]
    return {e["metadata"]["name"]: e["message"] for e in events}


def repaired_since(kubectl: Kubectl, before: dict[str, str]) -> set[str]:
    return {m for name, m in repaired(kubectl).items() if name not in before}


def on_node(node: RealNode, staging: str) -> Path:
    """Where the pod's path ``staging`` (/data/disk-0/...) is on the node (the static PV's dir)."""
    prefix = "/data/disk-0/"
    assert staging.startswith(prefix), staging
    return node.workdir / "volumes" / "lc-disk-0" / staging[len(prefix):]
