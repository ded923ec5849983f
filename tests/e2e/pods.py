"""What the steps reach on the node's pod network (the CNI bridge, nothing leaves the node): the
sidecar's API through its Service's ready endpoint, and the operator's pods, their /metrics and
the leader Lease's holder."""

from __future__ import annotations

import base64
import re
import urllib.request
from typing import Any

from .conftest import NAMESPACE, RELEASE_NAMESPACE
from .kube import Kubectl, Sidecar, container_ready, wait_for
from .realnode import POD_SUBNET

SIDECAR_PORT = 8080  # the LogVolume's default spec.sidecar.port
LEASE = "logkeeper-operator-leader"  # names.LEASE_NAME
METRICS_PORT = 8080  # the chart's operator.livenessPort
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")


def on_bridge(ip: str) -> str:
    """``ip`` after checking it is a pod's on the node's bridge (no traffic leaves the node)."""
    assert ip.startswith(POD_SUBNET.rsplit(".", 1)[0] + "."), ip
    return ip


def through_service(kubectl: Kubectl, lv: str) -> Sidecar:
    """The sidecar's API through LogVolume ``lv``'s (headless) Service: the ready address its
    EndpointSlice lists, which is what cluster DNS would answer for the Service's name (there is
    no DNS server here)."""
    def address() -> str | None:
        slices = kubectl.json("get", "endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={lv}")
        ready = [a for s in slices["items"] for e in s.get("endpoints") or []
                 if (e.get("conditions") or {}).get("ready") for a in e["addresses"]]
        return ready[0] if len(ready) == 1 else None

    ip = on_bridge(wait_for(address, 120, f"one ready endpoint of Service {lv}"))
    secret = kubectl.json("get", "secret", f"{lv}-token", "-n", NAMESPACE)
    return Sidecar(f"http://{ip}:{SIDECAR_PORT}", base64.b64decode(secret["data"]["token"]).decode())


def operator_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    """The operator's pods that are not being deleted."""
    items = kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/instance=logkeeper")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready_operator_pods(kubectl: Kubectl, n: int) -> list[dict[str, Any]] | None:
    pods = operator_pods(kubectl)
    ready = [p for p in pods if container_ready(p, "operator") and p["status"].get("podIP")]
    return ready if len(pods) == n and len(ready) == n else None


def metrics(ip: str, port: int = METRICS_PORT, path: str = "/metrics",
            token: str | None = None) -> list[tuple[str, dict[str, str], float]]:
    """The samples of http://IP:PORT/PATH (Prometheus text) as (name, labels, value); ``token``:
    the bearer token it asks for (the sidecar's)."""
    req = urllib.request.Request(f"http://{on_bridge(ip)}:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def sample(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels``; None when there is none."""
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    return sum(found) if found else None


def leader_of(ip: str) -> float | None:
    """logkeeper_operator_leader of the operator at ``ip``; None when it does not answer."""
    try:
        return sample(metrics(ip), "logkeeper_operator_leader")
    except OSError:
        return None


def holder_pod(kubectl: Kubectl) -> str | None:
    """The pod of the Lease's holder (its identity is the pod's name, '_', a per-process suffix)."""
    lease = kubectl.json("get", "lease", LEASE, "-n", RELEASE_NAMESPACE)
    who = (lease.get("spec") or {}).get("holderIdentity")
    return str(who).rsplit("_", 1)[0] if who else None
