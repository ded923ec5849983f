"""Fixtures of make e2e: one real one-node cluster for the whole session - cluster.py's control plane
and realnode.py's node (containerd, runc, CNI bridge, kube-scheduler, kubelet, kube-proxy) with our
image imported - and the user's tools (kubectl, helm) pointed at it.

make e2e passes the tools' NAME=PATH files (LOGKEEPER_E2E_TOOLS, LOGKEEPER_E2E_NODE_TOOLS) and the
image's (LOGKEEPER_IMAGE_ENV). Without LOGKEEPER_E2E_TOOLS the tests skip, saying so (pytest run by
hand or by another target); with it, a missing piece or a non-root user fails them: make e2e must
never pass by skipping.

On a failed step the pods' descriptions, events and logs (current and previous containers),
`crictl ps -a` and the tails of every process's log are printed. LOGKEEPER_E2E_KEEP=1 keeps the
work dir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import ControlPlane, read_tools
from .host_lock import host_lock
from .kube import TIMINGS, Helm, Kubectl, diagnostics, mark
from .realnode import NODE_IP, RealNode

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "e2e"  # the LogVolumes'
RELEASE_NAMESPACE = "logkeeper-system"  # the chart's (the operator's Deployment)
SERVICE_CIDR = "10.96.0.0/24"  # cluster.py's --service-cluster-ip-range
# The operator's settings in the steps (helm values), faster than the chart's defaults so the
# steps take seconds, not minutes
OPERATOR_VALUES = f"""
operator:
  watchNamespaces: [{NAMESPACE}]
  settings:
    status.interval.seconds: 2
    compaction.interval.seconds: 2
    retry.delay.seconds: 3
