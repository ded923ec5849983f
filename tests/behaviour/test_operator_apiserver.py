"""Issue 20 against a real kube-apiserver (and etcd): the binaries make e2e caches under
~/.cache/logkeeper/e2e (tools.env). `make test` skips these tests on a machine where make e2e has
not built them yet; `make e2e` runs them after building them (LOGKEEPER_E2E_TOOLS set), and there
a missing binary fails them. No kubelet, no controllers: what is checked is what the API server
itself does with our CRDs and our client's calls.

- the generated CRDs are accepted (their CEL rules compile within the cost budget), and bad
  specs are refused at once, naming the field;
- server-side apply writes nothing when an object holds what the operator owns (the drift
  detection's premise), and the reconcile pass makes a deleted child again and changes a changed
  one back, with a Repaired event;
- the leader's Lease: one holder, a released Lease taken at once.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("LOGKEEPER_E2E_TOOLS") or Path.home() / ".cache" / "logkeeper" / "e2e" / "tools.env")
REQUIRED = bool(os.environ.get("LOGKEEPER_E2E_TOOLS"))  # under make e2e, which has just built them
TOKEN = "issue20-token"


def _tools() -> dict[str, str]:
    if not TOOLS.exists():
        return {}
    pairs = (line.split("=", 1) for line in TOOLS.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if Path(v).exists()}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tools = _tools()
    if "ETCD" not in tools or "KUBE_APISERVER" not in tools or not shutil.which("openssl"):
        missing = f"no kube-apiserver/etcd listed in {TOOLS} (make e2e builds them), or no openssl"
        if REQUIRED:
            pytest.fail(missing)
        pytest.skip(missing)
    d = tmp_path_factory.mktemp("apiserver")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "sa.key", "-out",
                    d / "sa.crt", "-days", "1", "-subj", "/CN=sa"], check=True, capture_output=True)
    (d / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    etcd_port, peer_port, api_port = _port(), _port(), _port()
    procs = [subprocess.Popen([tools["ETCD"], "--data-dir", d / "etcd", "--listen-client-urls",
                               f"http://127.0.0.1:{etcd_port}", "--advertise-client-urls",
                               f"http://127.0.0.1:{etcd_port}", "--listen-peer-urls", f"http://127.0.0.1:{peer_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    procs.append(subprocess.Popen([
        tools["KUBE_APISERVER"], f"--etcd-servers=http://127.0.0.1:{etcd_port}", f"--secure-port={api_port}",
        "--bind-address=127.0.0.1", f"--cert-dir={d / 'certs'}", f"--token-auth-file={d / 'tokens.csv'}",
        "--authorization-mode=AlwaysAllow", "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={d / 'sa.crt'}", f"--service-account-signing-key-file={d / 'sa.key'}",
        "--service-cluster-ip-range=10.96.0.0/16", "--enable-admission-plugins=NamespaceLifecycle"],
        stdout=subprocess.DEVNULL, stderr=(d / "apiserver.log").open("w")))
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
              "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{api_port}",
                                                     "insecure-skip-tls-verify": True}}],
              "users": [{"name": "a", "user": {"token": TOKEN}}],
              "contexts": [{"name": "t", "context": {"cluster": "t", "user": "a"}}]}
    (d / "kubeconfig").write_text(yaml.safe_dump(config))
    os.environ["KUBECONFIG"] = str(d / "kubeconfig")  # for the operator processes
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    from kubernetes import config as kube_config

    from logkeeper_operator.k8s import ApiError, Kube
    try:
        # named, not through $KUBECONFIG: the kubernetes package reads that once, at its import
        kube = Kube(kube_config.new_client_from_config(config_file=str(d / "kubeconfig")))
        deadline = time.monotonic() + 120
        while True:
            try:
                kube._call("GET", "/api/v1/namespaces/default")
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        kube._call("POST", "/api/v1/namespaces", None, {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "apps"}})
        for path in sorted((REPO / "crds").glob("*.yaml")):
            kube._call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None,
                       yaml.safe_load(path.read_text()))
        time.sleep(2)  # the new kinds served
        yield kube
    finally:
        os.environ.pop("KUBECONFIG", None)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def _lv(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "logkeeper.io/v1alpha1", "kind": "LogVolume", "metadata": {"name": name, "namespace": "apps"},
            "spec": {"volumes": [{"id": "d0", "size": "1Gi"}], "topics": [{"name": "t", "partitions": 3}], **spec}}


def _create(api: Any, obj: dict[str, Any]) -> str:
    """'' when created, else the API server's message."""
    from logkeeper_operator.k8s import ApiError
    try:
        api.apply(obj)
        return ""
    except ApiError as e:
        return e.message


