"""The node of make e2e: there is no kubelet, so this plays one for the test's namespace.

For each pod that appears (made by the StatefulSet or Job controller from the operator's
objects), it does what a kubelet would, with local processes and directories:
- volumes: a ConfigMap or Secret volume is written out as files; a PersistentVolumeClaim is a
  directory per claim that outlives the pod (as a volume does); an emptyDir is a fresh directory;
- the container: its command runs as a local process, paths under its mounts mapped to those
  directories. The sidecar (``logkeeper sidecar --config ...``) gets the overrides a pod's network
  and mounts would make moot: LOGKEEPER_LISTEN=127.0.0.1:<containerPort> and LOGKEEPER_LOG_DIRS /
  LOGKEEPER_TOKEN_FILE mapped to the local directories;
- the pod's status: Running with podIP 127.0.0.1, Ready once the container's readiness probe
  (httpGet) answers 200; for a Job's pod, Succeeded or Failed with the exit code when it ends.
A pod that goes away (a roll, a deletion) has its process stopped with SIGTERM.

``logkeeper spark-compact`` (the CompactionJob's command, the arguments the sidecar's hand-off
asked for) runs as is: a real local Spark job, reading and writing the claim's directory.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Running:
    uid: str
    name: str
    proc: subprocess.Popen[bytes]
    port: int | None
    ready_path: str | None
    job: bool
    ready: bool = False
    log: Path = Path()


class Node:
    def __init__(self, api: client.ApiClient, namespace: str, workdir: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.workdir = workdir
        self.running: dict[str, Running] = {}  # pod uid -> process
        self.finished: set[str] = set()
        self.events: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="e2e-node", daemon=True)
        self.errors: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for r in list(self.running.values()):
            self._kill(r)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # keep playing the node; the test reads self.errors
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(0.5)

    def is_ready(self, uid: str) -> bool:
        """Whether the pod ``uid`` runs here and answered its readiness probe."""
        r = self.running.get(uid)
        return r is not None and r.ready

    def note(self, text: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")

    # ------------------------------------------------------------------ one pass
    def sync(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace).items
        live = {p.metadata.uid: p for p in pods if p.metadata.deletion_timestamp is None}
        for uid, r in list(self.running.items()):
            if uid not in live:
                self.note(f"pod {r.name} gone: stopping its process")
                self._kill(r)
                del self.running[uid]
        for uid, pod in live.items():
            if uid in self.finished:
                continue
            r = self.running.get(uid)
            if r is None:
                self._start_pod(pod)
                continue
            code = r.proc.poll()
            if r.job and code is not None:
                self._finish_job(pod, r, code)
            elif code is not None and uid not in self.finished:
                self.note(f"pod {r.name}: process exited {code}: {_last_line(r.log)}")
                self._set_status(pod, "Failed", ready=False, exit_code=code)
                self.finished.add(uid)
                del self.running[uid]
            elif not r.job and not r.ready and self._probe(r):
                r.ready = True
                self._set_status(pod, "Running", ready=True)
                self.note(f"pod {r.name}: ready")
        for pod in pods:  # a kubelet confirms graceful deletions
            if pod.metadata.deletion_timestamp is not None and pod.spec.node_name:
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)

    # ------------------------------------------------------------------ volumes and processes
    def _volumes(self, pod: Any, podroot: Path) -> dict[str, Path]:
        out = {}
        for v in pod.spec.volumes or []:
            if v.config_map is not None:
                d = podroot / "volumes" / v.name
                d.mkdir(parents=True, exist_ok=True)
                cm = self.core.read_namespaced_config_map(v.config_map.name, self.namespace)
                for key, text in (cm.data or {}).items():
                    (d / key).write_text(text)
                out[v.name] = d
            elif v.secret is not None:
                d = podroot / "volumes" / v.name
                d.mkdir(parents=True, exist_ok=True)
                sec = self.core.read_namespaced_secret(v.secret.secret_name, self.namespace)
                for key, b64 in (sec.data or {}).items():
                    (d / key).write_bytes(base64.b64decode(b64))
                out[v.name] = d
            elif v.persistent_volume_claim is not None:
                d = self.workdir / "claims" / v.persistent_volume_claim.claim_name
                d.mkdir(parents=True, exist_ok=True)
                out[v.name] = d
            elif v.empty_dir is not None:
                d = podroot / "volumes" / v.name
                d.mkdir(parents=True, exist_ok=True)
                out[v.name] = d
        return out

    def _mapper(self, mounts: list[tuple[str, Path]]):  # type: ignore[no-untyped-def]
        ordered = sorted(mounts, key=lambda m: -len(m[0]))
        node_root = str(self.workdir).rstrip("/") + "/"

        def mapped(path: str) -> str:
            # Without mount namespaces a sidecar reports its directories by their node paths, and
            # the operator passes those on to the Job: already on the node, they stay as they are
            # (a pod's /tmp mount must not capture /tmp/<work dir>/...).
            if path.startswith(node_root):
                return path
            for prefix, local in ordered:
                if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                    return str(local) + path[len(prefix.rstrip("/")):]
            return path

        return mapped

    def _start_pod(self, pod: Any) -> None:
        name, uid = pod.metadata.name, pod.metadata.uid
        podroot = self.workdir / "pods" / f"{name}-{uid[:8]}"
        volumes = self._volumes(pod, podroot)
        c = pod.spec.containers[0]
        mounts = [(m.mount_path, volumes[m.name]) for m in c.volume_mounts or [] if m.name in volumes]
        mapped = self._mapper(mounts)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGKEEPER_")}
        for e in c.env or []:
            if e.value is not None:
                env[e.name] = mapped(e.value) if e.value.startswith("/") else e.value
        argv = [*(c.command or ["logkeeper"]), *(c.args or [])]
        argv = [mapped(a) if a.startswith("/") else a for a in argv]
        job = any(o.kind == "Job" for o in pod.metadata.owner_references or [])
        port = None
        if argv[:2] == ["logkeeper", "sidecar"]:
            port = c.ports[0].container_port
            config = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
            env["LOGKEEPER_LISTEN"] = f"127.0.0.1:{port}"
            env["LOGKEEPER_LOG_DIRS"] = ",".join(mapped(d) for d in config["node"]["log.dirs"])
            env["LOGKEEPER_TOKEN_FILE"] = mapped(config["sidecar"]["token.file"])
        if argv[0] == "logkeeper":
            argv[0] = str(VENV_BIN / "logkeeper")
        env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
        log = self.workdir / "pods" / f"{name}-{uid[:8]}.log"
        podroot.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=podroot, start_new_session=True)
        probe = c.readiness_probe.http_get.path if c.readiness_probe and c.readiness_probe.http_get else None
        self.running[uid] = Running(uid, name, proc, port, probe, job, log=log)
        self.note(f"pod {name}: started {' '.join(argv[:3])} ... (pid {proc.pid})")
        self._set_status(pod, "Running", ready=False)

    def _probe(self, r: Running) -> bool:
        if r.port is None or r.ready_path is None:
            return True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{r.port}{r.ready_path}", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def _finish_job(self, pod: Any, r: Running, code: int) -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        self.note(f"pod {r.name}: job process exited {code} -> {phase}")
        self._set_status(pod, phase, ready=False, exit_code=code)
        self.finished.add(r.uid)
        del self.running[r.uid]

    @staticmethod
    def _kill(r: Running) -> None:
        if r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGTERM)
            try:
                r.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(r.proc.pid, signal.SIGKILL)
                r.proc.wait(10)

    # ------------------------------------------------------------------ status
    def _set_status(self, pod: Any, phase: str, ready: bool, exit_code: int | None = None) -> None:
        now = _now()
        containers = []
        for c in pod.spec.containers:
            if exit_code is not None:
                state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                        "startedAt": now, "finishedAt": now}}
            else:
                state = {"running": {"startedAt": now}}
            containers.append({"name": c.name, "image": c.image, "imageID": "", "ready": ready, "restartCount": 0,
                               "started": exit_code is None, "state": state})
        status = "True" if ready else "False"
        body = {"status": {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": pod.status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ") if pod.status.start_time else now,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                           {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
                           {"type": "Ready", "status": status, "lastTransitionTime": now}],
            "containerStatuses": containers}}
        self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, body)

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir / "pods", ignore_errors=True)
