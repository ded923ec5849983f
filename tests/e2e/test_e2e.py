"""make e2e: logkeeper against a real kube-apiserver (and kube-controller-manager), as a user
would run it: kubectl apply -f crds/, helm install the chart (operator Deployment scaled to 0, the
operator running as a local process with the chart's ServiceAccount), kubectl apply a LogVolume.
The node is played by node.py (no kubelet here). Steps run in order; each names what it checks.
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import ControlPlane, free_port
from .conftest import NAMESPACE, RELEASE_NAMESPACE, REPO, Kubectl, Operator, service_account_kubeconfig, wait_for
from .node import Node

CHART = REPO / "charts" / "logkeeper"
SIDECAR_PORT = free_port()
TIMINGS: dict[str, float] = {}
_T0 = time.monotonic()


def mark(step: str) -> None:
    TIMINGS[step] = round(time.monotonic() - _T0, 1)


POLICY = f"""
apiVersion: logkeeper.io/v1alpha1
kind: CleanerPolicy
metadata: {{name: fast, namespace: {NAMESPACE}}}
spec:
  cleaner:
    log.cleaner.threads: 1
    log.cleaner.backoff.ms: 300
    log.cleaner.dedupe.buffer.size: 24576
"""

LOGVOLUME = f"""
apiVersion: logkeeper.io/v1alpha1
kind: LogVolume
metadata: {{name: orders, namespace: {NAMESPACE}}}
spec:
  volumes:
    - {{id: disk-0, size: 1Gi, deleteClaim: true}}
    - {{id: disk-1, size: 1Gi}}
  topics:
    - name: accounts
      partitions: 1
      configs:
        cleanup.policy: [compact]
        segment.bytes: 16384
        min.cleanable.dirty.ratio: 0.01
    - name: events
      partitions: 2
  node:
    log.retention.check.interval.ms: 1000
    log.initial.task.delay.ms: 0
  cleanerPolicyRef: {{name: fast}}
  sidecar:
    image: logkeeper:e2e
    port: {SIDECAR_PORT}
  spark:
    timeoutSeconds: 300
    maxAttempts: 2
    cooldownSeconds: 3600
