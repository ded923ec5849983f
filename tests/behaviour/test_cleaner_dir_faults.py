"""Disk faults on the cleaner's write paths take that log dir offline; the other dir goes on.

The cleaner threads write outside the LogManager's ``io_guard``: the ``.cleaned`` segment (its
log through pwrite, its indexes through posix_fallocate and the map), the ``.swap`` renames, the
cleaner checkpoint, the deletion of old segments of compact,delete logs, and the Spark hand-off's
placing of staged output. Each reports an OSError through ``log_dir_failure`` (wired as the
sidecar wires it: ``manager.handle_log_dir_failure``). Faults are injected with tests/disk.py;
the cleaner's rounds are run one at a time by a worker, without threads, so nothing is timed.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.cleaner.manager import CleanerManager
from logkeeper.cleaner.offload import Offloader
from logkeeper.cleaner.offload_job import JobRequest
from logkeeper.cli import build_parser
from logkeeper.errors import KafkaStorageError
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import ManualClock, Scheduler
from logkeeper.spark.command import plan_from_args
from logkeeper.tools.verify import verify_path
from tests.cleaner_logs import append_kvs, keys_in_log
from tests.disk import Faults, small_tmpfs
from tests.spark_helpers import NOW_MS, TP, build_log, config, copy_log_dir, open_log, run_local_job

START_MS = 1_700_000_000_000
KEYS = 10


class CleanNode:
    """A LogManager with two dirs, a compacted partition in each, and the LogCleaner plugged in."""

    def __init__(self, tmp_path: Path, **topic: object) -> None:
        self.dirs = [tmp_path / "disk0", tmp_path / "disk1"]
        self.clock = ManualClock(START_MS)
        props = {"cleanup.policy": "compact", "segment.bytes": 2048, "min.cleanable.dirty.ratio": 0.01,
                 "file.delete.delay.ms": 0, **topic}
        self.manager = LogManager(ManagerConfig.from_props({"log.dirs": [str(d) for d in self.dirs]}),
                                  clock_ms=self.clock, scheduler=Scheduler(self.clock), topic_configs={"c": props})
        self.manager.startup()
        m = self.manager
        self.cleaner = LogCleaner(CleanerConfig.from_props({"log.cleaner.dedupe.buffer.size": 24 * 100_000}),
                                  m.live_log_dirs, m.current_logs, clock_ms=self.clock,
                                  log_dir_failure=lambda d, msg, e: m.handle_log_dir_failure(d, f"{msg}: {e}"))
        self.cleaner.install_hooks(m.cleaner_hooks)
        self.worker = self.cleaner.new_worker(0)
        self.tps = [TopicPartition("c", 0), TopicPartition("c", 1)]  # least loaded first: disk0, then disk1
        for tp in self.tps:
            m.get_or_create_log(tp, is_new=True)
            self.fill(tp)
        assert [m.dir_of(tp).path for tp in self.tps] == self.dirs

    def fill(self, tp: TopicPartition, n: int = 300) -> None:
        log = self.manager.get_log(tp)
        assert log is not None
        for i in range(n):
            append_kvs(log, [(str(i % KEYS).encode(), f"{i % KEYS}:{i}".encode())])
        log.roll()

    def clean_until(self, done: Callable[[], bool], rounds: int = 6) -> None:
        for _ in range(rounds):
            if done():
                return
            self.worker.try_clean_filthiest_log()

    def cleaned(self, tp: TopicPartition) -> bool:
        log = self.manager.get_log(tp)
        assert log is not None
        return self.cleaner.manager.all_cleaner_checkpoints().get(tp, 0) >= log.active_segment.base_offset

    def close(self) -> None:
        self.manager.shutdown()


@pytest.fixture
def node(tmp_path: Path) -> CleanNode:
    return CleanNode(tmp_path)


def assert_victim_offline(n: CleanNode, faults: Faults, err: int) -> None:
    victim, other = n.dirs
    m = n.manager
    assert faults.hits > 0
    assert m.offline_log_dirs == [victim] and m.live_log_dirs == [other]
    status = {s.path: s for s in m.dir_status()}
    assert os.strerror(err) in (status[str(victim)].error or "")
    assert list(m.offline_partitions()) == [n.tps[0]]
    with pytest.raises(KafkaStorageError, match=str(victim)):
        m.append(n.tps[0], b"")
    # the other dir: appends, and its partition is still cleaned
    n.fill(n.tps[1], 50)
    n.clean_until(lambda: n.cleaned(n.tps[1]))
    assert n.cleaned(n.tps[1])
    other_log = m.get_log(n.tps[1])
    assert other_log is not None and len(keys_in_log(other_log)) < 350


CLEANING = [("write", "the .cleaned log"), ("fallocate", "the .cleaned indexes"), ("rename", "the .swap renames"),
            ("fsync", "the .cleaned flush")]


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize(("op", "what"), CLEANING, ids=[op for op, _w in CLEANING])
def test_a_fault_while_cleaning_takes_that_dir_offline(node: CleanNode, monkeypatch: pytest.MonkeyPatch, op: str,
                                                      what: str, err: int) -> None:
    faults = Faults(monkeypatch, node.dirs[0], op, err)
    try:
        faults.armed = True
        node.clean_until(lambda: node.manager.offline_log_dirs != [])
        assert node.worker.failures == 0  # the dir's failure, not the partition's (no "uncleanable")
        faults.armed = False
        assert_victim_offline(node, faults, err)
    finally:
        faults.armed = False
        node.close()


def test_a_failed_cleaner_checkpoint_write_takes_that_dir_offline(node: CleanNode,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """It was only logged: the next round cleaned the same section again, forever."""
    try:
        faults = Faults(monkeypatch, node.dirs[0] / CLEANER_OFFSET_CHECKPOINT, "rename", errno.EIO)
        faults.armed = True
        node.clean_until(lambda: node.manager.offline_log_dirs != [])
        faults.armed = False
        assert_victim_offline(node, faults, errno.EIO)
    finally:
        node.close()


def test_a_fault_deleting_old_segments_in_the_cleaner_thread_takes_that_dir_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compact,delete logs get their retention from the cleaner thread; an I/O error there marked the
    partition uncleanable and retried it, while the disk was the problem."""
    n = CleanNode(tmp_path, **{"cleanup.policy": "compact,delete", "retention.bytes": 4096,
                               "min.cleanable.dirty.ratio": 1.0})  # nothing to clean: deletion only
    try:
        faults = Faults(monkeypatch, n.dirs[0], "rename", errno.EIO)  # a deleted segment is renamed first
        faults.armed = True
        n.clean_until(lambda: n.manager.offline_log_dirs != [], rounds=2)
        faults.armed = False
        assert faults.hits > 0 and n.worker.failures == 0
        assert n.manager.offline_log_dirs == [n.dirs[0]]
        assert not n.cleaner.manager.uncleanable_partitions(n.dirs[0])
        other = n.manager.get_log(n.tps[1])
        assert other is not None and other.size_in_bytes <= 4096 + 2048  # its retention ran
    finally:
        n.close()


