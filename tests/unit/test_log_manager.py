"""LogManager: Kafka's LogManagerTest scenarios, in virtual time (ManualClock + Scheduler.tick)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import (
    DuplicateLogDirError,
    KafkaStorageError,
    LogDirLockedError,
    LogDirNotFoundError,
    NoLiveLogDirsError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
)
from logkeeper.log import dir_loader
from logkeeper.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from logkeeper.log.cleaner_hooks import CleanerHooks
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE, LOCK_FILE, LogDir
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.manager_tasks import ALL_TASKS
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import ManualClock, Scheduler
from logkeeper.records.builder import Record, build_batch

START_MS = 1_700_000_000_000
INITIAL_DELAY_MS = 10_000
MAX_LOG_AGE_MS = 10 * 60 * 1000
NAME = "kafka"
TP0 = TopicPartition(NAME, 0)


def batch(ts: int, value: bytes = b"test", key: bytes | None = None) -> bytes:
    return build_batch([Record(0, ts, key, value)])


class Env:
    """Kafka's MockTime: a manual clock whose ``sleep`` runs the scheduler's due tasks."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clock = ManualClock(START_MS)
        self.scheduler = Scheduler(self.clock)
        self.managers: list[LogManager] = []
        self.log_dir = tmp_path / "logs"

    def sleep(self, ms: int) -> None:
        self.clock.advance(ms)
        self.scheduler.tick()

    def props(self, **overrides: Any) -> dict[str, Any]:
        props: dict[str, Any] = {"log.segment.bytes": 1024, "log.index.size.max.bytes": 4096,
                                 "log.retention.ms": MAX_LOG_AGE_MS, "num.recovery.threads.per.data.dir": 1,
                                 "log.initial.task.delay.ms": INITIAL_DELAY_MS,
                                 "log.retention.check.interval.ms": 1000,
                                 "log.flush.scheduler.interval.ms": 10_000_000,
                                 "log.flush.offset.checkpoint.interval.ms": 10_000,
                                 "log.flush.start.offset.checkpoint.interval.ms": 10_000}
        props.update(overrides)
        return props

    def manager(self, dirs: list[Path] | None = None, *, start: bool = True,
                topic_configs: dict[str, dict[str, Any]] | None = None, **overrides: Any) -> LogManager:
        props = self.props(**overrides)
        props["log.dirs"] = [str(d) for d in (dirs or [self.log_dir])]
        self.scheduler = Scheduler(self.clock)
        m = LogManager(ManagerConfig.from_props(props), clock_ms=self.clock, scheduler=self.scheduler,
                       topic_configs=topic_configs)
        self.managers.append(m)
        if start:
            m.startup()
        return m

    def append(self, lg: Log, n: int = 1, **kw: Any) -> int:
        last = -1
        for _ in range(n):
            last = lg.append(batch(self.clock(), **kw)).last_offset
        return last

    def append_flushed(self, lg: Log, n: int) -> None:
        """Append ``n`` batches and flush them: the log's recovery point moves to its end."""
        self.append(lg, n)
        lg.flush()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    for m in e.managers:
        m.shutdown()


def dirs_in(tmp_path: Path, n: int) -> list[Path]:
    return [tmp_path / f"d{i}" for i in range(n)]


