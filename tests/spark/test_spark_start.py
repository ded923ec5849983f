"""A Spark JVM that exits before it starts: the job's failure reason (failure.json, then the
sidecar's status and the CompactionJob's) carries the JVM's own words, not only pyspark's "Java
gateway process exited"; the JVM's output still reaches the job's standard error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from logkeeper.cleaner.offload_manifest import read_failure_doc
from logkeeper.cleaner.offload_progress import STARTING
from tests.spark_helpers import NOW_MS, TP, build_log


def test_a_bad_driver_memory_is_named_in_the_failure(tmp_path: Path) -> None:
    build_log(tmp_path / "src", 3, steps=30)
    staging = tmp_path / "staging"
    logkeeper = Path(sys.executable).parent / "logkeeper"
    done = subprocess.run(
        [str(logkeeper), "spark-compact", "--log-dir", str(tmp_path / "src" / "data"), "--partition", str(TP),
         "--staging", str(staging), "--now-ms", str(NOW_MS), "--master", "local[1]",
         "--conf", "spark.driver.memory=lots"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = read_failure_doc(staging)
    assert doc is not None, done.stdout + done.stderr
    assert doc["reason"].startswith("SparkStartError: Spark's JVM exited before it started: "), doc
    assert "Invalid maximum heap size: -Xmxlots" in doc["reason"], doc
    assert doc["stage"] == STARTING, doc
    assert "Invalid maximum heap size: -Xmxlots" in done.stdout.splitlines()[-1]
    assert "Invalid maximum heap size: -Xmxlots" in done.stderr  # relayed as the JVM wrote it