# ------------------------------------------------------------------------------------------------
# The Spark hand-off: placing the staged output into the partition directory
# ------------------------------------------------------------------------------------------------
class Job:
    """The test-double job, run in process; arms the faults once its output is staged."""

    def __init__(self, faults: Faults | None) -> None:
        self.faults = faults
        self.waits_for_job = False

    def run(self, request: JobRequest, timeout_s: float, cancelled: threading.Event) -> None:
        run_local_job(plan_from_args(build_parser().parse_args(request.args())), request.staging)
        if self.faults is not None:
            self.faults.armed = True


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("op", ["rename", "fsync"])
def test_a_fault_placing_the_spark_output_takes_that_dir_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                op: str, err: int) -> None:
    log_dir = copy_log_dir(build_log(tmp_path / "src", 11), tmp_path / "data")
    cfg = config(11, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    log = open_log(log_dir, cfg)
    logs = {TP: log}
    manager = CleanerManager([log_dir], lambda: logs, clock_ms=lambda: NOW_MS)
    failures: list[tuple[Path, str, BaseException]] = []
    faults = Faults(monkeypatch, log_dir / TP.dir_name, op, err)
    offloader = Offloader(CleanerConfig.from_props({"log.cleaner.offload.enable": True}), manager, lambda: logs,
                          clock_ms=lambda: NOW_MS, runner=Job(faults),
                          log_dir_failure=lambda d, msg, e: failures.append((d, msg, e)))
    try:
        assert not offloader.hand_off(log)
        faults.armed = False
        assert faults.hits > 0
        assert len(failures) == 1
        failed_dir, message, error = failures[0]
        assert failed_dir == log_dir.resolve() and "failed to place" in message
        assert isinstance(error, OSError) and error.errno == err
        assert offloader.status()[str(TP)]["state"] == "failed"
        assert not list((log_dir / TP.dir_name).glob("*.cleaned"))
    finally:
        faults.armed = False
        log.close()


def cross_device_renames(monkeypatch: pytest.MonkeyPatch, staging_part: str) -> None:
    """os.rename out of the staging directory fails with EXDEV, as from another file system."""
    real = os.rename

    def rename(src: object, dst: object) -> None:
        if staging_part in os.fsdecode(src):  # type: ignore[arg-type]
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)


