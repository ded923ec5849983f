"""The sidecar's hand-off (cleaner/offload.py) with the real job, started by ``SubprocessRunner``:

- the embedded default (``log.cleaner.offload.command`` empty): this Python's ``logkeeper
  spark-compact --master local[2]``, local Spark in a subprocess of its own; records are appended
  and the active segment rolled while the job runs;
- spark-submit (the scale-out route of the README, here with a local master): the command
  ``spark-submit --master local[2] <logkeeper/spark/submit.py>`` and
  ``log.cleaner.offload.spark.master`` empty, so that the job takes spark-submit's master.

The offload thread's step (``run_once``) picks the log, the job runs, the hand-off validates the
manifest and swaps the staged segments in. The partition directory ends byte for byte as the
in-process cleaner leaves a copy of it (one round with the same settings and time, then the same
appends), with the checkpoint at the round's end, the staging directory gone and the cleaning
resumed."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.manager import CleanerManager
from logkeeper.cleaner.offload import Offloader
from logkeeper.cleaner.offload_job import JOB_LOG, SubprocessRunner, default_command
from logkeeper.cleaner.staging import STAGING_DIR_NAME
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.spark import submit
from tests.cleaner_logs import append_kvs
from tests.spark_helpers import NOW_MS, TP, build_log, clean_in_process, config, copy_log_dir, open_log, segment_files

JOB_TIMEOUT_S = 300.0


def compact(seed: int) -> LogConfig:
    return config(seed, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})


def append_late(log: Log) -> None:
    """The appends that land while the job runs (and after the in-process round on the copy)."""
    for i in range(6):
        append_kvs(log, [(b"late-%d" % i, b"v%d" % i), (b"0", b"late")])
        if i == 2:
            log.roll()


def hand_off(tmp_path: Path, seed: int, settings: dict[str, Any],
             meanwhile: Callable[[Log], None] | None = None) -> tuple[Offloader, dict[str, Any]]:
    """One hand-off of a random workload through the offload thread's step, ``meanwhile(log)``
    run while the job runs; checks the result against the in-process cleaner's."""
    cfg = compact(seed)
    src = build_log(tmp_path / "src", seed)
    ref = copy_log_dir(src, tmp_path / "in-process")
    log = open_log(ref, cfg)
    end = clean_in_process(log, None, now_ms=NOW_MS)
    if meanwhile is not None:
        meanwhile(log)
    log.close()

    log_dir = copy_log_dir(src, tmp_path / "sidecar")
    log = open_log(log_dir, cfg)
    logs = {TP: log}
    manager = CleanerManager([log_dir], lambda: logs, clock_ms=lambda: NOW_MS)
    offloader = Offloader(CleanerConfig.from_props({
        "log.cleaner.offload.enable": True, "log.cleaner.offload.dirty.bytes.threshold": 0,
        "log.cleaner.offload.timeout.ms": int(JOB_TIMEOUT_S * 1000), **settings}),
        manager, lambda: logs, clock_ms=lambda: NOW_MS)
    manager.offload_filter = offloader.wants
    assert [c.log for c in offloader.candidates()] == [log]  # wanted: dirty bytes above the threshold 0

    started = threading.Event()
    done_meanwhile = threading.Event()

    def act_while_the_job_runs() -> None:
        while not started.is_set():
            status = offloader.status().get(str(TP))
            if status and status["state"] == "running" and (Path(status["staging"]) / JOB_LOG).exists():
                started.set()
                if meanwhile is not None:
                    meanwhile(log)
                done_meanwhile.set()
                return
            started.wait(0.05)

    actor = threading.Thread(target=act_while_the_job_runs)
    actor.start()
    try:
        ok = offloader.run_once()
    finally:
        started.set()
        actor.join()
    status = offloader.status()[str(TP)]
    assert ok, f"the hand-off failed: {status}"
    assert done_meanwhile.is_set(), "the job ended before the test saw it run"
    assert status["state"] == "done" and status["failures"] == 0
    assert status["result"]["messages_read"] > status["result"]["messages_written"] > 0
    assert manager.all_cleaner_checkpoints() == {TP: end}
    assert manager.cleaning_state(TP) is None  # resumed
    assert not (log_dir / STAGING_DIR_NAME).exists()
    log.close()
    assert OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read() == {TP: end}
    assert segment_files(log_dir / TP.dir_name) == segment_files(ref / TP.dir_name)
    return offloader, status


def test_hand_off_to_the_embedded_job(tmp_path: Path) -> None:
    offloader, status = hand_off(tmp_path, 31, {"log.cleaner.offload.spark.master": "local[2]"}, append_late)
    assert isinstance(offloader.runner, SubprocessRunner) and list(offloader.runner.command) == default_command()
    args = status["job_args"]
    assert args[0] == "spark-compact" and args[args.index("--master") + 1] == "local[2]"


def test_hand_off_through_spark_submit(tmp_path: Path) -> None:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    command = f"{spark_submit} --master local[2] {submit.__file__}"
    offloader, status = hand_off(tmp_path, 32, {"log.cleaner.offload.command": command,
                                                "log.cleaner.offload.spark.master": ""})
    assert isinstance(offloader.runner, SubprocessRunner)
    assert list(offloader.runner.command) == [str(spark_submit), "--master", "local[2]", submit.__file__]
    assert status["job_args"][0] == "spark-compact" and "--master" not in status["job_args"]