# ------------------------------------------------------------------ create, get, delete
def test_create_log(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    assert m.live_log_dirs == [env.log_dir]
    assert (env.log_dir / f"{NAME}-0").is_dir()
    assert lg.append(batch(env.clock())).first_offset == 0
    assert m.get_or_create_log(TP0) is lg
    assert m.get_log(TP0) is lg


def test_get_non_existent_log(env: Env) -> None:
    m = env.manager()
    assert m.get_log(TP0) is None
    assert not (env.log_dir / f"{NAME}-0").exists()
    with pytest.raises(UnknownPartitionError):
        m.append(TP0, batch(env.clock()))


def test_illegal_topic_names_are_refused(env: Env) -> None:
    m = env.manager()
    for topic in ("", ".", "..", "a/b", "x" * 250):
        with pytest.raises(ValueError):
            m.get_or_create_log(TopicPartition(topic, 0))
    with pytest.raises(ValueError):
        m.get_or_create_log(TopicPartition("t", -1))


def test_create_and_delete_longest_topic(env: Env) -> None:
    m = env.manager()
    tp = TopicPartition("x" * 249, 0)
    m.get_or_create_log(tp)
    assert m.delete_log(tp) is not None
    (queued,) = m.tasks.dirs_to_delete()
    assert len(queued.name.encode()) <= 255


def test_least_loaded_assignment(env: Env) -> None:
    m = env.manager(dirs_in(env.tmp_path, 3))
    for partition in range(20):
        m.get_or_create_log(TopicPartition("test", partition))
        assert len(m.all_logs()) == partition + 1
        counts = [s.partitions for s in m.dir_status()]
        assert max(counts) <= min(counts) + 1


def test_delete_log_renames_and_removes_after_the_delay(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append(lg, 5)
    removed = m.delete_log(TP0)
    assert removed is lg and lg.closed
    assert m.get_log(TP0) is None
    assert not (env.log_dir / f"{NAME}-0").exists()
    (queued,) = m.tasks.dirs_to_delete()
    assert queued.name.startswith(f"{NAME}-0.") and queued.name.endswith("-delete") and queued.is_dir()
    assert OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read() == {}
    env.sleep(INITIAL_DELAY_MS)
    assert m.tasks.has_logs_to_be_deleted, "deleted too early"
    env.sleep(m.default_log_config.file_delete_delay_ms - INITIAL_DELAY_MS)
    assert not m.tasks.has_logs_to_be_deleted, "not deleted"
    assert not queued.exists()
    assert m.delete_log(TP0) is None
    # the partition can be created again
    assert m.get_or_create_log(TP0).log_end_offset == 0


def test_delete_log_tells_the_cleaner(env: Env) -> None:
    m = env.manager()
    calls: list[tuple[str, Any]] = []
    m.cleaner_hooks = CleanerHooks(abort=lambda tp: calls.append(("abort", tp)),
                                   remove_partition=lambda d, tp: calls.append(("remove", (d, tp))))
    m.get_or_create_log(TP0)
    m.delete_log(TP0)
    assert calls == [("abort", TP0), ("remove", (env.log_dir, TP0))]


def test_shutdown_with_zero_file_delete_delay(tmp_path: Path) -> None:
    # Kafka's testShutdownWithZeroFileDeleteDelayMs, with a real scheduler thread
    config = ManagerConfig.from_props({"log.dirs": [str(tmp_path)], "log.segment.delete.delay.ms": 0,
                                       "log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 1000})
    m = LogManager(config)
    m.startup()
    assert m.scheduler.is_started
    m.get_or_create_log(TP0)
    m.delete_log(TP0)
    deadline = time.monotonic() + 5
    while m.tasks.has_logs_to_be_deleted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not m.tasks.has_logs_to_be_deleted
    started = time.monotonic()
    m.shutdown()
    assert time.monotonic() - started < 5
    assert not m.scheduler.is_started


# ------------------------------------------------------------------ retention
def test_cleanup_expired_segments(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    offset = env.append(lg, 200)
    assert len(lg.segments) > 1
    env.sleep(MAX_LOG_AGE_MS + 1)
    assert len(lg.segments) == 1, "only the new active segment is left"
    env.sleep(lg.config.file_delete_delay_ms + 1)
    files = os.listdir(lg.dir)
    assert not [f for f in files if f.endswith(".deleted")], "files should have been deleted"
    assert lg.read(offset + 1, 1024).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1024)
    env.append(lg)


def test_cleanup_segments_to_maintain_size(env: Env) -> None:
    set_size = len(batch(env.clock()))
    m = env.manager(topic_configs={NAME: {"segment.bytes": 10 * set_size,
                                          "retention.bytes": 5 * 10 * set_size + 10}})
    lg = m.get_or_create_log(TP0)
    offset = env.append(lg, 200)
    assert len(lg.segments) == 200 * set_size // (10 * set_size)
    env.sleep(INITIAL_DELAY_MS)
    assert len(lg.segments) == 6
    env.sleep(lg.config.file_delete_delay_ms + 1)
    assert not [f for f in os.listdir(lg.dir) if f.endswith(".deleted")]
    assert lg.read(offset + 1, 1024).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1024)
    env.append(lg)


def test_doesnt_clean_logs_with_compact_policy(env: Env) -> None:
    m = env.manager(topic_configs={NAME: {"cleanup.policy": "compact"}})
    lg = m.get_or_create_log(TP0)
    env.append(lg, 200, key=b"test")
    n = len(lg.segments)
    assert n > 1
    env.sleep(MAX_LOG_AGE_MS + 1)
    assert len(lg.segments) == n


def test_compact_delete_logs_are_retained_without_a_cleaner(env: Env) -> None:
    """Deliberate difference from Kafka's LogManager (see cleaner_hooks.py): with no cleaner plugged
    in, compact,delete logs get time retention from the LogManager."""
    m = env.manager(topic_configs={NAME: {"cleanup.policy": "compact,delete"}})
    lg = m.get_or_create_log(TP0)
    env.append(lg, 200, key=b"test")
    assert len(lg.segments) > 1
    env.sleep(MAX_LOG_AGE_MS + 1)
    assert len(lg.segments) == 1


def test_with_a_cleaner_retention_covers_the_logs_it_paused(env: Env) -> None:
    """Kafka's model: the cleaner pauses the non-compacted logs it is not cleaning for the retention
    pass, and resumes them after; compacted logs are left to the cleaner threads."""
    m = env.manager(topic_configs={NAME: {"cleanup.policy": "compact,delete"}})
    resumed: list[TopicPartition] = []
    plain = TopicPartition("plain", 0)
    busy = TopicPartition("plain", 1)  # being cleaned after a policy change: not paused

    def pause_for_retention() -> list[TopicPartition]:
        return [tp for tp in (plain, busy) if tp != busy]

    m.cleaner_hooks = CleanerHooks(pause_for_retention=pause_for_retention, resume=resumed.append)
    compacted, deletable, skipped = (m.get_or_create_log(tp) for tp in (TP0, plain, busy))
    for lg in (compacted, deletable, skipped):
        env.append(lg, 200, key=b"test")
    n = len(compacted.segments)
    env.sleep(MAX_LOG_AGE_MS + 1)
    assert len(compacted.segments) == n
    assert len(skipped.segments) == n
    assert len(deletable.segments) == 1
    assert plain in resumed and busy not in resumed and TP0 not in resumed


def test_log_start_offset_breach_for_a_compacted_log(env: Env) -> None:
    m = env.manager(topic_configs={NAME: {"cleanup.policy": "compact"}})
    lg = m.get_or_create_log(TP0)
    env.append(lg, 200, key=b"k")
    second = lg.segments.base_offsets()[1]
    lg.maybe_increment_log_start_offset(second)
    env.sleep(INITIAL_DELAY_MS)
    assert lg.segments.base_offsets()[0] == second


# ------------------------------------------------------------------ flush and checkpoints
def test_time_based_flush(env: Env) -> None:
    m = env.manager(topic_configs={NAME: {"flush.ms": 1000}}, **{"log.flush.scheduler.interval.ms": 1000})
    lg = m.get_or_create_log(TP0)
    last_flush = lg.last_flush_ms
    env.append(lg, 200)
    assert lg.recovery_point == 0
    env.sleep(INITIAL_DELAY_MS)
    assert lg.last_flush_ms != last_flush, "time based flush should have been triggered"
    assert lg.recovery_point == lg.log_end_offset == 200


def test_no_flush_before_flush_ms(env: Env) -> None:
    m = env.manager(topic_configs={NAME: {"flush.ms": 60_000}}, **{"log.flush.scheduler.interval.ms": 1000})
    lg = m.get_or_create_log(TP0)
    env.append(lg, 10)
    env.sleep(INITIAL_DELAY_MS)
    assert lg.recovery_point == 0
    env.sleep(60_000)
    assert lg.recovery_point == 10


def verify_checkpoint_recovery(m: LogManager, env: Env, tps: list[TopicPartition], log_dir: Path) -> None:
    logs = [m.get_or_create_log(tp) for tp in tps]
    for lg in logs:
        env.append_flushed(lg, 50)
    m.tasks.checkpoint_log_recovery_offsets()
    checkpoints = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
    for tp, lg in zip(tps, logs):
        assert checkpoints[tp] == lg.recovery_point == 50


def test_checkpoint_recovery_points(env: Env) -> None:
    m = env.manager()
    verify_checkpoint_recovery(m, env, [TopicPartition("test-a", 1), TopicPartition("test-b", 1)], env.log_dir)


def test_recovery_directory_mapping_with_trailing_slash(env: Env) -> None:
    d = env.tmp_path / "slash"
    m = env.manager([Path(str(d) + os.sep)])
    verify_checkpoint_recovery(m, env, [TopicPartition("test-a", 1)], d)


def test_recovery_directory_mapping_with_relative_directory(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(env.tmp_path)
    m = env.manager([Path("data") / "rel"])
    assert m.live_log_dirs == [env.tmp_path / "data" / "rel"]
    verify_checkpoint_recovery(m, env, [TopicPartition("test-a", 1)], env.tmp_path / "data" / "rel")


def test_checkpoint_for_only_affected_logs(env: Env) -> None:
    m = env.manager()
    tps = [TopicPartition("test-a", i) for i in range(3)] + [TopicPartition("test-b", i) for i in range(2)]
    logs = [m.get_or_create_log(tp) for tp in tps]
    for lg in logs:
        env.append_flushed(lg, 50)
    m.tasks.checkpoint_recovery_points_in_dir(m.dirs[0])
    checkpoints = OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read()
    assert checkpoints == {tp: lg.recovery_point for tp, lg in zip(tps, logs)}


def test_checkpoints_written_periodically(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append_flushed(lg, 30)
    lg.maybe_increment_log_start_offset(3)
    env.sleep(INITIAL_DELAY_MS)
    assert OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read() == {TP0: 30}
    assert OffsetCheckpointFile(env.log_dir / LOG_START_OFFSET_CHECKPOINT).read() == {TP0: 3}
    env.append_flushed(lg, 5)
    env.sleep(10_000)
    assert OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read() == {TP0: 35}


def test_log_start_offset_checkpoint_only_lists_moved_starts(env: Env) -> None:
    # Kafka's testCheckpointLogStartOffsetForNormalTopic
    m = env.manager()
    a, b = m.get_or_create_log(TP0), m.get_or_create_log(TopicPartition(NAME, 1))
    env.append(a, 50)
    env.append(b, 50)
    a.maybe_increment_log_start_offset(12)
    m.tasks.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(env.log_dir / LOG_START_OFFSET_CHECKPOINT).read() == {TP0: 12}


def test_recovery_point_and_log_start_survive_a_restart(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append_flushed(lg, 100)
    lg.maybe_increment_log_start_offset(40)
    m.shutdown()
    m2 = env.manager()
    lg2 = m2.get_log(TP0)
    assert lg2 is not None
    assert (lg2.log_start_offset, lg2.recovery_point, lg2.log_end_offset) == (40, 100, 100)
    assert lg2.load_report.recovered_segments == []  # clean shutdown: nothing recovered
    with pytest.raises(OffsetOutOfRangeError):
        lg2.read(39, 100)


def test_unclean_restart_recovers_from_the_checkpointed_recovery_point(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append_flushed(lg, 100)
    m.tasks.checkpoint_log_recovery_offsets()
    env.append(lg, 20)  # not flushed
    flushed_segments = [s.name for s in lg.segments.values(None, 100)]
    m.shutdown()
    (env.log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    os.unlink(env.log_dir / RECOVERY_POINT_CHECKPOINT)  # shutdown wrote 120; put back 100
    OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).write({TP0: 100})
    m2 = env.manager()
    lg2 = m2.get_log(TP0)
    assert lg2 is not None and lg2.log_end_offset == 120
    recovered = lg2.load_report.recovered_segments
    assert recovered and set(recovered).isdisjoint(flushed_segments[:-1])


def test_unreadable_checkpoint_recovers_from_zero(env: Env) -> None:
    m = env.manager()
    lg = m.get_or_create_log(TP0)
    env.append(lg, 100)
    m.shutdown()
    (env.log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    (env.log_dir / RECOVERY_POINT_CHECKPOINT).write_text("garbage\n")
    (env.log_dir / LOG_START_OFFSET_CHECKPOINT).write_bytes(b"\xff\xfe")
    m2 = env.manager()
    lg2 = m2.get_log(TP0)
    assert lg2 is not None and lg2.log_end_offset == 100
    assert len(lg2.load_report.recovered_segments) == len(lg2.segments)


# ------------------------------------------------------------------ startup
def test_leftover_delete_directories_are_removed_after_the_delay(env: Env) -> None:
    m = env.manager()
    env.append(m.get_or_create_log(TP0), 10)
    m.shutdown()
    leftover = env.log_dir / f"{NAME}-0.{'a' * 32}-delete"
    (env.log_dir / f"{NAME}-0").rename(leftover)
    m2 = env.manager()
    assert m2.get_log(TP0) is None
    assert m2.tasks.dirs_to_delete() == [leftover]
    env.sleep(m2.default_log_config.file_delete_delay_ms)
    assert not leftover.exists()


def test_stray_and_future_directories_are_left_alone_and_reported(env: Env) -> None:
    stray = env.log_dir / f"{NAME}-3.{'b' * 32}-stray"
    future = env.log_dir / f"{NAME}-4.{'c' * 32}-future"
    stray.mkdir(parents=True)
    future.mkdir()
    (stray / "00000000000000000000.log").write_bytes(b"")
    m = env.manager()
    assert m.all_logs() == []
    (status,) = m.dir_status()
    assert set(status.stray) == {str(stray), str(future)}
    env.sleep(10 * 60 * 1000)
    assert stray.is_dir() and future.is_dir()
    assert os.listdir(stray) == ["00000000000000000000.log"]


def test_same_partition_in_two_directories_is_offline_and_nothing_changes_on_disk(env: Env) -> None:
    d0, d1 = dirs_in(env.tmp_path, 2)
    (d0 / "t-0").mkdir(parents=True)
    (d1 / "t-0").mkdir(parents=True)
    OffsetCheckpointFile(d0 / RECOVERY_POINT_CHECKPOINT).write({TopicPartition("t", 0): 5})
    config = ManagerConfig.from_props(env.props(**{"log.dirs": [str(d0), str(d1)]}))
    m = LogManager(config, clock_ms=env.clock, scheduler=env.scheduler)
    m.startup()
    assert m.all_logs() == []
    offline = m.offline_partitions()[TopicPartition("t", 0)]
    assert offline.paths == (str(d0 / "t-0"), str(d1 / "t-0"))
    with pytest.raises(KafkaStorageError) as e:
        m.read(TopicPartition("t", 0), 0, 100)
    assert str(d0 / "t-0") in str(e.value) and str(d1 / "t-0") in str(e.value)
    m.shutdown()
    # neither copy was loaded or changed; the copy's checkpoint entry is kept
    assert os.listdir(d0 / "t-0") == [] and os.listdir(d1 / "t-0") == []
    assert OffsetCheckpointFile(d0 / RECOVERY_POINT_CHECKPOINT).read() == {TopicPartition("t", 0): 5}


def test_logs_in_several_directories_are_loaded_back(env: Env) -> None:
    dirs = dirs_in(env.tmp_path, 3)
    m = env.manager(dirs, **{"num.recovery.threads.per.data.dir": 3})
    tps = [TopicPartition("t", i) for i in range(9)]
    where = {}
    for tp in tps:
        env.append(m.get_or_create_log(tp), tp.partition + 1)
        where[tp] = m.dir_of(tp).path
    m.shutdown()
    m2 = env.manager(dirs, **{"num.recovery.threads.per.data.dir": 3})
    assert sorted(lg.topic_partition.partition for lg in m2.all_logs()) == list(range(9))
    for tp in tps:
        lg = m2.get_log(tp)
        assert lg is not None and lg.log_end_offset == tp.partition + 1
        assert m2.dir_of(tp).path == where[tp]


def test_partition_config_overrides_apply_at_load_and_create(env: Env) -> None:
    m = env.manager(topic_configs={"special": {"segment.bytes": 5000}})
    assert m.get_or_create_log(TopicPartition("special", 0)).config.segment_bytes == 5000
    assert m.get_or_create_log(TP0).config.segment_bytes == 1024
    m.shutdown()
    m2 = env.manager(topic_configs={"special": {"segment.bytes": 7000}})
    special = m2.get_log(TopicPartition("special", 0))
    assert special is not None and special.config.segment_bytes == 7000


# ------------------------------------------------------------------ config changes
def test_topic_config_change_updates_log_config(env: Env) -> None:
    m = env.manager()
    logs = [m.get_or_create_log(TopicPartition("topic", i)) for i in range(2)]
    other = m.get_or_create_log(TP0)
    new = m.update_topic_config("topic", {"retention.ms": 5})
    assert all(lg.config is new for lg in logs)
    assert new.retention_ms == 5 and new.segment_bytes == 1024  # broker defaults below overrides
    assert other.config.retention_ms == MAX_LOG_AGE_MS
    assert m.get_or_create_log(TopicPartition("topic", 7)).config.retention_ms == 5


def test_topic_config_change_stops_cleaning_if_compact_is_removed(env: Env) -> None:
    m = env.manager(topic_configs={"topic": {"cleanup.policy": "compact"}})
    aborted: list[TopicPartition] = []
    m.cleaner_hooks = CleanerHooks(abort=aborted.append)
    tp0, tp1 = TopicPartition("topic", 0), TopicPartition("topic", 1)
    logs = [m.get_or_create_log(tp0), m.get_or_create_log(tp1)]
    assert set(m.logs_by_topic("topic")) == set(logs)
    m.update_topic_config("topic", {"cleanup.policy": "delete"})
    assert all(lg.config.delete and not lg.config.compact for lg in logs)
    assert sorted(aborted, key=lambda tp: tp.partition) == [tp0, tp1]


def test_broker_default_change_reaches_every_log(env: Env) -> None:
    m = env.manager(topic_configs={"topic": {"retention.ms": 5}})
    a, b = m.get_or_create_log(TopicPartition("topic", 0)), m.get_or_create_log(TP0)
    m.update_default_log_config(LogConfig.from_props({"segment.bytes": 4096}))
    assert (a.config.segment_bytes, a.config.retention_ms) == (4096, 5)
    assert (b.config.segment_bytes, b.config.retention_ms) == (4096, LogConfig.from_props().retention_ms)


# ------------------------------------------------------------------ truncation
def test_truncate_to_pauses_cleaning_below_the_active_segment(env: Env) -> None:
    m = env.manager()
    calls: list[Any] = []
    m.cleaner_hooks = CleanerHooks(abort_and_pause=lambda tp: calls.append(("pause", tp)),
                                   resume=lambda tp: calls.append(("resume", tp)),
                                   truncate_checkpoint=lambda d, tp, o: calls.append(("checkpoint", tp, o)))
    lg = m.get_or_create_log(TP0)
    env.append_flushed(lg, 100)
    m.truncate_to({TP0: lg.log_end_offset - 1})  # inside the active segment: no pause
    assert calls == []
    assert lg.log_end_offset == 99
    m.truncate_to({TP0: 10, TopicPartition("unknown", 0): 5})
    assert lg.log_end_offset == 10
    assert calls == [("pause", TP0), ("checkpoint", TP0, lg.active_segment.base_offset), ("resume", TP0)]
    assert OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read() == {TP0: 10}


def test_truncate_fully_and_start_at(env: Env) -> None:
    m = env.manager()
    calls: list[str] = []
    m.cleaner_hooks = CleanerHooks(abort_and_pause=lambda tp: calls.append("pause"),
                                   resume=lambda tp: calls.append("resume"))
    lg = m.get_or_create_log(TP0)
    env.append(lg, 30)
    m.truncate_fully_and_start_at(TP0, 500)
    assert (lg.log_start_offset, lg.log_end_offset, lg.segments.base_offsets()) == (500, 500, [500])
    assert calls == ["pause", "resume"]
    assert OffsetCheckpointFile(env.log_dir / RECOVERY_POINT_CHECKPOINT).read() == {TP0: 500}


# ------------------------------------------------------------------ data path
def test_append_read_flush_through_the_manager(env: Env) -> None:
    m = env.manager()
    m.get_or_create_log(TP0)
    info = m.append(TP0, batch(env.clock()))
    assert info.first_offset == 0
    assert m.read(TP0, 0, 1000).first_offset == 0
    assert m.flush(TP0) == 1


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
