"""``logkeeper spark-compact``: the command line of the Spark compaction job (job.py).

    logkeeper spark-compact --log-dir D --partition TOPIC-P --staging S [--master URL]
        [--config KEY=VALUE ...] [--conf SPARK_KEY=VALUE ...] [--now-ms N]
        [--log-start-offset N] [--first-dirty-offset N] [--end-offset N] [--chunk-bytes N]

``--config`` takes the partition's topic keys (segment.bytes, delete.retention.ms ...) and the
cleaner's producer.id.expiration.ms, as ``logkeeper clean`` does; the offsets default to what
the directory says (plan.py). Exit status: 0 with ``<staging>/manifest.json`` written; 1 on
failure (``<staging>/failure.json`` holds the reason, one line on stdout too); 2 on bad
arguments, a --log-dir that is not a log dir, or a missing spark extra (the line says what to
install), with nothing written. pyspark is imported only when the job runs.

Crash and failure points for tests: faults.py.

Paths: --log-dir and --staging are made absolute against the current directory before anything
else (executors on a cluster run in other directories). Progress: ``<staging>/progress.json``
(cleaner/offload_progress.py), failure: ``<staging>/failure.json`` with the reason, the stage and the traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import InvalidConfigError, UsageError
from ..log_dir_rule import require_log_dir
from .faults import mark_job_session, maybe_crash

if TYPE_CHECKING:
    from .plan import CompactionPlan

_LOG = logging.getLogger("logkeeper.spark")
SPARK_EXTRA = ("pyspark", "pyarrow", "pandas")


def missing_extra() -> str | None:
    """What to install when the spark extra is missing (the job imports it only when it runs, so
    it is looked for first: a traceback from deep in the job would name none of this)."""
    absent = [m for m in SPARK_EXTRA if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (f"the Spark job needs the spark extra, and {', '.join(absent)} {'is' if len(absent) == 1 else 'are'} "
            "not installed. Install it with "
            "pip install 'logkeeper[spark]' (in a clone of the repository: make spark, or "
            ".venv/bin/pip install -c constraints.txt -e '.[dev,operator,spark]'); the job also needs a JDK 17.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-dir", required=True, type=Path, help="the log directory holding the partition")
    p.add_argument("--partition", required=True, metavar="TOPIC-P", help="the partition directory's name")
    p.add_argument("--staging", required=True, type=Path, help="where the cleaned segments and manifest go")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*], or spark-submit's)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic or cleaner config of the partition (repeatable), as for `logkeeper clean`")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf (repeatable)")
    p.add_argument("--now-ms", type=int, default=None, help="the round's time (default: the clock)")
    p.add_argument("--log-start-offset", type=int, default=None)
    p.add_argument("--first-dirty-offset", type=int, default=None)
    p.add_argument("--end-offset", type=int, default=None, help="the first uncleanable offset (a segment base)")
    p.add_argument("--chunk-bytes", type=int, default=None, help="bytes of segment a map task reads")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidConfigError(f"--{what} {item} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def plan_from_args(args: argparse.Namespace) -> CompactionPlan:
    from ..cleaner.clean_command import split_overrides
    from ..log.names import TopicPartition
    from .plan import Offsets, plan_compaction

    cleaner_config, topic_config = split_overrides(_pairs(args.config, "config"))
    tp = TopicPartition.parse(args.partition)
    now = args.now_ms if args.now_ms is not None else int(time.time() * 1000)
    kw: dict[str, Any] = {}
    if args.chunk_bytes:
        kw["chunk_bytes"] = args.chunk_bytes
    return plan_compaction(args.log_dir, tp, topic_config, now_ms=now,
                           producer_expiration_ms=cleaner_config.producer_id_expiration_ms,
                           offsets=Offsets(args.log_start_offset, args.first_dirty_offset, args.end_offset), **kw)


def absolute_paths(args: argparse.Namespace) -> None:
    """--log-dir and --staging as the user typed them, made absolute against the directory the
    command runs in, before anything else sees them: Spark's executors run elsewhere (a
    standalone worker's work directory, a pod) and read the segments by the plan's paths.
    Symbolic links are kept (os.path.abspath, not resolve): the path is the one every node mounts."""
    args.log_dir = Path(os.path.abspath(args.log_dir))
    args.staging = Path(os.path.abspath(args.staging))


_PY_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): \S")


def one_line(e: BaseException) -> str:
    """A failure's reason in one line. Spark's errors span pages and their first line names only
    the Java call: Spark's 'Job aborted due to stage failure' line, else the last Python error
    line inside the text (a worker's exception, as its traceback ends), else the first line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    line = next((x for x in lines if "stage failure" in x), None) or \
        next((x for x in reversed(lines) if _PY_ERROR_LINE.match(x)), None) or (lines[0] if lines else "")
    return f"{type(e).__name__}: {line}"[:1000]


def main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ..cleaner.offload_manifest import write_failure
    from ..cleaner.offload_progress import DONE, STARTING, Progress, write_progress
    from .plan import PlanError

    out = out if out is not None else sys.stdout  # looked up now: a default bound at import goes stale

    absolute_paths(args)
    staging: Path = args.staging
    try:
        require_log_dir(args.log_dir, "spark-compact --log-dir")
        conf = _pairs(args.conf, "conf")
    except (UsageError, InvalidConfigError) as e:
        out.write(f"logkeeper spark-compact: {e}\n")
        return 2
    # the extra looked for before anything is written or planned: planning a big backlog takes a
    # while, and the user would learn only then that the job cannot run
    missing = missing_extra()
    if missing:
        out.write(f"logkeeper spark-compact: {missing}\n")
        return 2
    try:
        staging.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        out.write(f"logkeeper spark-compact: cannot create the staging directory {staging}: {e.strerror}\n")
        return 2
    started = time.monotonic()
    progress = Progress()
    write_progress(staging, progress)
    try:
        plan = plan_from_args(args)
        maybe_crash("planned")
        plan_seconds = time.monotonic() - started
        from .job import run_job, spark_session

        progress.stage = STARTING
        write_progress(staging, progress)
        mark_job_session()
        spark = spark_session(args.master, conf, read_bytes=plan.dirty_bytes + plan.clean_bytes)
        try:
            manifest = run_job(spark, plan, staging, progress)
        finally:
            spark.stop()
        progress.stage = DONE
        write_progress(staging, progress)
        stats = manifest.stats
        out.write(f"spark-compact {plan.topic_partition}: [{plan.first_dirty_offset}, {plan.end_offset}) "
                  f"{len(plan.segments)} segments -> {len(manifest.outputs)}, {stats['keys']:,} keys, "
                  f"{stats['messages_read']:,} -> {stats['messages_written']:,} records, "
                  f"{stats['bytes_read']:,} -> {stats['bytes_written']:,} bytes; plan {plan_seconds:.1f} s, "
                  f"spark {stats['spark_seconds']:.1f} s, total {time.monotonic() - started:.1f} s\n")
        return 0
    except (PlanError, InvalidConfigError, ValueError) as e:
        reason = str(e)  # a sentence about the partition or the arguments
        trace = traceback.format_exc()  # in the except block: after it, there is no exception to format
    except Exception as e:
        _LOG.exception("spark-compact failed")
        reason = one_line(e)
        trace = traceback.format_exc()
    write_failure(staging, reason, progress.stage, trace)
    out.write(f"logkeeper spark-compact: {reason} (stage {progress.stage})\n")
    return 1