BAD = [
    ({"volumes": [{"id": "d0", "size": "1Gi", "existingClaim": "c"}]}, "spec.volumes[0].size"),
    ({"containers": [{"name": "sidecar", "image": "x"}]}, "spec.containers: Forbidden"),
    ({"cleanerPolicyRef": {"name": "p"}, "cleaner": {"log.cleaner.threads": 2}}, "spec.cleaner: Forbidden"),
    ({"spark": {"mode": "local", "master": "k8s://https://x"}}, "spec.spark.master"),
    ({"spark": {"scratch": {"size": "2Gi", "factor": 2}}}, "spec.spark.scratch.factor"),
    ({"sidecar": {"settings": {"kafka.listen": ["SSL://[$(POD_IP)]:9093"]}}}, "spec.sidecar.kafkaSecurity"),
]


def test_bad_specs_are_refused_naming_the_field(api: Any) -> None:
    for i, (spec, field) in enumerate(BAD):
        message = _create(api, _lv(f"bad{i}", **spec))
        assert field in message, (spec, message)
    assert "at most 52 characters" in _create(api, _lv("1abc"))
    assert "at most 52 characters" in _create(api, _lv("a" * 53))
    assert _create(api, _lv("orders")) == ""
    shrunk = _create(api, _lv("orders", topics=[{"name": "t", "partitions": 2}]))
    assert "spec.topics[0].partitions: Forbidden" in shrunk and "cannot shrink" in shrunk
    assert _create(api, _lv("orders", topics=[{"name": "t", "partitions": 4}])) == ""


def test_drift_is_repaired_with_events(api: Any) -> None:
    from logkeeper_operator import periodic, reconcile
    assert _create(api, _lv("drift")) == ""
    lv = api.get("logkeeper.io/v1alpha1", "LogVolume", "apps", "drift")
    assert {r.kind for r in reconcile.apply_logvolume(api, lv)} >= {"StatefulSet", "ConfigMap", "Service"}
    assert reconcile.apply_logvolume(api, lv) == []  # a no-op apply writes nothing: no drift
    api.patch_status("LogVolume", "apps", "drift", {"observedGeneration": lv["metadata"]["generation"]})
    api.delete("apps/v1", "StatefulSet", "apps", "drift")
    api._call("PATCH", "/api/v1/namespaces/apps/configmaps/drift-config", None, {"data": {"config.yaml": "x"}},
              "application/merge-patch+json")
    periodic.reconcile_pass(api, ["apps"])
    assert api.get("apps/v1", "StatefulSet", "apps", "drift") is not None
    assert api.get("v1", "ConfigMap", "apps", "drift-config")["data"]["config.yaml"] != "x"
    repaired = sorted(e["message"] for e in api.list("v1", "Event", "apps", field_selector="involvedObject.name=drift")
                      if e["reason"] == "Repaired")
    assert repaired == ["ConfigMap drift-config restored (it had been changed)",
                        "StatefulSet drift created (it was missing)"]


def test_one_lease_holder(api: Any) -> None:
    from logkeeper_operator import leader
    a, b = leader.Elector(api, "apps", "a"), leader.Elector(api, "apps", "b")
    assert a.try_lead() and not b.try_lead() and a.try_lead()
    a.release()
    assert b.try_lead() and not a.try_lead()


# short by default (a fast test); LOGKEEPER_LEASE_S=15 LOGKEEPER_RETRY_S=2 measures the chart's defaults
LEASE_S = float(os.environ.get("LOGKEEPER_LEASE_S", "6"))
RETRY_S = float(os.environ.get("LOGKEEPER_RETRY_S", "1"))


