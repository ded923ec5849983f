"""make node-smoke: our image's sidecar as a Pod on a real node (issue 18, point 2's groundwork).

tests/e2e/cluster.py's control plane (etcd, kube-apiserver on the node's IP, kube-controller-manager)
plus tests/e2e/realnode.py's node (containerd, runc, CNI bridge, kube-scheduler, kubelet,
kube-proxy); images
imported with ``ctr images import`` (no registry). The Pod is what the operator renders for a
LogVolume (builders.statefulset and .service, render.render_config's ConfigMap, the token
Secret, builders.pvcs' claim, bound by the persistentvolume-binder to a static local PV the test
makes), in a namespace that enforces Pod Security "restricted". Checked first: a pod reaches the API server through the
kubernetes Service with its ServiceAccount token and the projected CA (as the operator will
in-cluster), and ``kubectl logs`` reads its output. Then: the scheduler binds it,
kubelet runs it, the readiness probe (/readyz) passes, records produced through its API on the
pod IP are read back and their segments are on the PV, the container runs as uid 10001 with a read-only root, no
capabilities and the runtime's seccomp profile (from the runtime's own spec), ``kubectl get pods
-A`` shows it Running; the container's process is SIGKILLed and kubelet restarts it to Ready
with every record still there; the pod is deleted and the StatefulSet's new pod has them too.

Needs root and make node-smoke's tools (LOGKEEPER_E2E_TOOLS, LOGKEEPER_E2E_NODE_TOOLS) and
image (LOGKEEPER_IMAGE_ENV, .cache/image/image.env); skipped otherwise. LOGKEEPER_E2E_KEEP=1 keeps
the work dir.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import ControlPlane, read_tools
from tests.e2e.realnode import NODE_IP, NODE_NAME, POD_SUBNET, RealNode

NAMESPACE = "node-smoke"
LV = "smoke"
POD = "smoke-0"  # builders.sidecar_pod_name(LV): the StatefulSet's one pod
SIDECAR_PORT = 8080  # the LogVolume's default spec.sidecar.port
SERVICE_CIDR = "10.96.0.0/24"  # cluster.py's --service-cluster-ip-range
KUBECTL = str(Path(sys.executable).parent / "kubectl")
TIMINGS: dict[str, float] = {}
_T0 = time.monotonic()


def mark(step: str) -> None:
    TIMINGS[step] = round(time.monotonic() - _T0, 1)
    print(f"[{TIMINGS[step]:7.1f} s] {step}", flush=True)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a transient API error: poll again
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    tools_file, node_file = os.environ.get("LOGKEEPER_E2E_TOOLS"), os.environ.get("LOGKEEPER_E2E_NODE_TOOLS")
    if not tools_file or not node_file:
        pytest.skip("make node-smoke runs this (e2e/tools.sh with LOGKEEPER_E2E_NODE=1 builds the node first)")
    if os.geteuid() != 0:
        pytest.skip("a real node needs root")
    image_env = Path(os.environ.get("LOGKEEPER_IMAGE_ENV", "")) if os.environ.get("LOGKEEPER_IMAGE_ENV") else None
    if image_env is None or not image_env.is_file():
        pytest.skip("no image: make image builds it (.cache/image/image.env)")
    return {**read_tools(Path(tools_file)), **read_tools(Path(node_file)), **read_tools(image_env)}


@pytest.fixture(scope="module")
def cluster(env: dict[str, str]) -> Iterator[tuple[ControlPlane, RealNode]]:
    work = Path(tempfile.mkdtemp(prefix="lk-node-"))
    # kube-apiserver on the node's IP (the pod network's bridge), published as the kubernetes
    # Service's endpoint; kube-proxy routes 10.96.0.1 to it, so pods reach it as in any cluster
    cp = ControlPlane(work / "cluster", env,
                      extra_controllers=("nodelifecycle", "persistentvolume-binder", "root-ca-cert-publisher"),
                      api_address=NODE_IP, endpoint_reconciler="lease",
                      controller_manager_args=(f"--root-ca-file={work / 'cluster' / 'certs' / 'apiserver.crt'}",),
                      apiserver_args=("--kubelet-preferred-address-types=InternalIP",))
    node = RealNode(work / "node", env, cp, kube_proxy=env["KUBE_PROXY"], service_cidr=SERVICE_CIDR)
    problems: list[str] = []
    try:
        node.make_network()
        cp.start()
        mark("control plane up")
        node.start([Path(env["IMAGE_ARCHIVE"])])
        mark("node up (containerd, images imported, scheduler, kubelet)")
        yield cp, node
    finally:
        try:
            problems = node.stop(delete_network=False)
        finally:
            for proc in reversed(cp.procs):
                t = time.monotonic()
                proc.stop()
                node.timings[f"stop {proc.name} s"] = round(time.monotonic() - t, 1)
            cp.stop()
            node.delete_network()
            print("node timings:", json.dumps({k: round(v, 1) for k, v in node.timings.items()}))
        mark("stopped")
        if os.environ.get("LOGKEEPER_E2E_KEEP"):
            print(f"\nwork dir kept: {work}")
        else:
            node.remove_workdir()
            shutil.rmtree(work, ignore_errors=True)
        print("cleanup:", "; ".join(problems) or "clean")
        print("node-smoke timings (s since start):", json.dumps(TIMINGS))


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, env=self.env,
                             timeout=120, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


def local_pv(name: str, path: Path, size: str) -> dict[str, Any]:
    """A static local PersistentVolume on the node (what an administrator or a static provisioner
    makes): the directory belongs to the sidecar's uid, as kubelet applies no fsGroup to it."""
    path.mkdir(parents=True)
    os.chown(path, 10001, 10001)
    path.chmod(0o750)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "local": {"path": str(path)},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}]}]}}}}