@pytest.mark.parametrize("fault", ["none", "write-target", "read-staged"])
def test_placing_from_another_file_system_blames_the_right_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                fault: str) -> None:
    """Staged output on another file system is copied: a write error is the partition dir's (offline),
    a read error is the staging's (the hand-off fails, the dir stays online)."""
    log_dir = copy_log_dir(build_log(tmp_path / "src", 12), tmp_path / "data")
    log = open_log(log_dir, config(12, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}))
    logs = {TP: log}
    cross_device_renames(monkeypatch, ".logkeeper-staging")
    if fault == "read-staged":
        real_pread = os.pread

        def pread(fd: int, n: int, offset: int) -> bytes:
            if ".logkeeper-staging" in os.readlink(f"/proc/self/fd/{fd}") and faults.armed:
                faults.hits += 1
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_pread(fd, n, offset)

        monkeypatch.setattr(os, "pread", pread)
    faults = Faults(monkeypatch, log_dir / TP.dir_name, "write", errno.ENOSPC)
    failures: list[tuple[Path, str, BaseException]] = []
    offloader = Offloader(CleanerConfig.from_props({"log.cleaner.offload.enable": True}),
                          CleanerManager([log_dir], lambda: logs, clock_ms=lambda: NOW_MS), lambda: logs,
                          clock_ms=lambda: NOW_MS, runner=Job(faults if fault != "none" else None),
                          log_dir_failure=lambda d, msg, e: failures.append((d, msg, e)))
    try:
        handed = offloader.hand_off(log)
        faults.armed = False
        if fault == "none":
            assert handed and failures == []
            assert offloader.status()[str(TP)]["state"] == "done"
        elif fault == "write-target":
            assert not handed and faults.hits > 0
            assert [(d, "failed to place" in msg) for d, msg, _e in failures] == [(log_dir.resolve(), True)]
        else:
            assert not handed and faults.hits > 0 and failures == []
            status = offloader.status()[str(TP)]
            assert status["state"] == "failed" and "staged file" in status["reason"]
        if fault != "none":
            assert not list((log_dir / TP.dir_name).glob("*.cleaned"))
    finally:
        faults.armed = False
        log.close()


def test_staging_on_a_real_other_file_system_is_copied_in(tmp_path: Path) -> None:
    """log.cleaner.offload.staging.dir on a tmpfs: os.rename answers EXDEV and install.py copies."""
    with small_tmpfs(tmp_path / "staging", "64m") as staging:
        log_dir = copy_log_dir(build_log(tmp_path / "src", 13), tmp_path / "data")
        log = open_log(log_dir, config(13, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}))
        logs = {TP: log}
        failures: list[tuple[Path, str, BaseException]] = []
        offloader = Offloader(CleanerConfig.from_props({"log.cleaner.offload.enable": True,
                                                        "log.cleaner.offload.staging.dir": str(staging)}),
                              CleanerManager([log_dir], lambda: logs, clock_ms=lambda: NOW_MS), lambda: logs,
                              clock_ms=lambda: NOW_MS, runner=Job(None),
                              log_dir_failure=lambda d, msg, e: failures.append((d, msg, e)))
        try:
            assert offloader.hand_off(log), offloader.status()
            assert failures == [] and not list(staging.iterdir())
        finally:
            log.close()
        report = verify_path(log_dir)
        assert report.ok, "; ".join(map(str, report.problems))