def _operator(api_kube: Any, port: int, lease_s: float, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": os.environ.get("KUBECONFIG", ""), "LOGKEEPER_OPERATOR_NAMESPACE": "apps",
           "POD_NAME": name, "PYTHONWARNINGS": "ignore",
           "LOGKEEPER_OPERATOR_RECONCILE_INTERVAL_SECONDS": "5", "LOGKEEPER_OPERATOR_STATUS_INTERVAL_SECONDS": "2",
           "LOGKEEPER_OPERATOR_LEASE_DURATION_SECONDS": str(lease_s),
           "LOGKEEPER_OPERATOR_LEASE_RENEW_SECONDS": str(lease_s / 3),
           "LOGKEEPER_OPERATOR_LEASE_RETRY_SECONDS": str(RETRY_S)}
    return subprocess.Popen([sys.executable, "-m", "logkeeper_operator", "--namespace", "apps", "--leader-election",
                             "--http", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _metric(port: int, name: str) -> float | None:
    import urllib.request
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    line = next((x for x in text.splitlines() if x.startswith(name + " ") or x.startswith(name + "{")), None)
    return float(line.rsplit(" ", 1)[1]) if line else None


def _until(check: Any, timeout_s: float) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.2)
    return time.monotonic() - started


def _holder(api: Any) -> str | None:
    """The pod name of the Lease's holder (identity: POD_NAME '_' a per-process suffix)."""
    from logkeeper_operator.names import LEASE_NAME
    lease = api.get("coordination.k8s.io/v1", "Lease", "apps", LEASE_NAME) or {}
    who = (lease.get("spec") or {}).get("holderIdentity")
    return str(who).rsplit("_", 1)[0] if who else None


def _stopped(p: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, float]:
    """``p``'s exit status and how long it took to exit after SIGTERM."""
    t0 = time.monotonic()
    p.terminate()
    return p.wait(timeout_s), time.monotonic() - t0


def test_operator_processes_lead_repair_and_hand_over(api: Any) -> None:
    """Operator processes (kopf and the loops, as the chart runs them): one leads, a LogVolume gets
    its children and no finalizer, a deleted StatefulSet comes back within the reconcile interval;
    the leader stopped by SIGTERM releases the Lease and the standby leads at its next try; a
    standby stops at once on SIGTERM; a SIGKILLed leader's Lease is taken after it expires."""
    lease_s = LEASE_S
    ports = (_port(), _port(), _port(), _port())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_operator(api, ports[0], lease_s, "op-a"))
        _until(lambda: _metric(ports[0], "logkeeper_operator_leader") == 1.0, 60)
        procs.append(_operator(api, ports[1], lease_s, "op-b"))
        _until(lambda: _metric(ports[1], "logkeeper_operator_leader") == 0.0, 60)  # up, standing by
        assert _holder(api) == "op-a"
        assert _create(api, _lv("live")) == ""
        _until(lambda: api.get("apps/v1", "StatefulSet", "apps", "live") is not None, 60)
        lv = api.get("logkeeper.io/v1alpha1", "LogVolume", "apps", "live")
        assert not lv["metadata"].get("finalizers")  # deletion never waits for the operator
        _until(lambda: (api.get("logkeeper.io/v1alpha1", "LogVolume", "apps", "live").get("status") or {})
               .get("observedGeneration") == lv["metadata"]["generation"], 60)
        api.delete("apps/v1", "StatefulSet", "apps", "live")
        repair_s = _until(lambda: api.get("apps/v1", "StatefulSet", "apps", "live") is not None, 30)
        assert repair_s <= 5 + 5  # the reconcile interval, plus a pass

        # SIGTERM (a pod deletion, a rolling update): the leader stops, releases, exits 0; the
        # standby takes the Lease at its next try, long before the Lease would have expired.
        # Regression: kopf cancelled the passes and the release at its shutdown, the Lease expired.
        rc, exit_s = _stopped(procs[0], 30)
        handed_s = _until(lambda: _holder(api) == "op-b", 3 * lease_s)  # after the leader exited
        assert rc == 0 and exit_s < lease_s, (rc, exit_s)
        assert handed_s < lease_s, handed_s
        _until(lambda: _metric(ports[1], "logkeeper_operator_leader") == 1.0, 10)

        # a standby stops at once on SIGTERM (regression: it ignored SIGTERM while waiting)
        procs.append(_operator(api, ports[2], lease_s, "op-c"))
        _until(lambda: _metric(ports[2], "logkeeper_operator_leader") == 0.0, 60)
        rc, standby_exit_s = _stopped(procs[2], 30)
        assert rc == 0 and standby_exit_s < 5, (rc, standby_exit_s)

        # SIGKILL: no release; a new process (here: a new candidate, as a restarted container
        # is: its identity is new) leads only once the Lease expired
        procs.append(_operator(api, ports[3], lease_s, "op-b"))  # the same pod name, restarted
        _until(lambda: _metric(ports[3], "logkeeper_operator_leader") == 0.0, 60)
        procs[1].kill()
        killed = time.monotonic()
        _until(lambda: _metric(ports[3], "logkeeper_operator_leader") == 1.0, 3 * lease_s + 10)
        kill_s = time.monotonic() - killed
        assert lease_s / 3 <= kill_s <= lease_s + RETRY_S + 3, kill_s  # after expiry (renewed <= renew_s ago)
        print(f"drift repair {repair_s:.1f} s (interval 5 s); SIGTERM: leader exited in {exit_s:.1f} s, standby "
              f"leads {handed_s:.1f} s after it exited; standby exits in {standby_exit_s:.1f} s; after SIGKILL "
              f"a new candidate leads in {kill_s:.1f} s (lease {lease_s:g} s, renew {lease_s / 3:g} s, "
              f"retry {RETRY_S:g} s)")
        api.delete("logkeeper.io/v1alpha1", "LogVolume", "apps", "live")
        assert api.get("logkeeper.io/v1alpha1", "LogVolume", "apps", "live") is None  # gone at once
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
