"""Issue 20 against a real kube-apiserver (and etcd): the binaries make e2e caches under
~/.cache/logkeeper/e2e (tools.env); skipped without them. No kubelet, no controllers: what is
checked is what the API server itself does with our CRDs and our client's calls.

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
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path.home() / ".cache" / "logkeeper" / "e2e" / "tools.env"
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
        pytest.skip("no kube-apiserver/etcd in ~/.cache/logkeeper/e2e (make e2e builds them)")
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
    os.environ["KUBECONFIG"] = str(d / "kubeconfig")
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    from logkeeper_operator.k8s import ApiError, Kube
    try:
        kube = Kube()
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
