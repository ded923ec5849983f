"""LogManager: flushing, the recovery-point and log-start checkpoints, and what a start-up loads back
(Kafka's LogManagerTest scenarios, in virtual time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from logkeeper.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from tests.manager_env import (
    INITIAL_DELAY_MS,
    NAME,
    TP0,
    Env,
    dirs_in,
)


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


