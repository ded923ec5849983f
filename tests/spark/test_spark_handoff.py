"""The sidecar's hand-off (cleaner/offload.py) with the real job and the embedded default runner:
``SubprocessRunner`` running this Python's ``logkeeper spark-compact`` (local Spark in a
subprocess of its own), as ``log.cleaner.offload.command`` empty makes it.

While the job runs, records are appended and the active segment rolled; the hand-off then
validates the manifest and swaps the staged segments in. The partition directory ends byte for
byte as the in-process cleaner leaves a copy of it (one round with the same settings and time,
then the same appends), with the checkpoint at the round's end, the staging directory gone and
the cleaning resumed."""

from __future__ import annotations

import threading
from pathlib import Path

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.manager import CleanerManager
from logkeeper.cleaner.offload import STAGING_DIR_NAME, Offloader
from logkeeper.cleaner.offload_job import JOB_LOG, SubprocessRunner, default_command
from logkeeper.cleaner.testing import append_kvs
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from tests.spark_helpers import NOW_MS, TP, build_log, clean_in_process, config, copy_log_dir, open_log, segment_files

SEED = 31
JOB_TIMEOUT_S = 300.0


def compact(seed: int) -> LogConfig:
    return config(seed, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})


def append_late(log: Log) -> None:
    """The appends that land while the job runs (and after the in-process round on the copy)."""
    for i in range(6):
        append_kvs(log, [(b"late-%d" % i, b"v%d" % i), (b"0", b"late")])
        if i == 2:
            log.roll()


def test_hand_off_to_the_real_job_in_a_subprocess(tmp_path: Path) -> None:
    cfg = compact(SEED)
    src = build_log(tmp_path / "src", SEED)
    ref = copy_log_dir(src, tmp_path / "in-process")
    log = open_log(ref, cfg)
    end = clean_in_process(log, None, now_ms=NOW_MS)
    append_late(log)
    log.close()

    log_dir = copy_log_dir(src, tmp_path / "sidecar")
    log = open_log(log_dir, cfg)
    logs = {TP: log}
    manager = CleanerManager([log_dir], lambda: logs, clock_ms=lambda: NOW_MS)
    settings = CleanerConfig.from_props({"log.cleaner.offload.enable": True,
                                         "log.cleaner.offload.dirty.bytes.threshold": 0,
                                         "log.cleaner.offload.spark.master": "local[2]",
                                         "log.cleaner.offload.timeout.ms": int(JOB_TIMEOUT_S * 1000)})
    offloader = Offloader(settings, manager, lambda: logs, clock_ms=lambda: NOW_MS)
    manager.offload_filter = offloader.wants
    assert isinstance(offloader.runner, SubprocessRunner) and list(offloader.runner.command) == default_command()
    assert [c.log for c in offloader.candidates()] == [log]  # wanted: dirty bytes above the threshold 0

    started = threading.Event()
    appended = threading.Event()

    def append_while_the_job_runs() -> None:
        while not started.is_set():
            status = offloader.status().get(str(TP))
            if status and status["state"] == "running" and (Path(status["staging"]) / JOB_LOG).exists():
                started.set()
                append_late(log)
                appended.set()
                return
            started.wait(0.05)

    appender = threading.Thread(target=append_while_the_job_runs)
    appender.start()
    try:
        ok = offloader.run_once()  # the offload thread's step: the largest wanted log
    finally:
        started.set()
        appender.join()
    status = offloader.status()[str(TP)]
    assert ok, f"the hand-off failed: {status}"
    assert appended.is_set(), "the job ended before the test could append while it ran"
    assert status["state"] == "done" and status["failures"] == 0
    assert status["job_args"][:1] == ["spark-compact"] and "local[2]" in status["job_args"]
    assert status["result"]["messages_read"] > status["result"]["messages_written"] > 0
    assert manager.all_cleaner_checkpoints() == {TP: end}
    assert manager.cleaning_state(TP) is None  # resumed
    assert not (log_dir / STAGING_DIR_NAME).exists()
    log.close()
    assert OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read() == {TP: end}
    assert segment_files(log_dir / TP.dir_name) == segment_files(ref / TP.dir_name)
