"""cleaner/offload_job.py's SubprocessRunner: the job's process gets the request's arguments and
environment, its failure is reported in its own words, and a timeout, a cancel or the sidecar's
death leaves none of its processes behind (its process group, and the other groups of its session,
as a PySpark driver's Python workers make)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from logkeeper.cleaner.offload_job import JobRequest, OffloadError, SubprocessRunner, command_from_setting
from tests.spark_helpers import NOW_MS, TP


def request_in(tmp_path: Path) -> JobRequest:
    staging = tmp_path / "staging"
    staging.mkdir()
    return JobRequest(tmp_path, TP, staging, NOW_MS, 0, 0, 10, {"segment.bytes": 100}, "local[2]")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def sh(script: str) -> list[str]:
    """A job program: ``sh -c script`` (the job's arguments become $0, $1 ...)."""
    return ["sh", "-c", script]


def test_the_runner_passes_the_arguments_and_the_environment(tmp_path: Path) -> None:
    request = request_in(tmp_path)
    out = tmp_path / "seen"
    SubprocessRunner(sh(f'echo "$0 $* $PYSPARK_PYTHON $SPARK_LOCAL_IP" > {out}')).run(request, 10, threading.Event())
    assert out.read_text().split() == [*request.args(), sys.executable, "127.0.0.1"]
    assert command_from_setting("") == [sys.executable, "-m", "logkeeper.cli"]
    assert command_from_setting("spark-submit --master 'k8s://https://x:6443' /a/submit.py") == \
        ["spark-submit", "--master", "k8s://https://x:6443", "/a/submit.py"]
    no_master = JobRequest(tmp_path, TP, tmp_path, 1, 0, 0, 10, {}, "")
    assert "--master" not in no_master.args()


def test_the_runner_reports_the_jobs_failure(tmp_path: Path) -> None:
    request = request_in(tmp_path)
    with pytest.raises(OffloadError, match=r"status 3: last words"):
        SubprocessRunner(sh("echo first; echo last words; exit 3")).run(request, 10, threading.Event())
    (request.staging / "failure.json").write_text(json.dumps({"reason": "PlanError: no dirty section"}))
    with pytest.raises(OffloadError, match=r"status 1: PlanError: no dirty section"):
        SubprocessRunner(sh("exit 1")).run(request, 10, threading.Event())
    with pytest.raises(OffloadError, match="cannot start the job"):
        SubprocessRunner([str(tmp_path / "no-such-program")]).run(request, 10, threading.Event())


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_timeout_and_cancel_kill_the_jobs_whole_process_group(tmp_path: Path, how: str) -> None:
    request = request_in(tmp_path)
    pids = tmp_path / "pids"
    # a job that ignores SIGTERM and has a child of its own
    script = f"trap '' TERM; sleep 300 & echo $$ $! > {pids}; wait"
    cancelled = threading.Event()
    timeout_s = 1.0 if how == "timeout" else 120.0
    if how == "cancel":
        threading.Timer(1.0, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(OffloadError, match="timed out after 1 s" if how == "timeout" else "cancelled"):
        SubprocessRunner(sh(script)).run(request, timeout_s, cancelled)
    assert time.monotonic() - started < 30
    for pid in map(int, pids.read_text().split()):
        assert not alive(pid), f"process {pid} of the job outlived the hand-off"


@pytest.mark.parametrize("how", ["timeout", "exit"])
def test_the_runner_kills_the_jobs_other_process_groups_too(tmp_path: Path, how: str) -> None:
    """A PySpark driver's Python workers are not in its process group: pyspark's daemon makes a
    group of its own (setpgid) in the job's session. A timeout, and the end of a job that left
    such a process behind, kill every process of the job's session (regression: only the
    driver's group was killed; the workers lived on until they noticed the JVM was gone)."""
    request = request_in(tmp_path)
    pids = tmp_path / "pids"
    # the job: a child in a process group of its own (as pyspark's daemon), then wait or exit
    script = ("import os, subprocess, sys, time; "
              "c = subprocess.Popen(['sleep', '300'], process_group=0); "
              f"open({str(pids)!r} + '.tmp', 'w').write(str(c.pid)); os.rename({str(pids)!r} + '.tmp', {str(pids)!r}); "
              + ("time.sleep(300)" if how == "timeout" else "sys.exit(0)"))
    job = [sys.executable, "-c", script]
    if how == "timeout":
        with pytest.raises(OffloadError, match="timed out"):
            SubprocessRunner(job).run(request, 2.0, threading.Event())
    else:
        SubprocessRunner(job).run(request, 60, threading.Event())
    child = int(pids.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("a process of the job in another process group of its session outlived the hand-off")


def test_a_job_dies_with_the_thread_that_started_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: the sidecar's death (here: the starting thread's) kills the job."""
    pid_file = tmp_path / "pid"

    def start() -> None:
        import subprocess

        from logkeeper.cleaner import offload_job

        subprocess.Popen(["sh", "-c", f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 300"],
                         start_new_session=True, preexec_fn=offload_job._die_with_parent)
        deadline = time.monotonic() + 20
        while not pid_file.exists() and time.monotonic() < deadline:  # the job runs: now the thread ends
            time.sleep(0.02)

    t = threading.Thread(target=start)
    t.start()
    t.join()
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the job outlived the thread that started it")
