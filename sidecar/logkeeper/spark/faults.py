"""The Spark job's crash and failure points, set by tests through the environment.

Crash points for tests, LOGKEEPER_SPARK_CRASH_AT=<step>: ``planned`` (the plan made, nothing
written), ``written`` (every cleaned segment staged, no manifest yet), ``manifest`` (the manifest
written, the process not yet exited) make the driver exit as a SIGKILL would; ``group-written``
(one write batch's segments staged, in a Spark worker) SIGKILLs every process of the job: driver, JVM
and workers (a lost node, the OOM killer). The workers are not in the driver's process group
(pyspark's daemon makes its own), so the driver, when it leads a session of its own (as the
sidecar starts it), passes its session id to them in LOGKEEPER_SPARK_JOB_SESSION; without it a
worker kills only its own group and the job fails with Spark's error instead.
``group-written-raise`` makes that worker raise instead (the task fails; failure.json then
holds the worker's traceback and the stage ``rewrite``). LOGKEEPER_SPARK_CHUNK_DELAY_MS=<ms>
slows each chunk of the keys stage (tests that kill an executor mid-stage).
"""

from __future__ import annotations

import os
import signal
import sys
import time

CRASH_ENV = "LOGKEEPER_SPARK_CRASH_AT"
JOB_SESSION_ENV = "LOGKEEPER_SPARK_JOB_SESSION"
CHUNK_DELAY_ENV = "LOGKEEPER_SPARK_CHUNK_DELAY_MS"


def maybe_crash(step: str) -> None:
    """Die as a SIGKILL would right after ``step`` when LOGKEEPER_SPARK_CRASH_AT names it (crash tests)."""
    if os.environ.get(CRASH_ENV) == step:
        sys.stderr.write(f"spark-compact: killed after step {step} ({CRASH_ENV})\n")
        sys.stderr.flush()
        os._exit(137)


def maybe_kill_group(step: str) -> None:
    """In a Spark worker: SIGKILL every process of the job (the process groups of the session
    LOGKEEPER_SPARK_JOB_SESSION names, when this worker is in it; then this worker's own group)
    right after ``step`` when LOGKEEPER_SPARK_CRASH_AT names it (crash tests)."""
    if os.environ.get(CRASH_ENV) != step:
        return
    sys.stderr.write(f"spark-compact: job killed after step {step} ({CRASH_ENV})\n")
    sys.stderr.flush()
    session = int(os.environ.get(JOB_SESSION_ENV) or 0)
    if session and os.getsid(0) == session:
        from ..cleaner.offload_job import session_groups

        for group in session_groups(session) - {os.getpgrp()}:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def maybe_fail_task(step: str) -> None:
    """In a Spark worker: raise right after ``step`` when LOGKEEPER_SPARK_CRASH_AT names
    ``<step>-raise`` (failure tests: the task fails, Spark retries it, the job fails with the
    worker's traceback inside Spark's error)."""
    if os.environ.get(CRASH_ENV) == f"{step}-raise":
        raise RuntimeError(f"spark-compact: task failed after step {step} ({CRASH_ENV})")


def maybe_delay_chunk() -> None:
    """In a Spark worker: sleep LOGKEEPER_SPARK_CHUNK_DELAY_MS after reading a chunk (tests that
    kill an executor while the keys stage runs need the stage to last)."""
    delay = int(os.environ.get(CHUNK_DELAY_ENV) or 0)
    if delay > 0:
        time.sleep(delay / 1000.0)


def mark_job_session() -> None:
    """Under a crash test, tell the workers (through the environment the JVM passes on) the
    job's session, when the driver leads one of its own."""
    if os.environ.get(CRASH_ENV) and os.getsid(0) == os.getpid():
        os.environ[JOB_SESSION_ENV] = str(os.getpid())
