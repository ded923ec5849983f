"""LogManager: its log directories (locks, offline directories, status), the clean-shutdown marker, and
a crash after each step of deleting a log or shutting down (forked children)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import (
    DuplicateLogDirError,
    KafkaStorageError,
    LogDirLockedError,
    LogDirNotFoundError,
    NoLiveLogDirsError,
)
from logkeeper.log import dir_loader
from logkeeper.log.cleaner_hooks import CleanerHooks
from logkeeper.log.log import Log
from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE, LOCK_FILE, LogDir
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.manager_tasks import ALL_TASKS
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from tests.manager_env import (
    INITIAL_DELAY_MS,
    NAME,
    START_MS,
    TP0,
    Env,
    dirs_in,
)


# ------------------------------------------------------------------ directories and locks
def test_two_log_managers_using_same_dir_fails(env: Env) -> None:
    env.manager()
    with pytest.raises(LogDirLockedError) as e:
        LogManager(ManagerConfig.from_props(env.props(**{"log.dirs": [str(env.log_dir)]})))
    assert str(env.log_dir) in str(e.value)


def test_second_process_fails_at_once(env: Env) -> None:
    env.manager()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            LogManager(ManagerConfig.from_props(env.props(**{"log.dirs": [str(env.log_dir)]})))
        except LogDirLockedError as e:
            code = 0 if str(env.log_dir) in str(e) else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_lock_is_held_and_removed_after_shutdown(env: Env) -> None:
    d = env.tmp_path / "locked"
    m = env.manager([d])
    with pytest.raises(LogDirLockedError):
        LogDir(d).lock()
    m.shutdown()
    assert not (d / LOCK_FILE).exists()


def test_missing_directories_are_created(env: Env) -> None:
    d = env.tmp_path / "a" / "b" / "c"
    env.manager([d])
    assert d.is_dir()


def test_duplicate_directories_are_rejected(env: Env) -> None:
    d = env.tmp_path / "d"
    with pytest.raises(DuplicateLogDirError):
        env.manager([d, Path(str(d) + "/")])


def test_an_unusable_directory_goes_offline_and_the_others_work(env: Env) -> None:
    # Kafka's testInvalidLogDirNotFailLogManager / testCreateLogWithInvalidLogDir
    bad = env.tmp_path / "file"
    bad.write_text("not a directory")
    good = env.tmp_path / "good"
    m = env.manager([bad, good])
    assert m.live_log_dirs == [good] and m.offline_log_dirs == [bad]
    assert not m.is_log_dir_online(bad)
    status = {s.path: s for s in m.dir_status()}
    assert status[str(bad)].error is not None and "not a directory" in status[str(bad)].error
    with pytest.raises(KafkaStorageError):
        m.get_or_create_log(TP0)  # a partition could be on the offline disk
    lg = m.get_or_create_log(TP0, is_new=True)
    assert lg.dir.parent == good
    with pytest.raises(LogDirNotFoundError):
        m.log_dir(env.tmp_path / "elsewhere")


def test_no_usable_directory_is_fatal(env: Env) -> None:
    bad = env.tmp_path / "file"
    bad.write_text("x")
    with pytest.raises(NoLiveLogDirsError, match="not a directory"):
        env.manager([bad])


def test_dir_status(env: Env) -> None:
    dirs = dirs_in(env.tmp_path, 2)
    m = env.manager(dirs)
    for i in range(3):
        env.append(m.get_or_create_log(TopicPartition("t", i)), 10)
    status = m.dir_status()
    assert [s.path for s in status] == [str(d) for d in dirs]
    assert sum(s.partitions for s in status) == 3
    assert all(s.online and s.error is None for s in status)
    assert sum(s.size_bytes for s in status) == sum(lg.size_in_bytes for lg in m.all_logs())
    assert all(s.total_bytes is not None and s.total_bytes > 0 for s in status)


# ------------------------------------------------------------------ clean shutdown marker
def test_clean_shutdown_file_with_broker_epoch(env: Env) -> None:
    dirs = dirs_in(env.tmp_path, 2)
    m = env.manager(dirs)
    m.get_or_create_log(TP0)
    m.get_or_create_log(TopicPartition(NAME, 1))
    assert (dirs[0] / f"{NAME}-0").exists() and (dirs[1] / f"{NAME}-1").exists()
    m.shutdown(3)
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert m.read_broker_epoch_from_clean_shutdown_files() == 3
    m2 = env.manager(dirs)
    assert all(d.had_clean_shutdown for d in m2.dirs)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)  # read and deleted at startup


def test_handling_exceptions_during_shutdown(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = dirs_in(env.tmp_path, 2)
    m = env.manager(dirs)
    log1 = m.get_or_create_log(TP0)
    log2 = m.get_or_create_log(TopicPartition(NAME, 1))
    env.append(log1, 2)
    env.append(log2, 2)

    def broken_flush(offset: int | None = None) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log1, "flush", broken_flush)
    m.shutdown(3)
    assert not (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    assert (dirs[1] / CLEAN_SHUTDOWN_FILE).exists()
    assert m.read_broker_epoch_from_clean_shutdown_files() is None
    assert not (dirs[0] / LOCK_FILE).exists() and not (dirs[1] / LOCK_FILE).exists()


def test_clean_shutdown_file_when_shutdown_called_before_startup_complete(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    m = env.manager()
    for i in range(2):
        env.append(m.get_or_create_log(TopicPartition(NAME, i)), 1)
    m.shutdown()
    (env.log_dir / CLEAN_SHUTDOWN_FILE).unlink()  # an unclean shutdown
    loaded = threading.Event()
    release = threading.Event()
    real_log = dir_loader.Log

    def slow_log(*args: Any, **kwargs: Any) -> Log:
        made = real_log(*args, **kwargs)
        loaded.set()
        release.wait(5)
        return made

    m2 = env.manager(start=False)
    m2._open_log = slow_log  # type: ignore[method-assign]
    t = threading.Thread(target=m2.startup)
    t.start()
    assert loaded.wait(5)
    stopper = threading.Thread(target=m2.shutdown)
    stopper.start()
    time.sleep(0.05)
    release.set()
    stopper.join(5)
    t.join(5)
    assert not (env.log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert m2.scheduler.task_names() == []


def test_startup_of_a_clean_empty_directory_then_marker(env: Env) -> None:
    m = env.manager()
    m.shutdown(-1)
    assert (env.log_dir / CLEAN_SHUTDOWN_FILE).read_text() == '{"version":0,"brokerEpoch":-1}'


def test_background_tasks_are_scheduled_and_cancelled(env: Env) -> None:
    m = env.manager()
    assert set(ALL_TASKS) <= set(env.scheduler.task_names())
    assert env.scheduler.due_ms(ALL_TASKS[0]) == START_MS + INITIAL_DELAY_MS
    m.shutdown()
    assert not set(ALL_TASKS) & set(env.scheduler.task_names())


def test_context_manager(env: Env) -> None:
    config = ManagerConfig.from_props(env.props(**{"log.dirs": [str(env.log_dir)]}))
    with LogManager(config, clock_ms=env.clock, scheduler=env.scheduler) as m:
        m.get_or_create_log(TP0)
    assert (env.log_dir / CLEAN_SHUTDOWN_FILE).exists()


# ------------------------------------------------------------------ crash steps (forked children)
def run_child_until(step: str, scenario: Callable[[LogManager], None], env: Env) -> None:
    """Run ``scenario`` in a forked child that dies (os._exit) right after crash step ``step``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 3
        try:
            m = LogManager(ManagerConfig.from_props(env.props(**{"log.dirs": [str(env.log_dir)]})),
                           clock_ms=env.clock, scheduler=Scheduler(env.clock))

            def hook(at: str) -> None:
                if at == step:
                    os._exit(0)

            m.crash_hook = hook
            m.startup()
            scenario(m)
            code = 4  # the step was never reached
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child did not stop at {step}"


