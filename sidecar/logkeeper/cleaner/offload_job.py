"""Running the Spark compaction job for a hand-off (offload.py): its arguments and its process.

``JobRequest.args()`` is the job's command line after the program::

    spark-compact --log-dir D --partition TOPIC-P --staging S [--master URL] --now-ms N
        --log-start-offset N --first-dirty-offset N --end-offset N --config KEY=VALUE ...

(spark/command.py reads it). The round is fixed by the sidecar: the job plans nothing on its own
that the sidecar would not check afterwards.

``SubprocessRunner`` runs ``<command> <args>``, where the command is
``log.cleaner.offload.command`` split as a shell would, or, when empty, this interpreter running
``logkeeper`` (``python -m logkeeper.cli``): a local Spark in a subprocess. The job gets a
session (and so a process group) of its own, its standard output and error go to
``<staging>/job.log``, PYSPARK_PYTHON defaults to this interpreter and SPARK_LOCAL_IP to
127.0.0.1 for a local master. It is bounded three ways:

- ``timeout_s``: past it every process group of the job's session gets SIGTERM, then SIGKILL
  after KILL_GRACE_S: the driver's group holds the driver and its JVM, but pyspark's daemon puts
  itself and the Python workers in a group of their own (setpgid) in the same session, so the
  groups are found by session id in /proc (Linux; elsewhere only the driver's group is
  signalled). The same at the end of every run, also a successful one: nothing of the job
  outlives its hand-off (the kill waits, at most SESSION_KILL_BOUND_S, for the session to empty);
- ``cancelled`` (the sidecar shutting down): the same;
- the sidecar's death: the child asks the kernel for SIGKILL when its parent thread dies
  (PR_SET_PDEATHSIG), a PySpark JVM exits when its driver's pipe closes, and pyspark's daemon
  kills its workers and exits when the JVM's pipe closes.

The run succeeds when the job exits 0; otherwise ``OffloadError`` carries the reason the job
left in ``failure.json`` (cleaner/offload_manifest.py), else the last line of its output.

``ExternalRunner`` (``log.cleaner.offload.runner: external``) starts nothing: someone else runs
the same arguments (on Kubernetes, the operator's CompactionJob, which reads them from the
hand-off in /v1/status, state ``waiting-for-job``) with the staging directory reachable at the
same path, and the runner waits, as long as ``timeout_s``, for the job's ``manifest.json``
(success) or ``failure.json`` (its reason) to appear there.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..log.names import TopicPartition
from .offload_manifest import MANIFEST, read_failure

_LOG = logging.getLogger("logkeeper.cleaner.offload")

KILL_GRACE_S = 5.0
SESSION_KILL_BOUND_S = 10.0
TAIL_LINES = 30
POLL_S = 0.2
JOB_LOG = "job.log"
PR_SET_PDEATHSIG = 1


class OffloadError(Exception):
    """A hand-off that must be aborted (the reason goes into the status)."""


@dataclass(frozen=True)
class JobRequest:
    log_dir: Path
    topic_partition: TopicPartition
    staging: Path
    now_ms: int
    log_start_offset: int
    first_dirty_offset: int
    end_offset: int
    config: dict[str, int]
    master: str  # "" for none (the command's own, e.g. spark-submit's)

    def args(self) -> list[str]:
        """``logkeeper spark-compact`` arguments for this round."""
        out = ["spark-compact", "--log-dir", str(self.log_dir), "--partition", str(self.topic_partition),
               "--staging", str(self.staging)]
        if self.master:
            out += ["--master", self.master]
        out += ["--now-ms", str(self.now_ms), "--log-start-offset", str(self.log_start_offset),
                "--first-dirty-offset", str(self.first_dirty_offset), "--end-offset", str(self.end_offset)]
        for key, value in sorted(self.config.items()):
            out += ["--config", f"{key}={value}"]
        return out


class JobRunner(Protocol):
    # True when another party starts the job (the status then says waiting-for-job)
    waits_for_job: bool

    def run(self, request: JobRequest, timeout_s: float, cancelled: threading.Event) -> None:
        """Return once the job succeeded; raise OffloadError otherwise."""


def default_command() -> list[str]:
    return [sys.executable, "-m", "logkeeper.cli"]


def command_from_setting(value: str) -> list[str]:
    """``log.cleaner.offload.command`` as a program and its arguments (empty: ``default_command``)."""
    return shlex.split(value) if value.strip() else default_command()


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it dies (Linux only)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def session_groups(sid: int) -> set[int]:
    """The process groups of the live (not zombie) processes of session ``sid``, from /proc
    (empty where there is no /proc)."""
    groups: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()  # state ppid pgrp session ...
        if len(fields) > 3 and fields[0] != b"Z" and int(fields[3]) == sid:
            groups.add(int(fields[2]))
    return groups


def _signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for group in groups:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to every process group of the job's session (it is the session leader), SIGKILL
    after KILL_GRACE_S; waits for the job, then (bounded) until no process of its session lives."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 30.0)):
        groups = session_groups(proc.pid)
        if proc.poll() is None:
            groups.add(proc.pid)
        if not groups:
            break
        _signal_groups(groups, sig)
        try:
            proc.wait(wait_s)
            if sig == signal.SIGKILL:
                break
        except subprocess.TimeoutExpired:
            continue
    try:  # the leader may be gone while others of its group live on (no /proc to find them)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + SESSION_KILL_BOUND_S
    while (groups := session_groups(proc.pid)) and time.monotonic() < deadline:
        _signal_groups(groups, signal.SIGKILL)
        time.sleep(0.02)
    if groups:
        _LOG.warning("processes of the job (session %d, groups %s) outlived SIGKILL for %g s", proc.pid,
                     sorted(groups), SESSION_KILL_BOUND_S)


def tail(path: Path, n: int) -> list[str]:
    """The last ``n`` non-blank lines of a file (none when unreadable)."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return lines[-n:]


