"""What make e2e's steps talk through: kubectl (and its printed tables) and helm, the user's
tools; the one wait loop of the test steps, the sidecar's HTTP API on a pod IP, static local
PersistentVolumes, step timings and the post-mortem printed when a step fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
TIMINGS: dict[str, float] = {}
_T0 = time.monotonic()


def mark(step: str) -> None:
    """Print and keep the seconds since the session started at the end of ``step``."""
    TIMINGS[step] = round(time.monotonic() - _T0, 1)
    print(f"[{TIMINGS[step]:7.1f} s] {step}", flush=True)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 1.0) -> Any:
    """Poll ``check`` until it returns something truthy and return that; fail naming ``what``
    (and the last result) after ``timeout_s``. An exception of the check (a transient API error,
    an object not there yet) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def timed_wait(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> float:
    """Seconds until ``check`` holds (wait_for's bound and failure message)."""
    t0 = time.monotonic()
    wait_for(check, timeout_s, what, every_s=every_s)
    return round(time.monotonic() - t0, 1)


def printed_columns(table: str) -> dict[str, str]:
    """kubectl's table of one object as {column: value}, cut where each header starts (a value
    may hold a space: "cleaning 1/1")."""
    header, row = table.splitlines()[:2]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return {header[a:b].strip(): row[a:b].strip() for a, b in bounds}


class Kubectl:
    """The venv's kubectl (the e2e extra) with the admin kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.bin = str(VENV_BIN / "kubectl")

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([self.bin, *args], input=stdin, capture_output=True, text=True, env=self.env,
                             timeout=120, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)

    def exists(self, kind: str, name: str, namespace: str) -> bool:
        return bool(self("get", kind, name, "-n", namespace, "-o", "name", "--ignore-not-found").stdout.strip())


class Helm:
    """helm (built by e2e/tools.sh) with its homes in the work dir, so nothing of the user's is read."""

    def __init__(self, binary: str, kubeconfig: Path, home: Path) -> None:
        self.bin = binary
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HELM_CACHE_HOME": str(home),
                    "HELM_CONFIG_HOME": str(home), "HELM_DATA_HOME": str(home)}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([self.bin, *args], capture_output=True, text=True, env=self.env, timeout=600,
                             check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def container_ready(pod: dict[str, Any], name: str, min_restarts: int = 0) -> dict[str, Any] | None:
    """The status of container ``name`` when kubelet reports it ready (its readiness probe passed)
    with at least ``min_restarts`` restarts; None otherwise."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c["name"] == name and c.get("ready") and c.get("restartCount", 0) >= min_restarts:
            return dict(c)
    return None


def local_pv(name: str, path: Path, size: str, node_name: str, claim: tuple[str, str]) -> dict[str, Any]:
    """A static local PersistentVolume on the node (what an administrator or a static provisioner
    makes), reserved for ``claim`` (namespace, name) as an administrator does, so that which
    directory holds which volume is known (equal PVs are otherwise bound in any order). The
    directory belongs to the sidecar's uid, as kubelet applies no fsGroup to local volumes."""
    path.mkdir(parents=True)
    os.chown(path, 10001, 10001)
    path.chmod(0o750)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": claim[0], "name": claim[1]},
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "local": {"path": str(path)},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}}}}


class Sidecar:
    """The sidecar's HTTP API (sidecar/logkeeper/server/http_api.py) at ``base``, with its token."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def produce(self, topic: str, partition: int, records: list[dict[str, str]]) -> None:
        status, body = self.call("POST", f"/v1/topics/{topic}/partitions/{partition}/records", {"records": records})
        assert status == 200, (status, body)

    def read_all(self, topic: str, partition: int) -> list[dict[str, Any]]:
        """Every record from the log's start to its end, page by page (bounded)."""
        out: list[dict[str, Any]] = []
        offset = 0
        for _ in range(10_000):
            status, body = self.call("GET", f"/v1/topics/{topic}/partitions/{partition}/records"
                                            f"?offset={offset}&encoding=utf-8")
            assert status == 200, (status, body)
            out += body["records"]
            offset = max(int(body["next_offset"]), int(body["log_start_offset"]))
            if offset >= int(body["log_end_offset"]) or not body["records"]:
                return out
        raise AssertionError(f"{topic}-{partition}: no end after 10000 pages")

    def values(self, topic: str, partition: int) -> list[str]:
        return [r["value"] for r in self.read_all(topic, partition)]


def produce_paused(api: Sidecar, topic: str, partition: int, chunks: list[list[dict[str, str]]]) -> None:
    """Produce each chunk with the partition's cleaning paused, resumed after the last: a backlog
    written at once. A cleaner that keeps up with the writes cleans them in rounds of fewer keys
    than its map holds and sees no backlog (a race that a fast cleaner lost: test_08 once timed
    out waiting for the CompactionJob while the sidecar cleaned every 800 records)."""
    cleaning = f"/v1/topics/{topic}/partitions/{partition}/cleaning"
    status, body = api.call("POST", f"{cleaning}/pause")
    assert status == 200, (status, body)
    try:
        for records in chunks:
            api.produce(topic, partition, records)
    finally:
        status, body = api.call("POST", f"{cleaning}/resume")
        assert status == 200, (status, body)


def diagnostics(kubectl: Kubectl, namespaces: tuple[str, ...]) -> str:
    """The pods, their events and their containers' logs (current and previous), as a user would
    look at them after a failure."""
    parts = []

    def run(*args: str) -> None:
        out = kubectl(*args, check=False)
        parts.append(f"--- kubectl {' '.join(args)} ---\n{out.stdout}{out.stderr}")

    run("get", "nodes,pods,pvc,pv", "-A", "-o", "wide")
    run("get", "logvolumes,compactionjobs,jobs", "-A", "-o", "wide")
    run("get", "events", "-A", "--sort-by=.lastTimestamp")
    for ns in namespaces:
        pods = kubectl("get", "pods", "-n", ns, "-o", "name", check=False).stdout.split()
        for pod in pods:
            run("describe", "-n", ns, pod)
            run("logs", "-n", ns, pod, "--all-containers", "--tail=80")
            run("logs", "-n", ns, pod, "--all-containers", "--previous", "--tail=40")
    return "\n".join(parts)