def fresh_partition(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append_flushed(lg, 20)
    m.shutdown()
    env.managers.remove(m)


def no_temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith((".tmp", ".cleaned", ".swap"))]


@pytest.mark.parametrize(("step", "survives"), [("delete:closed", True), ("delete:renamed", False),
                                                ("delete:checkpointed", False)])
def test_delete_log_crash_steps(env: Env, step: str, survives: bool) -> None:
    fresh_partition(env)
    run_child_until(step, lambda m: [m.delete_log(TP0), None][1], env)
    m = env.manager()
    lg = m.get_log(TP0)
    if survives:
        assert lg is not None and lg.log_end_offset == 20
        assert m.tasks.dirs_to_delete() == []
    else:
        assert lg is None
        (queued,) = m.tasks.dirs_to_delete()
        env.sleep(m.default_log_config.file_delete_delay_ms)
        assert not queued.exists()
    assert no_temp_files(env.log_dir) == []


@pytest.mark.parametrize(("step", "clean"), [("shutdown:closed", False), ("shutdown:checkpointed", False),
                                             ("shutdown:marked", True), ("shutdown:unlocked", True)])
def test_shutdown_crash_steps(env: Env, step: str, clean: bool) -> None:
    fresh_partition(env)

    def scenario(m: LogManager) -> None:
        lg = m.get_log(TP0)
        assert lg is not None
        env.append(lg, 5)  # appended, never flushed by the caller
        m.shutdown(7)

    run_child_until(step, scenario, env)
    m = env.manager()
    assert m.dirs[0].had_clean_shutdown is clean
    lg = m.get_log(TP0)
    assert lg is not None and lg.log_end_offset == 25  # shutdown flushed them before step 1
    assert no_temp_files(env.log_dir) == []