@dataclass
class SubprocessRunner:
    command: Sequence[str] = field(default_factory=default_command)
    env: dict[str, str] = field(default_factory=dict)
    waits_for_job: bool = False

    def run(self, request: JobRequest, timeout_s: float, cancelled: threading.Event) -> None:
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        if request.master.startswith("local"):
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.update(self.env)
        log_path = request.staging / JOB_LOG
        with open(log_path, "wb") as out:
            try:
                proc = subprocess.Popen([*self.command, *request.args()], stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                        preexec_fn=_die_with_parent)
            except OSError as e:
                raise OffloadError(f"cannot start the job {self.command[0]!r}: {e}") from None
            deadline = time.monotonic() + timeout_s
            try:
                while True:
                    try:
                        code = proc.wait(POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if cancelled.is_set():
                        raise OffloadError("the hand-off was cancelled (the sidecar is shutting down)")
                    if time.monotonic() >= deadline:
                        raise OffloadError(f"the job timed out after {timeout_s:g} s")
            finally:
                kill_group(proc)  # also when it exited: no worker of it may outlive the hand-off
        if code != 0:
            lines = tail(log_path, TAIL_LINES)
            _LOG.warning("the job of %s exited with status %d; the end of its output:\n%s", request.topic_partition,
                         code, "\n".join(lines))
            reason = read_failure(request.staging) or (lines[-1][:500] if lines else "no output")
            raise OffloadError(f"the job exited with status {code}: {reason}")


@dataclass
class ExternalRunner:
    waits_for_job: bool = True

    def run(self, request: JobRequest, timeout_s: float, cancelled: threading.Event) -> None:
        deadline = time.monotonic() + timeout_s
        manifest = request.staging / MANIFEST
        while not manifest.exists():
            reason = read_failure(request.staging)
            if reason is not None:
                raise OffloadError(f"the job failed: {reason}")
            if time.monotonic() >= deadline:
                raise OffloadError(f"no job result in {request.staging} within {timeout_s:g} s")
            if cancelled.wait(POLL_S):
                raise OffloadError("the hand-off was cancelled (the sidecar is shutting down)")


def runner_from_config(runner: str, command: str) -> JobRunner:
    """The runner ``log.cleaner.offload.runner`` names (``command``: log.cleaner.offload.command)."""
    return ExternalRunner() if runner == "external" else SubprocessRunner(command_from_setting(command))
