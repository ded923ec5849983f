"""Kills with the real Spark job (local[2], started by a real sidecar process through the embedded
default runner), where tests/crash/test_offload_sigkill.py's stand-in job cannot go: a real job
is a driver, a JVM in the driver's process group, and pyspark's daemon and Python workers in a
process group of their own, all in the session the sidecar starts the job in.

That file already kills the sidecar after each numbered hand-off step and the job after each of
its driver's steps (planned, written, manifest) with the stand-in, whose plan, rewrite and
manifest code are the real job's; the steps after ``job-finished`` do not depend on which job
wrote the staged files. Here:

- the job SIGKILLed as a whole from a Spark worker right after that worker staged one cleaned
  segment (LOGKEEPER_SPARK_CRASH_AT=group-written: half of the output staged, no manifest): the
  hand-off aborts, nothing staged is used, nothing of the job lives on;
- the sidecar SIGKILLed while its job's Spark stage runs: every process of the job dies with
  it; the restarted sidecar removes the killed attempt's staging directory, and its own job's
  driver is then SIGKILLed mid-run: the hand-off aborts, and its retry runs the job to the end:
  the log is the one after the round.

After every kill the directory, loaded as a restart loads it, holds exactly the log before the
round (or after it) and no temporary file (tests/offload_process.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from logkeeper.cleaner.offload_job import session_groups
from logkeeper.server.process import SidecarProcess
from logkeeper.spark.faults import CRASH_ENV as JOB_CRASH_ENV
from tests.offload_process import (
    Workload,
    assert_consistent_after_kill,
    checkpoint,
    job_pids,
    make_workload,
    partition_status,
    rows_in,
    sidecar_config,
    staging_root,
    temp_files,
    wait_for,
)

TIMEOUT_S = 240.0


def real_job_config(w: Workload, **cleaner: Any) -> dict[str, object]:
    """The embedded default job (no log.cleaner.offload.command) on local[2]; no cleaner thread,
    so that only the hand-off cleans the log."""
    return sidecar_config(w, None, **{"log.cleaner.threads": 0, "log.cleaner.offload.spark.master": "local[2]",
                                      **cleaner})


def running_job(proc: SidecarProcess) -> tuple[dict[str, Any], int]:
    """Wait for the hand-off's job to be in its Spark stage (pyspark's daemon started: a second
    process group in the job's session); its offload status and the driver's pid (the session)."""
    def found() -> tuple[dict[str, Any], int] | None:
        offload = partition_status(proc)["offload"]
        if not offload or offload["state"] != "running":
            return None
        leaders = [pid for pid in job_pids(offload["staging"]) if _sid(pid) == pid]
        if len(leaders) == 1 and len(session_groups(leaders[0])) >= 2:
            return offload, leaders[0]
        return None

    result: tuple[dict[str, Any], int] = wait_for(found, TIMEOUT_S, "the job's Spark stage to start")
    return result


def _sid(pid: int) -> int:
    try:
        return os.getsid(pid)
    except OSError:
        return -1


def wait_for_session_to_end(sid: int) -> None:
    wait_for(lambda: not session_groups(sid), 30, f"every process of the job (session {sid}) to die")


def no_cleaned_files(w: Workload) -> bool:
    return not list((w.log_dir / "t-0").glob("*.cleaned"))


def test_the_real_job_killed_whole_after_staging_a_segment(tmp_path: Path) -> None:
    w = make_workload(tmp_path / "sc", seed=41)
    with SidecarProcess(w.root, real_job_config(w), env={JOB_CRASH_ENV: "group-written"}) as proc:
        _offload, driver = running_job(proc)
        p = wait_for(lambda: (s := partition_status(proc))["offload"]["state"] == "failed" and s, TIMEOUT_S,
                     "the hand-off to fail")
        offload = p["offload"]
        # the whole job died by SIGKILL (not Spark failing the task of a lost worker: exit 1)
        assert offload["reason"] == "the job exited with status -9: spark-compact: job killed after step " \
                                    "group-written (LOGKEEPER_SPARK_CRASH_AT)", offload["reason"]
        assert offload["failures"] == 1
        wait_for_session_to_end(driver)
        assert not Path(offload["staging"]).exists(), "the half-staged output was left behind"
        assert no_cleaned_files(w)
        assert p["cleaning_state"] == "none"  # resumed
        assert checkpoint(w.log_dir) is None
    assert assert_consistent_after_kill(w) == "before"


def test_sidecar_killed_while_the_real_job_runs_then_the_restarted_job_killed(tmp_path: Path) -> None:
    w = make_workload(tmp_path / "sc", seed=42)
    # 1. the sidecar dies while its job's Spark stage runs: the job's processes all die with it
    proc = SidecarProcess(w.root, real_job_config(w)).start()
    try:
        first, driver = running_job(proc)
        assert partition_status(proc)["cleaning_state"] == "paused(1)"
    finally:
        proc.kill()
    wait_for_session_to_end(driver)
    assert assert_consistent_after_kill(w) == "before"
    assert checkpoint(w.log_dir) is None

    # 2. restarted (retries after 1 s): the killed attempt's staging is removed before anything
    # else; this sidecar's own job is SIGKILLed mid-run and the hand-off aborts
    with SidecarProcess(w.root, real_job_config(w, **{"log.cleaner.uncleanable.retry.initial.ms": 1000})) as proc:
        assert not Path(first["staging"]).exists()
        second, driver = running_job(proc)
        assert second["attempt"] != first["attempt"]
        os.kill(driver, signal.SIGKILL)
        p = wait_for(lambda: (s := partition_status(proc))["offload"]["failures"] >= 1 and s, TIMEOUT_S,
                     "the hand-off to fail")
        assert p["offload"]["reason"].startswith("the job exited with status -9"), p["offload"]
        wait_for_session_to_end(driver)
        assert not Path(second["staging"]).exists(), "the killed job's staging directory was left behind"
        assert no_cleaned_files(w)  # the retry's job has not got that far yet: it is still starting

        # 3. the retry runs the job to the end
        def finished() -> bool:
            offload = partition_status(proc)["offload"]
            return offload["state"] == "done" and checkpoint(w.log_dir) == w.end_offset

        wait_for(finished, TIMEOUT_S, "the retried hand-off to finish")
    assert rows_in(w.log_dir, w.seed) == w.after
    assert checkpoint(w.log_dir) == w.end_offset and temp_files(w.log_dir) == []
    assert not staging_root(w.log_dir).exists()