def sidecar_manifests(image: str, token: str) -> list[dict[str, Any]]:
    """The operator's own objects for a one-volume LogVolume: ConfigMap, token Secret, the claim,
    the headless Service and the StatefulSet, with our image (pull Never); no owner (no LogVolume)."""
    from logkeeper_operator import builders, render
    from logkeeper_operator.spec import parse_logvolume

    spec = parse_logvolume({"volumes": [{"id": "disk-0", "size": "1Gi"}],
                            "topics": [{"name": "accounts", "partitions": 1}],
                            "sidecar": {"image": image, "imagePullPolicy": "Never"}}, default_image=image)
    owner = builders.owner_reference("LogVolume", LV, "00000000-0000-0000-0000-000000000000")
    objs = [builders.configmap(LV, NAMESPACE, owner, render.render_config(spec, {})),
            builders.secret(LV, NAMESPACE, owner, token), *builders.pvcs(LV, NAMESPACE, owner, spec)]
    objs.append(builders.service(LV, NAMESPACE, owner, spec))
    objs.append(builders.statefulset(LV, NAMESPACE, owner, spec, render.restart_hash(spec, {})))
    if builders.sidecar_pod_name(LV) != POD:
        raise AssertionError(f"the StatefulSet's pod is {builders.sidecar_pod_name(LV)}, not {POD}")
    for o in objs:
        o["metadata"].pop("ownerReferences", None)
    return objs


API_PROBE = """
import ssl, urllib.error, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=d + "ca.crt")
print(urllib.request.urlopen("https://10.96.0.1/version", context=ctx, timeout=10).read().decode())
req = urllib.request.Request("https://10.96.0.1/api/v1/namespaces/%s/pods",
                             headers={"Authorization": "Bearer " + open(d + "token").read()})
try:
    urllib.request.urlopen(req, context=ctx, timeout=10)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"""


