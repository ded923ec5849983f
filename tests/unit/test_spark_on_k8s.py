"""`logkeeper executor` (what Spark runs in an executor pod of our image) and the executors' pod
template handed from the operator to the driver (spark/on_k8s.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logkeeper.errors import UsageError
from logkeeper.spark.on_k8s import BACKEND, TEMPLATE_CONF, TEMPLATE_ENV, driver_conf, executor_command

SPARK_ENV = {
    "JAVA_HOME": "/jre", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.1.0.5:7078",
    "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "spark-abc",
    "SPARK_EXECUTOR_POD_IP": "10.1.0.9", "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "x-exec-3",
    "SPARK_EXECUTOR_MEMORY": "1408m", "SPARK_CONF_DIR": "/opt/spark/conf",
    # the JVM options in their numbered order, 10 after 2
    "SPARK_JAVA_OPT_10": "-Dlast=1", "SPARK_JAVA_OPT_0": "-Dfirst=1", "SPARK_JAVA_OPT_2": "-Dsecond=1",
}


def test_executor_command_from_sparks_environment() -> None:
    cmd = executor_command(SPARK_ENV, Path("/venv/pyspark"))
    assert cmd[:6] == ["/jre/bin/java", "-Dfirst=1", "-Dsecond=1", "-Dlast=1", "-Xms1408m", "-Xmx1408m"]
    assert cmd[6:9] == ["-cp", "/opt/spark/conf:/venv/pyspark/jars/*", BACKEND]
    options = dict(zip(cmd[9::2], cmd[10::2], strict=True))
    assert options == {"--driver-url": SPARK_ENV["SPARK_DRIVER_URL"], "--executor-id": "3", "--cores": "1",
                       "--app-id": "spark-abc", "--hostname": "10.1.0.9", "--resourceProfileId": "0",
                       "--podName": "x-exec-3"}


def test_executor_outside_an_executor_pod_says_what_is_missing() -> None:
    env = {k: v for k, v in SPARK_ENV.items() if k not in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_MEMORY")}
    with pytest.raises(UsageError, match="missing SPARK_DRIVER_URL, SPARK_EXECUTOR_MEMORY"):
        executor_command(env, Path("/p"))
    run = subprocess.run([sys.executable, "-m", "logkeeper.cli", "executor"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert run.returncode == 2 and "logkeeper executor: " in run.stderr and "missing SPARK_DRIVER_URL" in run.stderr


def test_driver_conf_for_a_k8s_master_only(tmp_path: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"automountServiceAccountToken": False}}
    env = {TEMPLATE_ENV: json.dumps(pod), "POD_IP": "10.1.0.5", "POD_NAME": "cj-a1-xyz"}
    conf = driver_conf("k8s://https://10.0.0.1:443", {}, env, str(tmp_path))
    assert json.loads(Path(conf.pop(TEMPLATE_CONF)).read_text()) == pod
    assert conf == {"spark.driver.host": "10.1.0.5", "spark.driver.bindAddress": "10.1.0.5",
                    "spark.kubernetes.driver.pod.name": "cj-a1-xyz"}
    assert driver_conf("local[2]", {}, env, str(tmp_path)) == {}
    assert driver_conf("k8s://https://h", {}, {"POD_IP": "1.2.3.4"}, str(tmp_path)) == {}  # not the operator's Job
    mine = {TEMPLATE_CONF: "/mine.yaml", "spark.driver.host": "h", "spark.driver.bindAddress": "h",
            "spark.kubernetes.driver.pod.name": "p"}
    assert driver_conf("k8s://https://h", mine, env, str(tmp_path)) == {}  # the user's keys win
    with pytest.raises(UsageError, match="POD_IP is empty"):
        driver_conf("k8s://https://h", {}, {**env, "POD_IP": ""}, str(tmp_path))
    with pytest.raises(UsageError, match=TEMPLATE_ENV):
        driver_conf("k8s://https://h", {}, {**env, TEMPLATE_ENV: "{not json"}, str(tmp_path))
    with pytest.raises(UsageError, match="must be a Pod"):
        driver_conf("k8s://https://h", {}, {**env, TEMPLATE_ENV: "[]"}, str(tmp_path))
