"""The Spark job on a real standalone cluster (standalone_cluster.py: a master and two workers of one
core each, from pyspark's launcher, on 127.0.0.1, stopped by PID at the end even on failure), run
as a user runs it: ``logkeeper spark-compact --master spark://...`` in a subprocess, with
--log-dir and --staging relative to the directory it runs in (the executors run in the workers'
work directories: a path not made absolute before Spark sees it is not found there).

- the staged files are byte-identical to the in-process cleaner's on the same directory, and the
  progress document ends at ``done`` with every chunk and group counted;
- an executor SIGKILLed while the keys stage runs: Spark starts another, re-runs the lost tasks,
  and the output is still byte-identical;
- a task that fails every attempt: exit 1, failure.json with the stage (``rewrite``), the
  one-line reason and the whole traceback, which holds the worker's Python traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logkeeper.cleaner.offload_manifest import read_manifest
from logkeeper.cleaner.offload_progress import read_progress
from logkeeper.spark.faults import CHUNK_DELAY_ENV, CRASH_ENV
from tests.spark.standalone_cluster import StandaloneCluster
from tests.spark_helpers import (
    NOW_MS,
    TP,
    clean_log_dir,
    config,
    output_files,
    staged_files,
    workload_copies,
)

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores=1, memory="2g") as c:
        yield c


def job_cmd(cluster: StandaloneCluster, seed: int, chunk_bytes: int, *conf: str) -> list[str]:
    c = config(seed)
    settings = {"segment.bytes": c.segment_bytes, "segment.index.bytes": c.max_index_size,
                "index.interval.bytes": c.index_interval_bytes, "delete.retention.ms": c.delete_retention_ms,
                "producer.id.expiration.ms": 86_400_000}
    # relative paths, as typed in the directory the job runs in
    args = [sys.executable, "-m", "logkeeper.cli", "spark-compact", "--log-dir", "spark", "--partition", str(TP),
            "--staging", "staging", "--master", cluster.url, "--now-ms", str(NOW_MS),
            "--chunk-bytes", str(chunk_bytes), "--conf", "spark.executor.memory=1g",
            "--conf", "spark.ui.enabled=false"]
    args += [f"--config={k}={v}" for k, v in sorted(settings.items())]
    for item in conf:
        args += ["--conf", item]
    return args


def workload(tmp_path: Path, seed: int, steps: int = 400) -> tuple[Path, Path]:
    """The job's copy (tmp_path/spark) and the in-process cleaner's partition after one round."""
    ref, _job = workload_copies(tmp_path, seed, "in-process", "spark", steps=steps)
    clean_log_dir(ref, config(seed), None)
    return tmp_path, ref / TP.dir_name


def start_job(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full_env = {**os.environ, "NUMBA_CACHE_DIR": str(REPO / ".cache" / "numba"), **(env or {})}
    with open(cwd / "job.out", "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)


def finish(proc: subprocess.Popen[bytes], cwd: Path) -> tuple[int, str]:
    try:
        rc = proc.wait(JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return rc, (cwd / "job.out").read_text(errors="replace")


def assert_identical(cwd: Path, reference: Path) -> None:
    manifest = read_manifest(cwd / "staging")
    expected = output_files(reference, (o.base_offset for o in manifest.outputs))
    got = staged_files(cwd / "staging")
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], f"{name} differs from the in-process cleaner's"
    assert manifest.spark["master"].startswith("spark://127.0.0.1:")
    # the partition directory the executors read: the absolute path of the relative --log-dir
    assert manifest.partition_dir == str(cwd / "spark" / TP.dir_name)


def test_relative_paths_on_a_standalone_cluster_byte_identical(cluster: StandaloneCluster, tmp_path: Path) -> None:
    cwd, reference = workload(tmp_path, seed=3)
    rc, out = finish(start_job(job_cmd(cluster, 3, 3000), cwd), cwd)
    assert rc == 0, out
    assert_identical(cwd, reference)
    progress = read_progress(cwd / "staging")
    assert progress["stage"] == "done", progress
    assert progress["tasks_done"] == progress["tasks_total"] > 0  # the groups, the last stage counted
    assert progress["bytes_done"] == progress["bytes_total"] > 0 and progress["bytes_written"] > 0


def test_an_executor_sigkilled_mid_job_still_byte_identical(cluster: StandaloneCluster, tmp_path: Path) -> None:
    cwd, reference = workload(tmp_path, seed=4)
    # small chunks, each slowed down: the keys stage lasts long enough to kill an executor in it
    proc = start_job(job_cmd(cluster, 4, 1500, f"spark.executorEnv.{CHUNK_DELAY_ENV}=300"), cwd)
    killed = None
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            progress = read_progress(cwd / "staging")
            executors = cluster.executor_pids()
            # the keys stage running: tasks on the executors, not all chunks read (the count steps
            # a whole task at a time, so "some but not half done" can be skipped over)
            if progress.get("stage") == "keys" and progress["tasks_done"] < progress["tasks_total"] \
                    and any(st["tasks_active"] > 0 for st in progress["spark_stages"]) and executors:
                killed = executors[0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        rc, out = finish(proc, cwd)
    assert killed is not None, f"the keys stage was never seen running with an executor: {out[-2000:]}"
    assert rc == 0, out
    assert_identical(cwd, reference)
    assert killed not in cluster.executor_pids()


def test_a_failing_task_leaves_the_stage_and_the_whole_traceback(cluster: StandaloneCluster, tmp_path: Path) -> None:
    cwd, _reference = workload(tmp_path, seed=5, steps=100)
    proc = start_job(job_cmd(cluster, 5, 64 << 20, f"spark.executorEnv.{CRASH_ENV}=group-written-raise",
                             "spark.task.maxFailures=2"), cwd)
    rc, out = finish(proc, cwd)
    assert rc == 1, out
    doc = json.loads((cwd / "staging" / "failure.json").read_text())
    assert doc["stage"] == "rewrite", doc
    assert doc["reason"] == "PythonException: RuntimeError: spark-compact: task failed after step group-written " \
                            "(LOGKEEPER_SPARK_CRASH_AT)", doc["reason"]
    # the driver's traceback, and inside Spark's error the worker's own
    assert "Traceback (most recent call last)" in doc["traceback"]
    assert "maybe_fail_task" in doc["traceback"]
    assert "task failed after step group-written (LOGKEEPER_SPARK_CRASH_AT)" in doc["traceback"]
    assert "(stage rewrite)" in out
    assert not (cwd / "staging" / "manifest.json").exists()
