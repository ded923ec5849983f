"""The Spark hand-off with a real sidecar process, killed at each step (cleaner/offload.py's numbered
steps, LOGKEEPER_OFFLOAD_CRASH_AT) and while its job runs; the job killed at each of its steps
(LOGKEEPER_SPARK_CRASH_AT). The job is tests/spark_double.py (the job's own plan, rewrite and
manifest code, its Spark stage a dict); tests/spark/test_spark_crash.py kills the real Spark job
(its JVM and workers, which this stand-in does not have; make spark).

After a kill of the sidecar, the directory loaded as a restart loads it holds exactly the log
before the round or exactly the log after it (never a mix; the checkpoint moves only with the
segments) and no temporary file; the restarted sidecar removes the staging directory of the
killed attempt before anything else, finishes the compaction and the log is the one after the
round. After a kill of the job, the sidecar aborts the hand-off: status ``failed`` with the
reason, staging directory removed, no ``.cleaned`` file, cleaning resumed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper.cleaner.offload import CRASH_ENV
from logkeeper.server.process import SidecarProcess
from logkeeper.spark.faults import CRASH_ENV as JOB_CRASH_ENV
from logkeeper.tools.verify import verify_path
from tests import spark_double
from tests.offload_process import (
    Workload,
    assert_consistent_after_kill,
    checkpoint,
    make_workload,
    partition_status,
    rows_in,
    sidecar_config,
    staging_root,
    start_tolerating_death,
    temp_files,
    wait_for,
    wait_for_exit,
)

SIDECAR_STEPS = ["paused", "job-finished", "validated", "placed", "written", "swapped", "old-deleted", "renamed",
                 "checkpointed", "resumed"]
EXPECTED = {"paused": "before", "job-finished": "before", "validated": "before", "placed": "before",
            "written": "before", "swapped": "after", "old-deleted": "after", "renamed": "after",
            "checkpointed": "after", "resumed": "after"}
TIMEOUT_S = 120.0


def config_for(w: Workload) -> dict[str, object]:
    return sidecar_config(w, spark_double.command())


def finish_after_restart(w: Workload) -> None:
    """Restart the sidecar: no staged output of the killed attempt survives its start; it cleans
    the log to the state after the round and moves the checkpoint there."""
    killed_attempts = list(staging_root(w.log_dir).glob("*/*"))
    with SidecarProcess(w.root, config_for(w)) as proc:
        assert not any(a.exists() for a in killed_attempts)

        def finished() -> bool:
            p = partition_status(proc)
            offload = p["offload"] or {}
            return p["cleaner_checkpoint"] == w.end_offset and offload.get("state") in (None, "done")

        wait_for(finished, TIMEOUT_S, "the restarted sidecar to finish the compaction")
    assert rows_in(w.log_dir, w.seed) == w.after
    assert checkpoint(w.log_dir) == w.end_offset and temp_files(w.log_dir) == []


@pytest.mark.parametrize("step", SIDECAR_STEPS)
def test_sidecar_killed_at_each_step(tmp_path: Path, step: str) -> None:
    w = make_workload(tmp_path / "sc", seed=21)
    proc = SidecarProcess(w.root, config_for(w), env={CRASH_ENV: step})
    if start_tolerating_death(proc):
        code = wait_for_exit(proc, TIMEOUT_S)
    else:
        code = proc.proc.returncode if proc.proc is not None else -9
    assert code == -9, proc.output()[-3000:]
    assert f"killed after hand-off step {step}" in proc.output()
    assert assert_consistent_after_kill(w) == EXPECTED[step]
    finish_after_restart(w)


def test_sidecar_killed_while_its_job_runs(tmp_path: Path) -> None:
    """The job dies with the sidecar (no orphan writes on); the status showed the partition paused."""
    w = make_workload(tmp_path / "sc", seed=22)
    pid_file = tmp_path / "job.pid"
    env = {spark_double.PID_FILE_ENV: str(pid_file), spark_double.HANG_ENV: "120"}
    proc = SidecarProcess(w.root, config_for(w), env=env).start()
    wait_for(pid_file.exists, TIMEOUT_S, "the job to start")
    job_pid = int(wait_for(lambda: pid_file.read_text().strip(), 10, "the job's pid"))
    p = wait_for(lambda: (s := partition_status(proc))["offload"] and s, 10, "the offload status")
    assert p["cleaning_state"] == "paused(1)" and p["offload"]["state"] == "running"
    staging = Path(p["offload"]["staging"])
    assert staging.parent.parent == staging_root(w.log_dir) and p["offload"]["job_args"][0] == "spark-compact"
    proc.kill()
    wait_for(lambda: not alive(job_pid), 10, "the job to die with the sidecar")
    assert assert_consistent_after_kill(w) == "before"
    finish_after_restart(w)
    assert not staging.exists()


@pytest.mark.parametrize("step", ["planned", "written", "manifest"])
def test_job_killed_at_each_step_aborts_the_hand_off(tmp_path: Path, step: str) -> None:
    w = make_workload(tmp_path / "sc", seed=23)
    with SidecarProcess(w.root, config_for(w), env={JOB_CRASH_ENV: step}) as proc:
        p = wait_for(lambda: (s := partition_status(proc))["offload"] and s["offload"]["state"] == "failed" and s,
                     TIMEOUT_S, "the hand-off to fail")
        offload = p["offload"]
        assert offload["reason"].startswith("the job exited with status 137: ")
        assert f"killed after step {step}" in offload["reason"]
        assert offload["failures"] == 1 and offload["retry_at_ms"] >= offload["finished_ms"] + 600_000
        assert p["cleaning_state"] in ("none", "in-progress")  # resumed; a cleaner thread may take it
        assert not Path(offload["staging"]).exists()
        # the job writes only into staging; a .cleaned file in the log dir is a cleaner thread's
        # round, which took the resumed partition up: it swaps in or is removed when that ends
        wait_for(lambda: not list((w.log_dir / "t-0").glob("*.cleaned")), TIMEOUT_S,
                 "no .cleaned file in the partition once the cleaner thread's round ended")
    # A cleaner thread may have cleaned the resumed partition since, in passes as big as its map
    # (the reason for the hand-off): the log lies between the one before and the one after a
    # full round - nothing the round keeps is gone, nothing new is there.
    rows = rows_in(w.log_dir, w.seed)
    kept = set(rows)
    assert kept <= set(w.before) and set(w.after) <= kept
    assert verify_path(w.log_dir).ok


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

