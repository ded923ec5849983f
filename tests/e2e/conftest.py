"""Fixtures of make e2e: the control plane (cluster.py), the node (node.py), the operator as a
local process with the chart's ServiceAccount token. The binaries come from e2e/tools.sh, whose
NAME=PATH file make e2e passes in LOGKEEPER_E2E_TOOLS; without it these tests are skipped (they
are not part of make test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import ControlPlane, kubeconfig, read_tools

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
NAMESPACE = "e2e"
RELEASE_NAMESPACE = "logkeeper-system"


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a transient API error: try again
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


class Kubectl:
    def __init__(self, kubeconfig_path: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig_path)}
        self.bin = str(VENV_BIN / "kubectl")

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([self.bin, *args], input=stdin, capture_output=True, text=True, env=self.env,
                             timeout=120, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out


@pytest.fixture(scope="session")
def tools() -> dict[str, str]:
    env_file = os.environ.get("LOGKEEPER_E2E_TOOLS")
    if not env_file:
        pytest.skip("make e2e runs these (it builds the control plane first: e2e/tools.sh)")
    return read_tools(Path(env_file))


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="logkeeper-e2e-"))
    yield d
    if os.environ.get("LOGKEEPER_E2E_KEEP"):
        print(f"\ne2e work dir kept: {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane(tools: dict[str, str], workdir: Path) -> Iterator[ControlPlane]:
    cp = ControlPlane(workdir / "cluster", tools)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return Kubectl(control_plane.kubeconfig_path)


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> Any:
    from kubernetes import config

    return config.new_client_from_config(str(control_plane.kubeconfig_path))


@pytest.fixture(scope="session")
def helm(tools: dict[str, str], control_plane: ControlPlane,
         workdir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig_path), "HELM_CACHE_HOME": str(workdir / "helm"),
           "HELM_CONFIG_HOME": str(workdir / "helm"), "HELM_DATA_HOME": str(workdir / "helm")}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([tools["HELM"], *args], capture_output=True, text=True, env=env, timeout=300, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out

    return run


class Operator:
    """``python -m logkeeper_operator --namespace e2e`` as a local process."""

    def __init__(self, kubeconfig_path: Path, log: Path) -> None:
        self.kubeconfig_path = kubeconfig_path
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig_path), "LOGKEEPER_IMAGE": "logkeeper:e2e",
               "LOGKEEPER_OPERATOR_STATUS_INTERVAL_SECONDS": "2", "LOGKEEPER_OPERATOR_COMPACTION_INTERVAL_SECONDS": "2",
               "LOGKEEPER_OPERATOR_RETRY_DELAY_SECONDS": "3", "NUMBA_CACHE_DIR": str(REPO / ".cache" / "numba")}
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "logkeeper_operator", "--namespace", NAMESPACE],
                                         stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def service_account_kubeconfig(kubectl: Kubectl, server: str, ca_file: Path, path: Path) -> Path:
    """A kubeconfig with the chart's ServiceAccount token: the operator gets the chart's RBAC, no more."""
    token = kubectl("create", "token", "logkeeper", "-n", RELEASE_NAMESPACE, "--duration", "2h").stdout.strip()
    path.write_text(kubeconfig(server, ca_file, token, user="logkeeper-operator", namespace=NAMESPACE))
    return path
