"""LogManager: Kafka's LogManagerTest scenarios, in virtual time (ManualClock + Scheduler.tick): logs
created, found and deleted, retention, config changes, truncation and the data path. Recovery and
checkpoints: test_log_manager_recovery.py; directories, locks and the clean-shutdown marker:
test_log_manager_dirs.py."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import (
    OffsetOutOfRangeError,
    UnknownPartitionError,
)
from logkeeper.log.checkpoint import (
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from logkeeper.log.cleaner_hooks import CleanerHooks
from logkeeper.log.log_config import LogConfig
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from tests.manager_env import (
    INITIAL_DELAY_MS,
    MAX_LOG_AGE_MS,
    NAME,
    TP0,
    Env,
    batch,
    dirs_in,
)


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