"""
# the one cluster of the session, for the failure hook below
_SESSION: dict[str, Any] = {}


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    tools_file = os.environ.get("LOGKEEPER_E2E_TOOLS")
    if not tools_file:
        pytest.skip("make e2e runs these (it builds the image, the control plane and the node first)")
    if os.geteuid() != 0:
        pytest.fail("make e2e needs root: it runs containerd, runc and kubelet")
    node_file, image_file = os.environ.get("LOGKEEPER_E2E_NODE_TOOLS", ""), os.environ.get("LOGKEEPER_IMAGE_ENV", "")
    for what, path in (("LOGKEEPER_E2E_NODE_TOOLS", node_file), ("LOGKEEPER_IMAGE_ENV", image_file)):
        if not path or not Path(path).is_file():
            pytest.fail(f"{what}={path!r} names no file (make e2e writes it)")
    return {**read_tools(Path(tools_file)), **read_tools(Path(node_file)), **read_tools(Path(image_file))}


def helm_version(binary: str) -> str:
    """helm built with go install reports only its minor version; its module's version is exact."""
    try:
        out = subprocess.run(["go", "version", "-m", binary], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"? ({e})"
    mod = [line.split() for line in out.splitlines() if line.split()[:1] == ["mod"]]
    return f"{mod[0][1]} {mod[0][2]}" if mod else "?"


def print_versions(cp: ControlPlane, node: RealNode, env: dict[str, str], kubectl: Kubectl) -> None:
    archive = Path(env["IMAGE_ARCHIVE"])
    listed = node.ctr("images", "ls", f"name=={env['IMAGE_REF']}").stdout.splitlines()
    versions = {
        **cp.versions(), **node.versions(),
        "helm": helm_version(env["HELM"]),
        "kubectl": json.loads(kubectl("version", "--client", "-o", "json").stdout)["clientVersion"]["gitVersion"],
        "image": f"{env['IMAGE_REF']} digest {env['IMAGE_DIGEST']} config {env.get('IMAGE_ID', '?')}",
        "image archive": f"{archive} ({archive.stat().st_size / 1e6:.0f} MB)",
        "image in containerd": " ".join(listed[-1].split()) if len(listed) > 1 else "?",
    }
    print("\ncomponent versions:")
    for name, version in versions.items():
        print(f"  {name}: {version}")


@pytest.fixture(scope="session")
def cluster(env: dict[str, str]) -> Iterator[tuple[ControlPlane, RealNode]]:
    with host_lock():
        yield from _cluster(env)


def _cluster(env: dict[str, str]) -> Iterator[tuple[ControlPlane, RealNode]]:
    work = Path(tempfile.mkdtemp(prefix="lk-e2e-"))
    # kube-apiserver on the node's IP (the pod network's bridge), published as the kubernetes
    # Service's endpoint: kube-proxy routes 10.96.0.1 to it, so the operator's pod reaches it as in
    # any cluster. The controllers a real node needs beyond cluster.py's: nodelifecycle (lifts the
    # not-ready taint), persistentvolume-binder (claims to the static PVs), root-ca-cert-publisher
    # (the CA a pod verifies the API server with), endpointslice (the sidecar's headless Service),
    # pv-protection (a PV's deletion waits for its finalizer), namespace (a namespace's deletion
    # deletes what it holds, our custom resources too: step 19), resourcequota (a quota's usage,
    # without which quota admission refuses nothing: step 17)
    cp = ControlPlane(work / "cluster", env,
                      extra_controllers=("nodelifecycle", "persistentvolume-binder", "root-ca-cert-publisher",
                                         "endpointslice", "pv-protection", "namespace", "resourcequota"),
                      api_address=NODE_IP, endpoint_reconciler="lease",
                      controller_manager_args=(f"--root-ca-file={work / 'cluster' / 'certs' / 'apiserver.crt'}",),
                      apiserver_args=("--kubelet-preferred-address-types=InternalIP",))
    node = RealNode(work / "node", env, cp, kube_proxy=env["KUBE_PROXY"], service_cidr=SERVICE_CIDR)
    problems: list[str] = []
    try:
        node.make_network()  # before the control plane: kube-apiserver listens on the bridge's address
        cp.start()
        mark("control plane up (etcd, kube-apiserver, kube-controller-manager)")
        node.start([Path(env["IMAGE_ARCHIVE"])])
        mark("node up (containerd, images imported, kube-scheduler, kubelet, kube-proxy)")
        _SESSION.update(cp=cp, node=node)
        yield cp, node
    finally:
        _SESSION.clear()
        try:
            problems = node.stop(delete_network=False)
        finally:
            # kube-apiserver on the bridge's address deletes its lease through it as it stops
            for proc in reversed(cp.procs):
                t = time.monotonic()
                proc.stop()
                node.timings[f"stop {proc.name} s"] = round(time.monotonic() - t, 1)
            cp.stop()
            node.delete_network()
            print("\nnode timings:", json.dumps({k: round(v, 1) for k, v in node.timings.items()}))
        if os.environ.get("LOGKEEPER_E2E_KEEP"):
            print(f"work dir kept: {work}")
        else:
            node.remove_workdir()
            shutil.rmtree(work, ignore_errors=True)
        print("cleanup of the host:", "; ".join(problems) or "clean")
        print("e2e step times (s since start):", json.dumps(TIMINGS))


@pytest.fixture(scope="session")
def kubectl(cluster: tuple[ControlPlane, RealNode]) -> Kubectl:
    return Kubectl(cluster[0].kubeconfig_path)


@pytest.fixture(scope="session")
def helm(env: dict[str, str], cluster: tuple[ControlPlane, RealNode]) -> Helm:
    return Helm(env["HELM"], cluster[0].kubeconfig_path, cluster[1].workdir / "helm")


@pytest.fixture(scope="session")
def node(cluster: tuple[ControlPlane, RealNode]) -> RealNode:
    return cluster[1]


@pytest.fixture(scope="session")
def versions(env: dict[str, str], cluster: tuple[ControlPlane, RealNode], kubectl: Kubectl) -> None:
    print_versions(cluster[0], cluster[1], env, kubectl)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or "cp" not in _SESSION:
        return
    cp, node = _SESSION["cp"], _SESSION["node"]
    try:
        text = diagnostics(Kubectl(cp.kubeconfig_path), (NAMESPACE, RELEASE_NAMESPACE))
        out = node.crictl("ps", "-a", check=False)
        text += f"\n--- crictl ps -a ---\n{out.stdout}{out.stderr}\n{node.log_tails()}\n{cp.log_tails()}"
    except (OSError, subprocess.SubprocessError, AssertionError) as e:
        text = f"(diagnostics failed: {e})"
    report.sections.append((f"e2e diagnostics after {item.name}", text))
