"""The control plane of make e2e: etcd, kube-apiserver and kube-controller-manager (binaries from
e2e/tools.sh), with a generated kubeconfig; realnode.py adds the node.

- etcd: one member, data in the work dir, client and peer URLs on 127.0.0.1 (free ports).
- kube-apiserver: serving cert self-signed into the work dir; one static admin token
  (system:masters); RBAC authorization, so the operator, which runs with its ServiceAccount's
  token, gets exactly the chart's Role; service accounts signed with a key made here.
- kube-controller-manager: only the controllers the test needs - serviceaccount (the default
  ServiceAccount that pods need), deployment and replicaset (the operator's Deployment),
  statefulset (the LogVolume's pod), job (the CompactionJob's Job), garbagecollector (owner
  references: deleting a LogVolume deletes its children), pvc-protection; the node's needs come in
  ``extra_controllers`` (tests/e2e/conftest.py).

Every process is started by this module and stopped by it (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADMIN_TOKEN = "logkeeper-e2e-admin"  # a throwaway token of a throwaway API server on this host
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_tools(env_file: Path) -> dict[str, str]:
    out = {}
    for line in env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        if key:
            out[key] = value
    return out


def kubeconfig(server: str, ca_file: Path, token: str) -> str:
    """The admin's kubeconfig (kubectl, helm, kubelet, the scheduler and the controllers use it)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin", "namespace": "default"}}],
    })


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout_s: float = 15) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_for(self, check: Callable[[], Any], what: str, timeout_s: float = START_TIMEOUT_S,
                 poll_s: float = 0.3, tolerated: tuple[type[BaseException], ...] = (OSError,)) -> None:
        """Poll ``check`` until it is true; fail with the log's tail if the process exits first or
        ``timeout_s`` passes. ``tolerated`` errors of the check count as not yet."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode} before {what}:\n{self.tail()}")
            try:
                if check():
                    return
            except tolerated:
                pass
            time.sleep(poll_s)
        raise RuntimeError(f"{self.name}: no {what} within {timeout_s} s:\n{self.tail()}")


def spawn(procs: list[Proc], workdir: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
    """Start ``argv`` in its own session (stopped by its PID alone), output to workdir/<name>.log,
    and add it to ``procs``."""
    log = workdir / f"{name}.log"
    with log.open("wb") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})}, start_new_session=True)
    proc = Proc(name, p, log)
    procs.append(proc)
    return proc


def log_tails(procs: list[Proc], lines: int = 30) -> str:
    return "\n".join(f"--- {p.name} (last {lines} lines of {p.log}) ---\n{p.tail(lines)}" for p in procs)


def check_alive(procs: list[Proc]) -> None:
    for proc in procs:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")


@dataclass
class ControlPlane:
    workdir: Path
    tools: dict[str, str]
    procs: list[Proc] = field(default_factory=list)
    server: str = ""
    kubeconfig_path: Path = Path()
    ca_file: Path = Path()
    timings: dict[str, float] = field(default_factory=dict)
    # controllers beyond make e2e's: a real node needs nodelifecycle (it lifts the not-ready taint)
    extra_controllers: tuple[str, ...] = ()
    # where kube-apiserver listens and what it advertises (a real node's pods reach it there, through
    # the kubernetes Service: endpoint_reconciler "lease" publishes the address); extra flags of
    # kube-controller-manager (e.g. --root-ca-file for the root-ca-cert-publisher) and kube-apiserver
    api_address: str = "127.0.0.1"
    endpoint_reconciler: str = "none"
    controller_manager_args: tuple[str, ...] = ()
    apiserver_args: tuple[str, ...] = ()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        return spawn(self.procs, self.workdir, name, argv, env)

    def _wait(self, proc: Proc, check: Callable[[], Any], what: str) -> None:
        proc.wait_for(check, what)

    def start(self) -> None:
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        client, peer = free_port(), free_port()
        etcd = self._spawn("etcd", [
            self.tools["ETCD"], "--name", "e2e", "--data-dir", str(w / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer}", "--quota-backend-bytes", str(2 << 30),
            "--log-level", "warn"])

        def etcd_up() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=2) as r:
                return b'"true"' in r.read()

        self._wait(etcd, etcd_up, "health")
        self.timings["etcd_s"] = time.monotonic() - t0

        subprocess.run(["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"], check=True, capture_output=True)
        (w / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,admin-uid,system:masters\n")
        port = free_port()
        self.server = f"https://{self.api_address}:{port}"
        api = self._spawn("kube-apiserver", [
            self.tools["KUBE_APISERVER"],
            f"--etcd-servers=http://127.0.0.1:{client}",
            f"--bind-address={self.api_address}", f"--advertise-address={self.api_address}", f"--secure-port={port}",
            f"--cert-dir={w / 'certs'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={w / 'sa.key'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=false",
            "--profiling=false",
            f"--endpoint-reconciler-type={self.endpoint_reconciler}", *self.apiserver_args,
            "--v=1"])
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def api_ready() -> bool:
            req = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                with urllib.request.urlopen(req, timeout=3, context=insecure) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        self._wait(api, api_ready, "/readyz")
        self.timings["apiserver_s"] = time.monotonic() - t0
        # kube-apiserver's self-signed serving cert file holds its CA after the cert: clients verify
        # against it (no insecure-skip-tls-verify, so no warning on every request)
        self.ca_file = w / "certs" / "apiserver.crt"
        self.kubeconfig_path = w / "admin.kubeconfig"
        self.kubeconfig_path.write_text(kubeconfig(self.server, self.ca_file, ADMIN_TOKEN))
        self._spawn("kube-controller-manager", [
            self.tools["KUBE_CONTROLLER_MANAGER"],
            f"--kubeconfig={self.kubeconfig_path}",
            f"--authentication-kubeconfig={self.kubeconfig_path}",
            f"--authorization-kubeconfig={self.kubeconfig_path}",
            "--controllers=" + ",".join(["serviceaccount", "deployment", "replicaset", "statefulset", "job",
                                         "garbagecollector", "pvc-protection", *self.extra_controllers]),
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--use-service-account-credentials=false", "--authentication-skip-lookup=true",
            "--concurrent-statefulset-syncs=2", "--concurrent-job-syncs=2", *self.controller_manager_args,
            "--v=1"])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def versions(self) -> dict[str, str]:
        out = {}
        for name, key in (("etcd", "ETCD"), ("kube-apiserver", "KUBE_APISERVER"),
                          ("kube-controller-manager", "KUBE_CONTROLLER_MANAGER")):
            try:
                run = subprocess.run([self.tools[key], "--version"], capture_output=True, text=True, timeout=20,
                                     check=False)
                out[name] = ((run.stdout or run.stderr).strip().splitlines() or ["?"])[0]
            except (OSError, subprocess.SubprocessError) as e:
                out[name] = f"? ({e})"
        return out

    def log_tails(self, lines: int = 30) -> str:
        return log_tails(self.procs, lines)
