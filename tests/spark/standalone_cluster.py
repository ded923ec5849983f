"""A real Spark standalone cluster for tests and the benchmark: a master and N workers, each a JVM
started with pyspark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``: the classes ``sbin/start-master.sh`` runs, whose scripts pyspark's wheel
does not ship), bound to 127.0.0.1, each in a session of its own, and stopped by PID: SIGTERM to
each daemon (a worker kills its executors on the way out), SIGKILL after a grace period, then
SIGKILL to whatever is left in their sessions (an executor whose worker was killed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from logkeeper.cleaner.offload_job import session_groups

START_TIMEOUT_S = 90.0
STOP_GRACE_S = 10.0
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "2g",
                 env: dict[str, str] | None = None) -> None:
        self.root, self.n_workers, self.cores, self.memory = Path(root), workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.extra_env = dict(env or {})

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOG_DIR": str(self.root / "logs"), "PYSPARK_PYTHON": sys.executable,
                    "SPARK_NO_DAEMONIZE": "1"})
        env.update(self.extra_env)
        return env

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.out", "wb")  # noqa: SIM115 - the child holds it for its life
        try:
            self.procs.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                               stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                                               cwd=self.root, start_new_session=True))
        finally:
            log.close()

    def start(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui_port)])
            for i in range(self.n_workers):
                work = self.root / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                            "--cores", str(self.cores), "--memory", self.memory,
                                            "--work-dir", str(work), "--webui-port", str(free_port()), self.url])
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            doc: dict[str, object] = json.loads(r.read())
            return doc

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        last: object = None
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {p.returncode} while starting: "
                                       f"see {self.root}/*.out")
            try:
                last = self.state().get("aliveworkers")
                if last == self.n_workers:
                    return
            except OSError:
                pass
            except ValueError:
                # a master UI just bound answered /json/ with its HTML page once (a CI run of
                # e2f980a; the master's log showed nothing wrong): not ready yet, ask again
                last = "no JSON state yet"
            time.sleep(0.5)
        raise TimeoutError(f"{last} of {self.n_workers} workers alive after {START_TIMEOUT_S} s: see {self.root}/*.out")

    def executor_pids(self) -> list[int]:
        """The executors' JVMs (children of the workers, in their sessions)."""
        sessions = {p.pid for p in self.procs[1:]}
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if EXECUTOR_CLASS.encode() in cmdline and os.getsid(int(entry.name)) in sessions:
                    out.append(int(entry.name))
            except OSError:
                continue
        return sorted(out)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for p in self.procs:  # anything left in the daemons' sessions (executors, their Python workers)
            for group in session_groups(p.pid):
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
