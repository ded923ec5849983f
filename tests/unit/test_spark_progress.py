"""The Spark job's parts that need no Spark (make test): its progress document and how the sidecar's
status shows it, failure.json, the derived session conf, the paths made absolute, the one-line reason."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from logkeeper.cleaner.offload import OffloadStatus
from logkeeper.cleaner.offload_manifest import read_failure, read_failure_doc, write_failure
from logkeeper.cleaner.offload_progress import PROGRESS, Progress, read_progress, write_progress
from logkeeper.spark.command import absolute_paths, one_line
from logkeeper.spark.resources import GIB, MAX_TASK_HEAP, SHUFFLE_PARTITION_BYTES, derived_conf, shuffle_partitions


def test_progress_round_trip_and_unreadable(tmp_path: Path) -> None:
    assert read_progress(tmp_path) == {} and read_progress("") == {}
    write_progress(tmp_path, Progress(stage="keys", tasks_done=3, tasks_total=8, bytes_done=10, bytes_total=80))
    doc = read_progress(tmp_path)
    assert (doc["stage"], doc["tasks_done"], doc["tasks_total"], doc["bytes_done"], doc["bytes_total"]) == \
        ("keys", 3, 8, 10, 80)
    assert doc["updated_ms"] > 0 and not (tmp_path / (PROGRESS + ".tmp")).exists()
    (tmp_path / PROGRESS).write_text("{half")
    assert read_progress(tmp_path) == {}
    write_progress(tmp_path / "gone", Progress())  # best effort: no staging directory, no error


def test_offload_status_shows_the_progress_while_the_job_runs(tmp_path: Path) -> None:
    write_progress(tmp_path, Progress(stage="rewrite", tasks_done=1, tasks_total=6))
    running = OffloadStatus(state="running", staging=str(tmp_path)).to_dict()
    assert running["progress"]["stage"] == "rewrite" and running["progress"]["tasks_total"] == 6
    assert OffloadStatus(state="waiting-for-job", staging=str(tmp_path)).to_dict()["progress"]["tasks_done"] == 1
    assert OffloadStatus(state="done", staging=str(tmp_path)).to_dict()["progress"] == {}
    assert OffloadStatus().to_dict()["progress"] == {}


def test_failure_json_holds_stage_and_traceback(tmp_path: Path) -> None:
    write_failure(tmp_path, "PythonException: RuntimeError: boom", "rewrite", "Traceback ...\nRuntimeError: boom\n")
    doc = read_failure_doc(tmp_path)
    assert doc == {"reason": "PythonException: RuntimeError: boom", "stage": "rewrite",
                   "traceback": "Traceback ...\nRuntimeError: boom\n"}
    assert read_failure(tmp_path) == "PythonException: RuntimeError: boom (stage rewrite)"
    # a cancellation from outside (the operator) has neither: the document stays {"reason"}
    write_failure(tmp_path, "the CompactionJob x was deleted")
    assert json.loads((tmp_path / "failure.json").read_text()) == {"reason": "the CompactionJob x was deleted"}
    assert read_failure(tmp_path) == "the CompactionJob x was deleted"


def test_relative_paths_are_made_absolute_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(log_dir=Path("link/../link"), staging=Path("st"))
    absolute_paths(args)
    # normalised, but the symbolic link kept: the path every node mounts, not where it points here
    assert args.log_dir == tmp_path / "link" and args.staging == tmp_path / "st"
    assert os.path.isabs(args.log_dir)


def test_one_line_reason_of_spark_errors() -> None:
    worker = RuntimeError("An exception was thrown from the Python worker. Please see the stack trace below.\n"
                          "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                          "RuntimeError: the segment 00000000000000000000.log is gone\n SQLSTATE: 38000")
    assert one_line(worker) == "RuntimeError: RuntimeError: the segment 00000000000000000000.log is gone"
    aborted = RuntimeError("An error occurred while calling o95.collectToPython.\n"
                           ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 5.0 "
                           "failed 4 times, most recent failure: Lost task\nat org.apache...")
    assert "Job aborted due to stage failure: Task 0 in stage 5.0" in one_line(aborted)
    assert "\n" not in one_line(aborted)
    assert one_line(ValueError("")) == "ValueError: "


def test_memory_derived_from_the_backlog_and_overridable() -> None:
    local = derived_conf(4 * GIB, "local[2]", {})
    assert local["spark.driver.memory"] == "2048m" and "spark.executor.memory" not in local
    assert local["spark.ui.enabled"] == "true" and local["spark.ui.port"] == "4040"
    assert derived_conf(0, None, {})["spark.driver.memory"] == "1024m"  # local[*]
    assert derived_conf(1 << 40, "local[1]", {})["spark.driver.memory"] == f"{MAX_TASK_HEAP >> 20}m"
    cluster = derived_conf(8 * GIB, "spark://127.0.0.1:7077", {"spark.executor.instances": "4"})
    assert cluster["spark.executor.memory"] == "1536m" and cluster["spark.driver.memory"] == "1056m"
    # the user's conf wins; under spark-submit the driver's JVM is already running: not set
    assert derived_conf(8 * GIB, "local[2]", {"spark.driver.memory": "3g"})["spark.driver.memory"] == "3g"
    assert "spark.driver.memory" not in derived_conf(8 * GIB, None, {}, under_submit=True)
    assert derived_conf(0, "local[2]", {"spark.ui.enabled": "false"})["spark.ui.enabled"] == "false"


def test_keys_aggregate_skips_partial_aggregation_and_splits_by_bytes() -> None:
    """Nearly every key of a chunk is distinct: no map-side aggregate by default (a user's conf
    wins); the aggregate's partitions grow with the bytes so a task's hash map stays in memory."""
    assert derived_conf(GIB, "local[2]", {})["spark.sql.execution.bypassPartialAggregation"] == "true"
    assert derived_conf(GIB, "local[2]", {"spark.sql.execution.bypassPartialAggregation": "false"})[
        "spark.sql.execution.bypassPartialAggregation"] == "false"
    assert shuffle_partitions(0, 2) == 6 and shuffle_partitions(0, 0) == 3
    assert shuffle_partitions(6 * SHUFFLE_PARTITION_BYTES, 2) == 6
    # a whole number of waves: 41 partitions on 2 cores would end with one task running alone
    assert shuffle_partitions(40 * SHUFFLE_PARTITION_BYTES + 1, 2) == 42
    assert shuffle_partitions(40 * SHUFFLE_PARTITION_BYTES + 1, 1) == 41
    assert shuffle_partitions(13 * SHUFFLE_PARTITION_BYTES, 3) == 15


def test_the_planned_partitions_are_not_coalesced() -> None:
    """Adaptive execution would merge the planned partitions into an odd number of tasks (14
    became 5 on 2 cores, the fifth alone at the end): the job sizes them itself, so coalescing
    is off unless the user's conf turns it on."""
    key = "spark.sql.adaptive.coalescePartitions.enabled"
    assert derived_conf(GIB, "local[2]", {})[key] == "false"
    assert derived_conf(GIB, "spark://h:7077", {})[key] == "false"
    assert derived_conf(GIB, "local[2]", {key: "true"})[key] == "true"
