"""A stand-in for ``logkeeper spark-compact`` without Spark, for the hand-off tests of the default suite.

Same command line (``[spark-compact] --log-dir D --partition TOPIC-P --staging S ...``), same plan,
rewrite and manifest code (spark/plan.py, spark/rewrite.py, cleaner/offload_manifest.py), same exit statuses and
``failure.json``, same crash points (LOGKEEPER_SPARK_CRASH_AT=planned|written|manifest); only the
Spark stage (the latest offset of each exact key) is a Python dict (spark_helpers.dict_decisions).
For the kill tests: LOGKEEPER_DOUBLE_PID_FILE gets this process's pid once it started, and
LOGKEEPER_DOUBLE_HANG_S makes it sleep that long before planning.

Run: ``python tests/spark_double.py spark-compact --log-dir ...`` (it puts the repository on sys.path).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

PID_FILE_ENV = "LOGKEEPER_DOUBLE_PID_FILE"
HANG_ENV = "LOGKEEPER_DOUBLE_HANG_S"
PATH = Path(__file__).resolve()


def main(argv: list[str]) -> int:
    from logkeeper.cleaner.offload_manifest import write_failure
    from logkeeper.spark.command import add_arguments, plan_from_args
    from logkeeper.spark.faults import maybe_crash
    from tests.spark_helpers import run_local_job

    parser = argparse.ArgumentParser(prog="spark_double")
    add_arguments(parser)
    args = parser.parse_args(argv[1:] if argv[:1] == ["spark-compact"] else argv)
    args.staging.mkdir(parents=True, exist_ok=True)
    pid_file = os.environ.get(PID_FILE_ENV)
    if pid_file:
        Path(pid_file).write_text(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get(HANG_ENV, "0")))
    try:
        plan = plan_from_args(args)
        maybe_crash("planned")
        run_local_job(plan, args.staging, crash=maybe_crash)
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        write_failure(args.staging, reason)
        print(f"spark_double: {reason}")
        return 1
    print(f"spark_double: {args.partition} staged in {args.staging}")
    return 0


def command() -> list[str]:
    """The program to pass as ``log.cleaner.offload.command`` (before the job's arguments)."""
    return [sys.executable, str(PATH)]


if __name__ == "__main__":
    sys.path.insert(0, str(PATH.parent.parent))
    sys.exit(main(sys.argv[1:]))