def api_probe_pod(image: str) -> dict[str, Any]:
    """Our image's Python, as uid 10001 under "restricted", asks the API server through the Service."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api-probe", "namespace": NAMESPACE},
            "spec": {"restartPolicy": "Never",
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "probe", "image": image, "imagePullPolicy": "Never",
                                     "command": ["/opt/logkeeper/bin/python", "-c", API_PROBE % NAMESPACE],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "readOnlyRootFilesystem": True,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def pod_phase(kubectl: Kubectl, name: str) -> str:
    return str(kubectl.json("get", "pod", "-n", NAMESPACE, name)["status"].get("phase", ""))


def builders_sts_name() -> str:
    from logkeeper_operator.names import statefulset_name

    return str(statefulset_name(LV))


class Sidecar:
    """The sidecar's HTTP API (sidecar/logkeeper/server/http_api.py) on the pod's IP, with its token."""

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

    def ensure_topic(self, topic: str) -> None:
        status, body = self.call("POST", "/v1/topics", {"name": topic, "partitions": 1})
        assert status in (200, 201, 409), (status, body)

    def produce(self, topic: str, records: list[dict[str, str]]) -> None:
        status, body = self.call("POST", f"/v1/topics/{topic}/partitions/0/records", {"records": records})
        assert status == 200, (status, body)

    def values(self, topic: str) -> list[str]:
        status, body = self.call("GET", f"/v1/topics/{topic}/partitions/0/records?offset=0&encoding=utf-8")
        assert status == 200, (status, body)
        return [r["value"] for r in body["records"]]


def diagnostics(kubectl: Kubectl, node: RealNode) -> str:
    parts = []
    for args in (("get", "pods", "-A", "-o", "wide"), ("describe", "pod", "-n", NAMESPACE, POD),
                 ("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"),
                 ("describe", "node", NODE_NAME)):
        out = kubectl(*args, check=False)
        parts.append(f"--- kubectl {' '.join(args)} ---\n{out.stdout}{out.stderr}")
    out = node.crictl("ps", "-a", check=False)
    parts.append(f"--- crictl ps -a ---\n{out.stdout}{out.stderr}")
    parts.append(node.log_tails())
    return "\n".join(parts)


def pod_status(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", "-n", NAMESPACE, POD)["status"])


def sidecar_ready(kubectl: Kubectl, min_restarts: int = 0) -> dict[str, Any] | None:
    st = pod_status(kubectl)
    for c in st.get("containerStatuses", []):
        if c["name"] == "sidecar" and c.get("ready") and c.get("restartCount", 0) >= min_restarts:
            return dict(c)
    return None


def test_sidecar_pod_on_a_real_node(cluster: tuple[ControlPlane, RealNode], env: dict[str, str]) -> None:
    cp, node = cluster
    kubectl = Kubectl(cp.kubeconfig_path)
    print("\ncomponent versions:")
    for name, version in {**node.versions(), "image": f"{env['IMAGE_REF']} {env['IMAGE_DIGEST']}"}.items():
        print(f"  {name}: {version}")
    try:
        wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                             for c in kubectl.json("get", "node", NODE_NAME)["status"]["conditions"]),
                 120, f"node {NODE_NAME} Ready")
        mark("node Ready")

        kubectl("create", "namespace", NAMESPACE)
        kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest")
        wait_for(lambda: kubectl("get", "serviceaccount", "default", "-n", NAMESPACE, check=False).returncode == 0,
                 60, "the namespace's default ServiceAccount")
        # the namespace enforces "restricted": a pod that asks for nothing is refused
        bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": NAMESPACE},
                "spec": {"containers": [{"name": "c", "image": env["IMAGE_REF"]}]}}
        refused = kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(bare), check=False)
        assert refused.returncode != 0 and "restricted" in refused.stderr, refused.stderr + refused.stdout

        # a pod reaches the API server the way the operator will: the kubernetes Service (kube-proxy),
        # TLS checked against the projected CA, its ServiceAccount's token (no rights: 403 naming it)
        probe = api_probe_pod(env["IMAGE_REF"])
        kubectl("apply", "-f", "-", stdin=json.dumps(probe))
        wait_for(lambda: pod_phase(kubectl, "api-probe") in ("Succeeded", "Failed"), 120, "the API probe pod to end")
        logs = kubectl("logs", "-n", NAMESPACE, "api-probe").stdout
        assert pod_phase(kubectl, "api-probe") == "Succeeded", logs
        assert '"gitVersion"' in logs and f"system:serviceaccount:{NAMESPACE}:default" in logs, logs
        kubectl("delete", "pod", "-n", NAMESPACE, "api-probe", "--wait=true", "--timeout=60s")
        mark("a pod reached the API server through the kubernetes Service with its token (kubectl logs read it)")

        pv = local_pv("smoke-disk-0", node.workdir / "volumes" / "disk-0", "1Gi")
        token = secrets.token_hex(16)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([pv, *sidecar_manifests(env["IMAGE_REF"], token)]))
        mark("local PV, claim, ConfigMap, Secret, Service and StatefulSet created")
        ready = wait_for(lambda: sidecar_ready(kubectl), 240, "the sidecar container Ready (/readyz)", every_s=2)
        mark("sidecar Ready")
        assert not node.kernel_tunables_changed(), f"kubelet changed them again: {node.kernel_tunables_changed()}"
        st = pod_status(kubectl)
        assert st["phase"] == "Running", st
        assert st.get("podIP", "").startswith(POD_SUBNET.rsplit(".", 1)[0] + "."), st.get("podIP")
        pods = kubectl("get", "pods", "-A", "-o", "wide").stdout
        print(pods)
        assert POD in pods and "Running" in pods

        claim = kubectl.json("get", "pvc", "-n", NAMESPACE, "-l", f"logkeeper.io/logvolume={LV}")["items"][0]
        assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == "smoke-disk-0", claim["status"]

        # records produced through the sidecar's API on the pod IP land on the local PV
        api = Sidecar(f"http://{st['podIP']}:{SIDECAR_PORT}", token)
        api.ensure_topic("accounts")
        values = [f"value-{i}-{secrets.token_hex(4)}" for i in range(5)]
        api.produce("accounts", [{"key": f"k{i}", "value": v} for i, v in enumerate(values)])
        assert api.values("accounts") == values
        assert any((node.workdir / "volumes" / "disk-0").rglob("*.log")), "no segment on the PV"
        mark("records produced and read back through the pod IP; segments on the local PV")

        # what the runtime really runs: the OCI spec containerd gave runc
        cid = ready["containerID"].split("://", 1)[1]
        info = json.loads(node.crictl("inspect", cid).stdout)["info"]
        runtime_spec = info["runtimeSpec"]
        proc = runtime_spec["process"]
        assert proc["user"]["uid"] == 10001 and proc["user"]["gid"] == 10001, proc["user"]
        assert runtime_spec["root"].get("readonly") is True, runtime_spec["root"]
        caps = proc.get("capabilities", {})
        assert not any(caps.get(k) for k in ("bounding", "effective", "permitted", "inheritable", "ambient")), caps
        assert proc.get("noNewPrivileges") is True
        assert runtime_spec["linux"].get("seccomp", {}).get("defaultAction") == "SCMP_ACT_ERRNO"
        status_file = Path(f"/proc/{info['pid']}/status").read_text()
        uids = next(line for line in status_file.splitlines() if line.startswith("Uid:")).split()[1:]
        # pid is the container's init (tini); its real and effective uid are the pod's
        assert uids[0] == "10001" and uids[1] == "10001", uids
        mark("runtime spec checked (uid 10001, read-only root, no capabilities, seccomp)")

        # kill the container's process: kubelet restarts the container and it becomes Ready again
        os.kill(int(info["pid"]), signal.SIGKILL)
        mark(f"container {cid[:12]} (pid {info['pid']}) SIGKILLed")
        restarted = wait_for(lambda: sidecar_ready(kubectl, min_restarts=1), 240,
                             "kubelet to restart the sidecar and /readyz to pass again", every_s=2)
        assert restarted["containerID"] != ready["containerID"]
        mark(f"restarted by kubelet (restartCount {restarted['restartCount']}) and Ready")
        assert api.values("accounts") == values, "records lost across the container restart"
        mark("the records are all there after the restart")
        print(kubectl("get", "pods", "-A", "-o", "wide").stdout)

        # the pod deleted: the StatefulSet makes a new one, on the same claim, with the same records
        uid = kubectl.json("get", "pod", "-n", NAMESPACE, POD)["metadata"]["uid"]
        kubectl("delete", "pod", "-n", NAMESPACE, POD, "--wait=true", "--timeout=90s")
        mark("pod deleted")
        wait_for(lambda: kubectl.json("get", "pod", "-n", NAMESPACE, POD)["metadata"]["uid"] != uid
                 and sidecar_ready(kubectl), 240, "the StatefulSet's new pod Ready", every_s=2)
        st = pod_status(kubectl)
        api = Sidecar(f"http://{st['podIP']}:{SIDECAR_PORT}", token)
        assert api.values("accounts") == values, "records lost across the pod's deletion"
        mark("a new pod from the StatefulSet, Ready, with every record")
        print(kubectl("get", "pods", "-A", "-o", "wide").stdout)

        kubectl("delete", "statefulset", "-n", NAMESPACE, builders_sts_name(), "--wait=true", "--timeout=90s")
        wait_for(lambda: kubectl("get", "pod", "-n", NAMESPACE, POD, check=False).returncode != 0, 120,
                 "the pod gone after the StatefulSet's deletion", every_s=2)
        mark("StatefulSet and pod deleted")
        assert not node.kernel_tunables_changed(), f"kubelet changed them again: {node.kernel_tunables_changed()}"
        node.check_alive()
    except BaseException:
        print(diagnostics(kubectl, node))
        raise


OPERATOR_NS = "logkeeper-system"
LV_NS = "orders-ns"
LOGVOLUME = f"""
apiVersion: logkeeper.io/v1alpha1
kind: LogVolume
metadata: {{name: orders, namespace: {LV_NS}}}
spec:
  volumes:
    - {{id: disk-0, size: 1Gi, deleteClaim: true}}
    - {{id: disk-1, size: 1Gi, deleteClaim: true}}
  topics:
    - {{name: accounts, partitions: 1, configs: {{cleanup.policy: [compact]}}}}
  sidecar: {{imagePullPolicy: Never}}
