"""Spark on Kubernetes with our image: the executor pods' entry and the driver's pod template.

The job's driver runs in the offload Job's pod (client mode, ``--master k8s://...``) and asks the
API server for executor pods. Spark gives each executor container the argument ``executor`` and
describes the executor in environment variables (the driver's URL, the executor's id, cores,
memory, its pod's IP and name, the application id, the resource profile, the JVM options as
SPARK_JAVA_OPT_<n>, the directory of the conf files it mounts as SPARK_CONF_DIR). Our image's
entrypoint is ``tini -- logkeeper``, so an executor pod runs ``logkeeper executor``:
``executor_command`` turns that environment into the executor JVM's command line
(KubernetesExecutorBackend, on the classpath of the pyspark installed beside logkeeper), and
``run_executor`` replaces the process with it. The executor's Python workers then run this same
venv's interpreter (the driver sends its PYSPARK_PYTHON, the same path in the same image).

The operator describes the executors' pod - the security context of every pod it makes, the log
volume's claim mounted where the sidecar has it, the node of the sidecar's pod when the claim is
ReadWriteOnce - as a pod template in LOGKEEPER_EXECUTOR_POD_TEMPLATE (JSON); ``driver_conf``
writes it to a file for ``spark.kubernetes.executor.podTemplateFile`` (Spark reads the template
from the driver's file system only) and gives the driver its pod's IP (to bind and to advertise)
and name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError

TEMPLATE_ENV = "LOGKEEPER_EXECUTOR_POD_TEMPLATE"
TEMPLATE_CONF = "spark.kubernetes.executor.podTemplateFile"
BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
# Spark's variable -> the backend's option; every one is required
_ARGS = (("SPARK_DRIVER_URL", "--driver-url"), ("SPARK_EXECUTOR_ID", "--executor-id"),
         ("SPARK_EXECUTOR_CORES", "--cores"), ("SPARK_APPLICATION_ID", "--app-id"),
         ("SPARK_EXECUTOR_POD_IP", "--hostname"), ("SPARK_RESOURCE_PROFILE_ID", "--resourceProfileId"),
         ("SPARK_EXECUTOR_POD_NAME", "--podName"))
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_(\d+)$")


def pyspark_home() -> Path:
    """The installed pyspark's directory: its jars/ is Spark's classpath (SPARK_HOME of a pip install)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("pyspark is not installed (pip install 'logkeeper[spark]')")
    return Path(next(iter(spec.submodule_search_locations)))


def _java(env: Mapping[str, str]) -> str:
    home = env.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java", path=env.get("PATH"))
    if not found:
        raise UsageError("no JAVA_HOME and no java on PATH")
    return found


def check_executor_env(env: Mapping[str, str]) -> None:
    """UsageError naming every variable Spark sets in an executor pod that ``env`` lacks."""
    missing = [name for name, _ in _ARGS if not env.get(name)]
    if not env.get("SPARK_EXECUTOR_MEMORY"):
        missing.append("SPARK_EXECUTOR_MEMORY")
    if missing:
        raise UsageError(f"run by Spark in an executor pod; missing {', '.join(missing)}")


def executor_command(env: Mapping[str, str], spark_home: Path) -> list[str]:
    """The executor JVM's command line from the variables Spark set in the executor's pod."""
    check_executor_env(env)
    opts = sorted(((int(m.group(1)), value) for name, value in env.items() if (m := _JAVA_OPT.match(name))))
    classpath = [env["SPARK_CONF_DIR"]] if env.get("SPARK_CONF_DIR") else []
    classpath.append(str(spark_home / "jars" / "*"))
    classpath += [env[k] for k in ("SPARK_EXTRA_CLASSPATH", "SPARK_DIST_CLASSPATH") if env.get(k)]
    memory = env["SPARK_EXECUTOR_MEMORY"]
    cmd = [_java(env), *(value for _, value in opts), f"-Xms{memory}", f"-Xmx{memory}",
           "-cp", os.pathsep.join(classpath), BACKEND]
    for name, option in _ARGS:
        cmd += [option, env[name]]
    return cmd


def run_executor() -> int:
    """``logkeeper executor``: become the executor JVM (tini, PID 1, reaps it and passes signals)."""
    check_executor_env(os.environ)
    home = pyspark_home()
    cmd = executor_command(os.environ, home)
    os.environ.setdefault("SPARK_HOME", str(home))  # where Spark's Python workers look for pyspark
    os.execv(cmd[0], cmd)
    return 1  # not reached


def driver_conf(master: str | None, conf: Mapping[str, str], env: Mapping[str, str],
                directory: str | None = None) -> dict[str, str]:
    """For a k8s:// master with the driver in a pod the operator made: the driver's address and pod
    name from POD_IP and POD_NAME (the downward API; the executors connect to that address, and
    the driver's pod owns them), and the executors' pod template from
    LOGKEEPER_EXECUTOR_POD_TEMPLATE written to a file in ``directory`` (default: the temporary
    directory, the Job's /tmp) for spark.kubernetes.executor.podTemplateFile. A key ``conf``
    already has is left to it; no k8s:// master or no template: nothing."""
    raw = env.get(TEMPLATE_ENV)
    if not raw or master is None or not master.startswith("k8s://"):
        return {}
    out: dict[str, str] = {}
    # Both the address the driver binds and the one it tells executors: Spark on Kubernetes may use
    # the bind address as the driver's (spark.kubernetes.executor.useDriverPodIP), and with a bind
    # address of 0.0.0.0 the e2e node's executors dialled 0.0.0.0:7078
    for key, var in (("spark.driver.host", "POD_IP"), ("spark.driver.bindAddress", "POD_IP"),
                     ("spark.kubernetes.driver.pod.name", "POD_NAME")):
        if key not in conf:
            if not env.get(var):
                raise UsageError(f"{var} is empty: the driver's pod must set it from the downward API (for {key})")
            out[key] = env[var]
    if TEMPLATE_CONF not in conf:
        try:
            template = json.loads(raw)
        except ValueError as e:
            raise UsageError(f"{TEMPLATE_ENV} is not JSON: {e}") from None
        if not isinstance(template, dict) or template.get("kind") != "Pod":
            raise UsageError(f"{TEMPLATE_ENV} must be a Pod (JSON object with kind Pod)")
        fd, path = tempfile.mkstemp(prefix="executor-pod-", suffix=".json", dir=directory)
        with os.fdopen(fd, "w") as f:
            json.dump(template, f)
        out[TEMPLATE_CONF] = path
    return out
