"""make node-smoke: our image's sidecar as a Pod on a real node (issue 18, point 2's groundwork).

tests/e2e/cluster.py's control plane (etcd, kube-apiserver, kube-controller-manager) plus
tests/e2e/realnode.py's node (containerd, runc, CNI bridge, kube-scheduler, kubelet); images
imported with ``ctr images import`` (no registry). The Pod is what the operator renders for a
LogVolume (builders.statefulset's pod template, render.render_config's ConfigMap, the token
Secret) with its claim replaced by an emptyDir (no volume provisioner yet), in a namespace that
enforces Pod Security "restricted". Checked: the scheduler binds it, kubelet runs it, the
readiness probe (/readyz) passes, the container runs as uid 10001 with a read-only root, no
capabilities and the runtime's seccomp profile (from the runtime's own spec), ``kubectl get pods
-A`` shows it Running; the container's process is SIGKILLed and kubelet restarts it to Ready.

Needs root and make node-smoke's tools (LOGKEEPER_E2E_TOOLS, LOGKEEPER_E2E_NODE_TOOLS) and
image (LOGKEEPER_IMAGE_ENV, .cache/image/image.env); skipped otherwise. LOGKEEPER_E2E_KEEP=1 keeps
the work dir.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import ControlPlane, read_tools
from tests.e2e.realnode import NODE_NAME, POD_SUBNET, RealNode

NAMESPACE = "node-smoke"
LV = "smoke"
POD = "smoke-sidecar"
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
    cp = ControlPlane(work / "cluster", env, extra_controllers=("nodelifecycle",))
    node = RealNode(work / "node", env, cp)
    problems: list[str] = []
    try:
        cp.start()
        mark("control plane up")
        node.start([Path(env["IMAGE_ARCHIVE"])])
        mark("node up (containerd, images imported, scheduler, kubelet)")
        yield cp, node
    finally:
        try:
            problems = node.stop()
        finally:
            cp.stop()
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


def sidecar_manifests(image: str) -> list[dict[str, Any]]:
    """The operator's own objects for a one-volume LogVolume: ConfigMap, token Secret and the
    StatefulSet's pod template as a Pod, its claim an emptyDir and its image ours (pull Never)."""
    from logkeeper_operator import builders, render
    from logkeeper_operator.spec import parse_logvolume

    spec = parse_logvolume({"volumes": [{"id": "disk-0", "size": "1Gi"}],
                            "topics": [{"name": "accounts", "partitions": 1}],
                            "sidecar": {"image": image, "imagePullPolicy": "Never"}}, default_image=image)
    owner = builders.owner_reference("LogVolume", LV, "00000000-0000-0000-0000-000000000000")
    objs = [builders.configmap(LV, NAMESPACE, owner, render.render_config(spec, {})),
            builders.secret(LV, NAMESPACE, owner, secrets.token_hex(16))]
    sts = builders.statefulset(LV, NAMESPACE, owner, spec, render.restart_hash(spec, {}))
    template = copy.deepcopy(sts["spec"]["template"])
    pod_spec = template["spec"]
    pod_spec["volumes"] = [{"name": v["name"], "emptyDir": {"sizeLimit": "1Gi"}} if "persistentVolumeClaim" in v
                           else v for v in pod_spec["volumes"]]
    objs.append({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": POD, "namespace": NAMESPACE, "labels": template["metadata"]["labels"]},
                 "spec": pod_spec})
    for o in objs:
        o["metadata"].pop("ownerReferences", None)
    return objs


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

        manifests = sidecar_manifests(env["IMAGE_REF"])
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
        mark("sidecar Pod created")
        ready = wait_for(lambda: sidecar_ready(kubectl), 240, "the sidecar container Ready (/readyz)", every_s=2)
        mark("sidecar Ready")
        st = pod_status(kubectl)
        assert st["phase"] == "Running", st
        assert st.get("podIP", "").startswith(POD_SUBNET.rsplit(".", 1)[0] + "."), st.get("podIP")
        pods = kubectl("get", "pods", "-A", "-o", "wide").stdout
        print(pods)
        assert POD in pods and "Running" in pods

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
        print(kubectl("get", "pods", "-A", "-o", "wide").stdout)

        kubectl("delete", "pod", "-n", NAMESPACE, POD, "--wait=true", "--timeout=90s")
        mark("pod deleted")
        node.check_alive()
    except BaseException:
        print(diagnostics(kubectl, node))
        raise