def test_failure_reported_from_outside_takes_the_directory_offline(env: Env) -> None:
    dirs = dirs_in(env.tmp_path, 2)
    m = env.manager(dirs)
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    m.get_or_create_log(a)
    m.get_or_create_log(b)
    assert set(m.current_logs()) == {a, b}
    failed: list[Path] = []
    m.cleaner_hooks = CleanerHooks(on_dir_failure=failed.append)
    m.handle_log_dir_failure(str(dirs[0]), "the cleaner met EIO")
    assert failed == [dirs[0]]
    assert set(m.current_logs()) == {b}
    assert m.dir_status()[0].error == "the cleaner met EIO"
    m.handle_log_dir_failure(dirs[0], "again")  # once offline, stays as it was
    assert m.dir_status()[0].error == "the cleaner met EIO"


def test_idle_producers_are_forgotten_every_check_interval(env: Env) -> None:
    """producer.id.expiration.ms (1 day by default) after its last batch's timestamp, a producer
    with no open transaction is forgotten by the task of producer.id.expiration.check.interval.ms."""
    m = env.manager(**{"producer.id.expiration.check.interval.ms": 60_000})
    lg = m.get_or_create_log(TP0)
    lg.append(build_batch([Record(0, env.clock(), None, b"v")], producer_id=11, producer_epoch=0, base_sequence=0))
    lg.append(build_batch([Record(0, env.clock(), None, b"v")], producer_id=12, producer_epoch=0, base_sequence=0,
                          is_transactional=True))  # open: kept however long it stays open
    env.sleep(INITIAL_DELAY_MS + 24 * 3600 * 1000 - 60_000)
    assert set(lg.producer_state.producers) == {11, 12}
    env.sleep(60_000)
    assert set(lg.producer_state.producers) == {12}
    # a forgotten producer may start again anywhere, as a new one
    assert not lg.append(build_batch([Record(0, env.clock(), None, b"v")], producer_id=11, producer_epoch=0,
                                     base_sequence=7)).duplicate