"""


@pytest.fixture(scope="module")
def node(api: Any, control_plane: ControlPlane, workdir: Path) -> Iterator[Node]:
    n = Node(api, NAMESPACE, workdir / "node")
    n.start()
    yield n
    n.stop()
    print("\nnode:\n  " + "\n  ".join(n.events[-40:]))
    if n.errors:
        print("node errors:\n  " + "\n  ".join(n.errors[-10:]))


@pytest.fixture(scope="module")
def operator(kubectl: Kubectl, control_plane: ControlPlane, workdir: Path) -> Iterator[Operator]:
    cfg = service_account_kubeconfig(kubectl, control_plane.server, control_plane.ca_file,
                                     workdir / "operator.kubeconfig")
    op = Operator(cfg, workdir / "operator.log")
    op.start()
    yield op
    op.stop()
    print("\noperator log (tail):\n" + op.tail(40))


def lv_json(kubectl: Kubectl, name: str = "orders") -> dict[str, Any]:
    return json.loads(kubectl("get", "logvolume", name, "-n", NAMESPACE, "-o", "json").stdout)


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def exists(kubectl: Kubectl, kind: str, name: str, ns: str = NAMESPACE) -> bool:
    out = kubectl("get", kind, name, "-n", ns, "-o", "name", "--ignore-not-found", check=True)
    return bool(out.stdout.strip())


def token(kubectl: Kubectl) -> str:
    sec = json.loads(kubectl("get", "secret", "orders-token", "-n", NAMESPACE, "-o", "json").stdout)
    return base64.b64decode(sec["data"]["token"]).decode()


def produce(tok: str, topic: str, partition: int, records: list[dict[str, str]]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{SIDECAR_PORT}/v1/topics/{topic}/partitions/{partition}/records",
        data=json.dumps({"records": records}).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {tok}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))


def partition_status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    return next((p for p in lv_json(kubectl).get("status", {}).get("partitions") or [] if p["partition"] == name), {})


def pod_uid(kubectl: Kubectl) -> str:
    out = kubectl("get", "pod", "orders-0", "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


# ------------------------------------------------------------------------------------------ steps
def test_01_control_plane_up(control_plane: ControlPlane, kubectl: Kubectl) -> None:
    mark("control plane up")
    version = kubectl("version", "-o", "json").stdout
    assert json.loads(version)["serverVersion"]["gitVersion"].startswith("v1.")
    kubectl("create", "namespace", NAMESPACE)
    kubectl("create", "namespace", RELEASE_NAMESPACE)
    wait_for(lambda: exists(kubectl, "serviceaccount", "default"), 60, "the default ServiceAccount (its controller)")


def test_02_crds_apply(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(REPO / "crds"))
    # polled here, not with ``kubectl wait --for=condition=Established``: that fails at once
    # (".status.conditions accessor error: <nil>") when it reads a CRD whose status the API
    # server has not written yet, which happened in one CI run of 2026-11-23
    for crd in ("logvolumes", "cleanerpolicies", "compactionjobs"):
        wait_for(lambda name=f"crd/{crd}.logkeeper.io": kubectl(
            "get", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}").stdout == "True",
            60, f"{crd}.logkeeper.io Established")
    out = kubectl("api-resources", "--api-group=logkeeper.io").stdout
    for short in ("lv", "cp", "cj"):
        assert short in out, out


def test_03_chart_lint_and_server_dry_run(helm: Any, kubectl: Kubectl) -> None:
    lint = helm("lint", "--strict", str(CHART), "--set", f"operator.watchNamespaces={{{NAMESPACE}}}")
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    # helm template talks to no cluster: give it the server's version for the chart's kubeVersion check
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    for values in ([], ["--set", "operator.clusterWide=true"]):
        rendered = helm("template", "logkeeper", str(CHART), "-n", RELEASE_NAMESPACE, "--kube-version", server,
                        "--set", f"operator.watchNamespaces={{{NAMESPACE}}}", *values).stdout
        kinds = sorted({d["kind"] for d in yaml.safe_load_all(rendered) if d})
        assert "Deployment" in kinds and "ServiceAccount" in kinds, kinds
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered)
        for doc in yaml.safe_load_all(rendered):
            for rule in (doc or {}).get("rules", []):
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule


def test_04_helm_install(helm: Any, kubectl: Kubectl) -> None:
    helm("install", "logkeeper", str(CHART), "-n", RELEASE_NAMESPACE, "--set", "operator.replicas=0",
         "--set", f"operator.watchNamespaces={{{NAMESPACE}}}", "--wait", "--timeout", "60s")
    dep = json.loads(kubectl("get", "deployment", "logkeeper", "-n", RELEASE_NAMESPACE, "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 0
    sc = dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert exists(kubectl, "role", "logkeeper") and exists(kubectl, "rolebinding", "logkeeper")
    can = kubectl("auth", "can-i", "create", "statefulsets", "-n", NAMESPACE,
                  f"--as=system:serviceaccount:{RELEASE_NAMESPACE}:logkeeper", check=False).stdout.strip()
    cannot = kubectl("auth", "can-i", "delete", "secrets", "-n", NAMESPACE,
                     f"--as=system:serviceaccount:{RELEASE_NAMESPACE}:logkeeper", check=False).stdout.strip()
    assert (can, cannot) == ("yes", "no")
    mark("chart installed")


def test_05_logvolume_becomes_ready(kubectl: Kubectl, operator: Operator, node: Node) -> None:
    kubectl("apply", "-f", "-", stdin=POLICY)
    kubectl("apply", "-f", "-", stdin=LOGVOLUME)
    for kind, name in (("statefulset", "orders"), ("configmap", "orders-config"), ("service", "orders"),
                       ("secret", "orders-token"), ("pvc", "orders-disk-0"), ("pvc", "orders-disk-1")):
        wait_for(lambda k=kind, n=name: exists(kubectl, k, n), 60, f"{kind}/{name} made by the operator")
    cm = json.loads(kubectl("get", "configmap", "orders-config", "-n", NAMESPACE, "-o", "json").stdout)
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["node"]["log.dirs"] == ["/data/disk-0/log", "/data/disk-1/log"]
    assert config["cleaner"]["log.cleaner.dedupe.buffer.size"] == 24576
    wait_for(lambda: condition(lv_json(kubectl), "Ready").get("status") == "True", 120,
             "LogVolume orders Ready=True" + f"\n{operator.tail(20)}\n{node.events[-10:]}")
    pvc0 = json.loads(kubectl("get", "pvc", "orders-disk-0", "-n", NAMESPACE, "-o", "json").stdout)
    pvc1 = json.loads(kubectl("get", "pvc", "orders-disk-1", "-n", NAMESPACE, "-o", "json").stdout)
    assert pvc0["metadata"]["ownerReferences"][0]["kind"] == "LogVolume"
    assert not pvc1["metadata"].get("ownerReferences")
    mark("LogVolume ready")


def test_06_printer_columns_show_live_cleaning_state(kubectl: Kubectl) -> None:
    tok = token(kubectl)
    for rnd in range(4):  # the same keys again and again: a dirty compacted log
        for lo in range(0, 300, 100):  # a batch must fit in a segment (16 KiB here), as in Kafka
            produce(tok, "accounts", 0, [{"key": f"k{i}", "value": f"v{rnd}-{i}-" + "x" * 40}
                                         for i in range(lo, lo + 100)])
    wait_for(lambda: partition_status(kubectl, "accounts-0").get("lastCleanedMs"), 90,
             "a cleaning round on accounts-0 reported in the status")
    table = kubectl("get", "logvolumes", "-n", NAMESPACE).stdout
    header, row = table.splitlines()[0].split(), table.splitlines()[1]
    assert header[:6] == ["NAME", "READY", "CLEANING", "PARTITIONS", "MAX-DIRTY", "BACKLOGS"], table
    assert row.split()[:2] == ["orders", "True"] and ("idle" in row or "cleaning" in row), table
    assert row.split()[3] == "3", table
    wide = kubectl("get", "lv", "-n", NAMESPACE, "-o", "wide").stdout
    assert "OFFLINE" in wide and "UNCLEANABLE" in wide, wide
    print("\n" + table)
    mark("cleaning state shown")


def test_07_topic_change_is_live_and_cleaner_change_rolls(kubectl: Kubectl, node: Node) -> None:
    uid = pod_uid(kubectl)
    kubectl("patch", "logvolume", "orders", "-n", NAMESPACE, "--type=json", "-p",
            json.dumps([{"op": "replace", "path": "/spec/topics/1/partitions", "value": 3}]))
    wait_for(lambda: partition_status(kubectl, "events-2"), 60, "events-2 created live by the operator")
    assert pod_uid(kubectl) == uid, "a partition count change must not roll the pod"
    kubectl("patch", "cleanerpolicy", "fast", "-n", NAMESPACE, "--type=merge", "-p",
            json.dumps({"spec": {"cleaner": {"log.cleaner.backoff.ms": 250}}}))
    wait_for(lambda: pod_uid(kubectl) not in ("", uid), 90, "the pod rolled after a cleaner change")
    # the new pod itself must serve: the LogVolume's Ready may still be the old pod's until the next poll
    wait_for(lambda: node.is_ready(pod_uid(kubectl)) and condition(lv_json(kubectl), "Ready").get("status") == "True"
             and partition_status(kubectl, "events-2"), 120, "Ready again after the roll, data kept")
    mark("live change + roll")


def test_08_backlog_becomes_a_compaction_job_that_completes(kubectl: Kubectl, node: Node, operator: Operator) -> None:
    tok = token(kubectl)
    # 3000 distinct keys, far more than one offset map of 24 KiB holds (~900), each written twice
    for chunk in range(30):
        produce(tok, "accounts", 0, [{"key": f"b{chunk % 15}-{i}", "value": f"v{chunk}" + "y" * 20}
                                     for i in range(200)])
    cjs = wait_for(lambda: json.loads(kubectl("get", "compactionjobs", "-n", NAMESPACE, "-o", "json").stdout)["items"],
                   150, "a CompactionJob for the backlog on accounts-0" + f"\n{operator.tail(20)}")
    cj = cjs[0]
    assert cj["spec"]["topic"] == "accounts" and cj["spec"]["partition"] == 0
    name = cj["metadata"]["name"]

    def phase() -> str | None:
        obj = json.loads(kubectl("get", "compactionjob", name, "-n", NAMESPACE, "-o", "json").stdout)
        ph = (obj.get("status") or {}).get("phase")
        return obj if ph in ("Succeeded", "Failed") else None

    done = wait_for(phase, 180, f"CompactionJob {name} to finish\n{operator.tail(30)}\n{node.events[-10:]}")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["submissionId"] == f"{name}-a1"
    job = json.loads(kubectl("get", "job", f"{name}-a1", "-n", NAMESPACE, "-o", "json").stdout)
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:2] == ["logkeeper", "spark-compact"] and "--partition" in cmd, cmd
    print("\n" + kubectl("get", "compactionjobs", "-n", NAMESPACE, "-o", "wide").stdout)
    print(done["status"]["message"])
    figures = {k: int(v.replace(",", "")) for k, v in re.findall(r"(bytes_read|bytes_written) ([\d,]+)",
                                                                  done["status"]["message"])}
    assert figures["bytes_written"] < figures["bytes_read"], done["status"]  # the overwritten half went
    mark("compaction job done")


def test_09_invalid_specs_are_rejected_or_reported(kubectl: Kubectl, operator: Operator) -> None:
    bad_schema = LOGVOLUME.replace("name: orders", "name: bad-schema").replace("partitions: 2", "partitions: 0")
    out = kubectl("apply", "-f", "-", stdin=bad_schema, check=False)
    assert out.returncode != 0 and "spec.topics[1].partitions" in out.stderr, out.stderr
    bad_both = LOGVOLUME.replace("name: orders", "name: bad-both").replace(
        "  cleanerPolicyRef: {name: fast}", "  cleanerPolicyRef: {name: fast}\n  cleaner: {log.cleaner.threads: 2}")
    out = kubectl("apply", "-f", "-", stdin=bad_both, check=False)
    assert out.returncode != 0 and "not both" in out.stderr, out.stderr
    # Past the schema: a broker key whose bound only the settings know -> Ready=False naming it.
    bad_operator = LOGVOLUME.replace("name: orders", "name: bad-node").replace(
        "    log.initial.task.delay.ms: 0", "    log.initial.task.delay.ms: 0\n    log.roll.hours: 0")
    kubectl("apply", "-f", "-", stdin=bad_operator)
    ready = wait_for(lambda: (c := condition(lv_json(kubectl, "bad-node"), "Ready")).get("reason") and c, 60,
                     "Ready=False on bad-node")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec", ready
    assert "spec.node.log.roll.hours" in ready["message"], ready
    events = kubectl("get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=bad-node").stdout
    assert "InvalidSpec" in events, events
    assert not exists(kubectl, "statefulset", "bad-node")
    missing = LOGVOLUME.replace("name: orders", "name: no-policy").replace("{name: fast}", "{name: nowhere}")
    kubectl("apply", "-f", "-", stdin=missing)
    ready = wait_for(lambda: (c := condition(lv_json(kubectl, "no-policy"), "Ready")).get("reason") and c, 60,
                     "Ready=False on no-policy")
    assert ready["reason"] == "PolicyNotFound" and "nowhere" in ready["message"], ready
    kubectl("delete", "logvolume", "bad-node", "no-policy", "-n", NAMESPACE)
    mark("invalid specs")


def test_10_delete_cleans_up(kubectl: Kubectl, node: Node) -> None:
    kubectl("delete", "logvolume", "orders", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    for kind, name in (("statefulset", "orders"), ("configmap", "orders-config"), ("service", "orders"),
                       ("secret", "orders-token"), ("pvc", "orders-disk-0"), ("pod", "orders-0")):
        wait_for(lambda k=kind, n=name: not exists(kubectl, k, n), 90, f"{kind}/{name} deleted with its LogVolume")
    wait_for(lambda: not json.loads(kubectl("get", "compactionjobs,jobs", "-n", NAMESPACE, "-o", "json").stdout)[
             "items"],
             60, "CompactionJobs and Jobs deleted with their LogVolume")
    assert exists(kubectl, "pvc", "orders-disk-1"), "deleteClaim: false keeps the claim"
    wait_for(lambda: not node.running, 60, "the sidecar process stopped")
    mark("deleted")
    print(f"\ne2e step times (s since start): {TIMINGS}")