"""


def test_operator_in_cluster(cluster: tuple[ControlPlane, RealNode], env: dict[str, str]) -> None:
    """As the user: kubectl apply -f crds/, helm install (the operator a Deployment of our image
    under the chart's ServiceAccount), kubectl apply a LogVolume on static local PVs; the operator
    pod, in-cluster, makes the sidecar's StatefulSet and reports Ready; records go through the
    sidecar; deleting the LogVolume and helm uninstall leave no pod."""
    import base64

    cp, node = cluster
    kubectl = Kubectl(cp.kubeconfig_path)
    repo = Path(__file__).resolve().parents[2]
    helm_home = str(node.workdir / "helm")
    helm_env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig_path), "HELM_CACHE_HOME": helm_home,
                "HELM_CONFIG_HOME": helm_home, "HELM_DATA_HOME": helm_home}

    def helm(*args: str) -> str:
        out = subprocess.run([env["HELM"], *args], capture_output=True, text=True, env=helm_env, timeout=300,
                             check=False)
        assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stderr}{out.stdout}"
        return out.stdout

    try:
        kubectl("apply", "-f", str(repo / "crds"))
        for ns in (OPERATOR_NS, LV_NS):
            kubectl("create", "namespace", ns)
            kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
        wait_for(lambda: all(kubectl("get", "crd", f"{n}.logkeeper.io",
                                     check=False).returncode == 0 for n in ("logvolumes", "cleanerpolicies")),
                 60, "the CRDs")
        helm("install", "logkeeper", str(repo / "charts" / "logkeeper"), "-n", OPERATOR_NS,
             "--set", f"operator.watchNamespaces={{{LV_NS}}}", "--wait", "--timeout", "180s")
        mark("helm install: the operator's Deployment is available (in-cluster, our image)")
        pvs = [local_pv(f"orders-pv-{i}", node.workdir / "volumes" / f"orders-{i}", "1Gi") for i in range(2)]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(pvs))
        kubectl("apply", "-f", "-", stdin=LOGVOLUME)
        wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                             kubectl.json("get", "logvolume", "orders", "-n", LV_NS).get("status", {})
                             .get("conditions", [])), 240, "the LogVolume Ready", every_s=2)
        mark("LogVolume Ready (the in-cluster operator made the StatefulSet and read the sidecar's status)")
        lv_table = kubectl("get", "logvolumes", "-A").stdout
        pods = kubectl("get", "pods", "-A", "-o", "wide").stdout
        print(lv_table, pods, sep="\n")
        assert "orders" in lv_table and "True" in lv_table
        assert pods.count("Running") >= 2, pods
        sidecar = kubectl.json("get", "pod", "orders-0", "-n", LV_NS)
        secret = kubectl.json("get", "secret", "orders-token", "-n", LV_NS)
        api = Sidecar(f"http://{sidecar['status']['podIP']}:{SIDECAR_PORT}",
                      base64.b64decode(secret["data"]["token"]).decode())
        values = [f"v{i}-{secrets.token_hex(4)}" for i in range(3)]
        api.produce("accounts", [{"key": f"k{i}", "value": v} for i, v in enumerate(values)])
        assert api.values("accounts") == values
        mark("records produced and read back through the operator's sidecar")

        kubectl("delete", "logvolume", "orders", "-n", LV_NS, "--wait=true", "--timeout=120s")
        wait_for(lambda: not kubectl.json("get", "pods", "-n", LV_NS)["items"], 120, "the sidecar pod gone",
                 every_s=2)
        helm("uninstall", "logkeeper", "-n", OPERATOR_NS, "--wait", "--timeout", "120s")
        wait_for(lambda: not kubectl.json("get", "pods", "-n", OPERATOR_NS)["items"], 120, "the operator pod gone",
                 every_s=2)
        mark("LogVolume deleted and helm uninstall: no pod left")
    except BaseException:
        for args in (("get", "pods", "-A", "-o", "wide"), ("get", "logvolumes", "-A", "-o", "yaml"),
                     ("get", "events", "-A", "--sort-by=.lastTimestamp"),
                     ("logs", "-n", OPERATOR_NS, "deploy/logkeeper", "--tail", "60")):
            out = kubectl(*args, check=False)
            print(f"--- kubectl {' '.join(args)} ---\n{out.stdout}{out.stderr}")
        print(node.log_tails())
        raise
