"""Kafka's LogCleanerManagerTest scenarios: choosing the filthiest log, cleanable ranges, checkpoints,
cleaning states and their transitions, uncleanable partitions (with logkeeper's retry backoff)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from logkeeper.cleaner.manager import CleanerManager
from logkeeper.cleaner.selection import cleanable_offsets
from logkeeper.cleaner.states import ABORTED, IN_PROGRESS, Paused, state_name
from logkeeper.errors import LogCleaningAbortedError
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from tests.cleaner_logs import START_MS, Clock, TxnProducer, append_kvs

HOUR = 3_600_000


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_log(log_dir: Path, clock: Clock, tp: TopicPartition, policy: str = "compact", **props: object) -> Log:
    config = {"segment.bytes": 1024, "cleanup.policy": policy, "file.delete.delay.ms": 0,
              "min.cleanable.dirty.ratio": 0.05}  # Kafka's createLowRetentionLogConfig
    config.update({k.replace("_", "."): v for k, v in props.items()})
    return Log(log_dir / str(tp), LogConfig.from_props(config), clock_ms=clock)


def filthy_logs(log_dir: Path, clock: Clock, tps: list[TopicPartition], start_batches: int = 20,
                increment: int = 5) -> dict[TopicPartition, Log]:
    """Kafka's setupIncreasinglyFilthyLogs: one-record batches, a roll every 5 batches, each log 5
    batches longer than the previous one."""
    logs = {}
    batches = start_batches
    for tp in tps:
        log = make_log(log_dir, clock, tp, segment_bytes=2048)
        for i in range(batches):
            append_kvs(log, [(b"a", str(i).encode())])
            if (i + 1) % 5 == 0:
                log.roll()
        batches += increment
        logs[tp] = log
    return logs


def manager(log_dirs: list[Path], logs: dict[TopicPartition, Log], clock: Clock) -> CleanerManager:
    return CleanerManager(log_dirs, lambda: logs, clock_ms=clock, retry_initial_ms=1000, retry_max_ms=4000)


TP = TopicPartition("log", 0)


def checkpointed(tmp_path: Path, clock: Clock, checkpoint: int, log_start: int = 0) -> CleanerManager:
    """Kafka's set-up of the dirty-offset tests: one filthy log (foo-0, 20 one-record batches) whose
    log start offset was raised to ``log_start``, and a manager whose cleaner checkpoint for it is
    ``checkpoint``."""
    tp = TopicPartition("foo", 0)
    logs = filthy_logs(tmp_path, clock, [tp])
    logs[tp].maybe_increment_log_start_offset(log_start)
    m = manager([tmp_path], logs, clock)
    m.update_checkpoints(tmp_path, update=(tp, checkpoint))
    return m


def test_grab_filthiest_returns_the_dirtiest(tmp_path: Path, clock: Clock) -> None:
    tps = [TopicPartition("foo", i) for i in range(3)]
    logs = filthy_logs(tmp_path, clock, tps)
    m = manager([tmp_path], logs, clock)
    for tp in logs:
        m.update_checkpoints(tmp_path, update=(tp, 20))  # cleanable ranges [20, 20], [20, 25], [20, 30]
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == tps[2]
    assert m.cleaning_state(tps[2]) == IN_PROGRESS


def test_grab_filthiest_ignores_uncleanable_and_in_progress(tmp_path: Path, clock: Clock) -> None:
    tps = [TopicPartition("foo", i) for i in range(3)]
    logs = filthy_logs(tmp_path, clock, tps)
    m = manager([tmp_path], logs, clock)
    m.mark_partition_uncleanable(tmp_path, tps[2])
    m.set_cleaning_state(tps[1], IN_PROGRESS)
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == tps[0]
    assert m.grab_filthiest_compacted_log() is None  # foo-0 is now in progress too


def test_uncleanable_partition_is_retried_with_backoff(tmp_path: Path, clock: Clock) -> None:
    tps = [TopicPartition("foo", 0)]
    logs = filthy_logs(tmp_path, clock, tps)
    m = manager([tmp_path], logs, clock)
    first = m.mark_partition_uncleanable(tmp_path, tps[0], "boom")
    assert first.failures == 1 and first.retry_at_ms == START_MS + 1000
    assert m.grab_filthiest_compacted_log() is None
    assert m.deletable_logs() == []
    clock.now += 1000
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None
    m.done_cleaning(tps[0], tmp_path, chosen.first_dirty_offset)
    second = m.mark_partition_uncleanable(tmp_path, tps[0], "boom again")
    assert second.failures == 2 and second.retry_at_ms == clock.now + 2000
    third = m.mark_partition_uncleanable(tmp_path, tps[0], "and again")
    fourth = m.mark_partition_uncleanable(tmp_path, tps[0], "and again")
    assert (third.retry_at_ms - clock.now, fourth.retry_at_ms - clock.now) == (4000, 4000)  # capped
    assert list(m.uncleanable_partitions(tmp_path)) == tps
    assert m.uncleanable_bytes(tmp_path) > 0
    m.clear_uncleanable(tmp_path, tps[0])
    assert m.uncleanable_partitions(tmp_path) == {}


def test_dirty_offset_reset_if_larger_than_end_offset(tmp_path: Path, clock: Clock) -> None:
    m = checkpointed(tmp_path, clock, 200)
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.first_dirty_offset == 0


def test_dirty_offset_reset_if_smaller_than_start_offset(tmp_path: Path, clock: Clock) -> None:
    m = checkpointed(tmp_path, clock, 0, log_start=10)
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.first_dirty_offset == 10


def test_log_start_offset_beyond_active_segment_base(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, segment_bytes=2048)
    for _ in range(3):
        append_kvs(log, [(b"k", b"v")] * 3)
    assert len(log.segments) == 1
    log.maybe_increment_log_start_offset(2)
    m = manager([tmp_path], {TP: log}, clock)
    m.update_checkpoints(tmp_path, update=(TP, 0))
    assert m.grab_filthiest_compacted_log() is None


def test_dirty_offset_beyond_active_segment_base(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, segment_bytes=2048)
    append_kvs(log, [(b"k", b"v")] * 3)
    append_kvs(log, [(b"k", b"v")] * 3)
    m = manager([tmp_path], {TP: log}, clock)
    m.update_checkpoints(tmp_path, update=(TP, 3))
    assert m.grab_filthiest_compacted_log() is None


@pytest.mark.parametrize(("policy", "deletable"), [("delete", 0), ("compact,delete", 1), ("compact", 1)])
def test_deletable_logs_by_policy(tmp_path: Path, clock: Clock, policy: str, deletable: int) -> None:
    log = make_log(tmp_path, clock, TP, policy)
    m = manager([tmp_path], {TP: log}, clock)
    assert len(m.deletable_logs()) == deletable


def test_deletable_logs_skip_uncleanable(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP)
    m = manager([tmp_path], {TP: log}, clock)
    m.mark_partition_uncleanable(tmp_path, TP)
    assert m.deletable_logs() == []


def test_logs_under_cleanup_ineligible_for_compaction(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, "delete")
    m = manager([tmp_path], {TP: log}, clock)
    append_kvs(log, [(b"test", b"test")])
    log.roll()
    append_kvs(log, [(b"test", b"test")])
    paused = m.pause_cleaning_for_non_compacted_partitions()
    assert len(paused) == 1
    log.config = log.config.with_overrides({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0})
    assert m.grab_filthiest_compacted_log() is None
    m.resume_cleaning([tp for tp, _log in paused])
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None
    log.config = log.config.with_overrides({"cleanup.policy": "delete"})
    assert m.pause_cleaning_for_non_compacted_partitions() == []
    m.done_deleting([chosen.topic_partition])
    assert len(m.pause_cleaning_for_non_compacted_partitions()) == 1


def test_checkpoint_update_add_remove_and_dir_failure(tmp_path: Path, clock: Clock) -> None:
    dir1, dir2 = tmp_path / "d1", tmp_path / "d2"
    tp2 = TopicPartition("log", 1)
    log1 = make_log(dir1, clock, TP)
    log2 = make_log(dir2, clock, tp2)
    m = manager([dir1, dir2], {TP: log1, tp2: log2}, clock)
    assert m.all_cleaner_checkpoints().get(TP, 0) != 5
    m.update_checkpoints(dir1, update=(TP, 5))
    m.update_checkpoints(dir2, update=(tp2, 5))
    assert m.all_cleaner_checkpoints() == {TP: 5, tp2: 5}
    assert (dir1 / "cleaner-offset-checkpoint").read_text() == "0\n1\nlog 0 5\n"
    m.update_checkpoints(dir1, remove=TP)
    assert TP not in m.all_cleaner_checkpoints()
    m.update_checkpoints(dir1, update=(TP, 5))
    m.handle_log_dir_failure(dir1)
    assert m.all_cleaner_checkpoints() == {tp2: 5}


def test_maybe_truncate_checkpoint(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP)
    m = manager([tmp_path], {TP: log}, clock)
    m.update_checkpoints(tmp_path, update=(TP, 5))
    m.maybe_truncate_checkpoint(tmp_path, TP, 1000)
    assert m.all_cleaner_checkpoints()[TP] == 5
    m.maybe_truncate_checkpoint(tmp_path, TP, 1)
    assert m.all_cleaner_checkpoints()[TP] == 1


def test_alter_checkpoint_dir(tmp_path: Path, clock: Clock) -> None:
    dir1, dir2 = tmp_path / "d1", tmp_path / "d2"
    dir2.mkdir()
    log = make_log(dir1, clock, TP)
    m = manager([dir1, dir2], {TP: log}, clock)
    m.update_checkpoints(dir1, update=(TP, 5))
    m.mark_partition_uncleanable(dir1, TP)
    m.alter_checkpoint_dir(TP, dir1, dir2)
    assert m.all_cleaner_checkpoints()[TP] == 5
    assert TP in m.uncleanable_partitions(dir2) and TP not in m.uncleanable_partitions(dir1)
    m.handle_log_dir_failure(dir2)
    assert TP not in m.all_cleaner_checkpoints()


def test_concurrent_cleanup_and_truncation_or_deletion(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, "delete")
    m = manager([tmp_path], {TP: log}, clock)
    paused = m.pause_cleaning_for_non_compacted_partitions()
    m.abort_and_pause_cleaning(TP)
    m.resume_cleaning([TP])
    m.resume_cleaning([tp for tp, _log in paused])
    assert m.cleaning_state(TP) is None
    paused = m.pause_cleaning_for_non_compacted_partitions()
    m.abort_cleaning(TP)
    m.resume_cleaning([tp for tp, _log in paused])
    assert m.cleaning_state(TP) is None


def test_state_transitions(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP)
    m = manager([tmp_path], {TP: log}, clock)
    with pytest.raises(RuntimeError):
        m.done_cleaning(TP, tmp_path, 1)
    m.set_cleaning_state(TP, Paused(1))
    with pytest.raises(RuntimeError):
        m.done_cleaning(TP, tmp_path, 1)
    m.set_cleaning_state(TP, IN_PROGRESS)
    m.done_cleaning(TP, tmp_path, 1)
    assert m.cleaning_state(TP) is None and m.all_cleaner_checkpoints()[TP] == 1
    m.set_cleaning_state(TP, ABORTED)
    m.done_cleaning(TP, tmp_path, 7)
    assert m.cleaning_state(TP) == Paused(1) and m.all_cleaner_checkpoints()[TP] == 1
    m.abort_and_pause_cleaning(TP)
    assert m.cleaning_state(TP) == Paused(2) and state_name(m.cleaning_state(TP)) == "paused(2)"
    m.resume_cleaning([TP])
    m.resume_cleaning([TP])
    assert m.cleaning_state(TP) is None
    with pytest.raises(RuntimeError):
        m.resume_cleaning([TP])
    m.set_cleaning_state(TP, IN_PROGRESS)
    with pytest.raises(RuntimeError):
        m.resume_cleaning([TP])
    m.set_cleaning_state(TP, ABORTED)
    with pytest.raises(RuntimeError):
        m.abort_and_pause_cleaning(TP)


def test_done_deleting(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, "compact,delete")
    m = manager([tmp_path], {TP: log}, clock)
    with pytest.raises(RuntimeError):
        m.done_deleting([TP])
    m.set_cleaning_state(TP, Paused(1))
    with pytest.raises(RuntimeError):
        m.done_deleting([TP])
    m.set_cleaning_state(TP, IN_PROGRESS)
    m.done_deleting([TP])
    assert m.cleaning_state(TP) is None
    m.set_cleaning_state(TP, ABORTED)
    m.done_deleting([TP])
    assert m.cleaning_state(TP) == Paused(1)


def test_abort_and_pause_waits_for_the_cleaner(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP)
    m = manager([tmp_path], {TP: log}, clock)
    m.set_cleaning_state(TP, IN_PROGRESS)
    stopped = threading.Event()

    def cleaner() -> None:  # notices the abort between windows, then reports done
        while True:
            try:
                m.check_cleaning_aborted(TP)
            except LogCleaningAbortedError:
                break
            time.sleep(0.01)
        stopped.set()
        m.done_cleaning(TP, tmp_path, 0)

    worker = threading.Thread(target=cleaner)
    worker.start()
    m.abort_and_pause_cleaning(TP, timeout_s=10)
    assert stopped.is_set() and m.cleaning_state(TP) == Paused(1)
    worker.join()
    m.set_cleaning_state(TP, IN_PROGRESS)
    with pytest.raises(TimeoutError):
        m.abort_and_pause_cleaning(TP, timeout_s=0.2)


def test_cleanable_offsets_bounds(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP)
    while len(log.segments) < 8:
        append_kvs(log, [(str(log.log_end_offset).encode(), b"v")])
    offsets = cleanable_offsets(log, 0, clock.now)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, log.active_segment.base_offset)


def test_cleanable_offsets_for_time(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, min_compaction_lag_ms=HOUR)
    while len(log.segments) < 4:
        append_kvs(log, [(str(log.log_end_offset).encode(), b"v")])
    active_at_t0 = log.active_segment.base_offset
    clock.now += HOUR + 1
    while len(log.segments) < 8:
        append_kvs(log, [(str(log.log_end_offset).encode(), b"v")])
    offsets = cleanable_offsets(log, 0, clock.now)
    assert offsets.first_uncleanable_dirty_offset == active_at_t0


def test_cleanable_offsets_for_short_time(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, min_compaction_lag_ms=HOUR)
    while len(log.segments) < 8:
        append_kvs(log, [(str(log.log_end_offset).encode(), b"v")])
    clock.now += HOUR + 1
    assert cleanable_offsets(log, 0, clock.now).first_uncleanable_dirty_offset == log.active_segment.base_offset


def test_cleanable_offsets_needs_checkpoint_reset(tmp_path: Path, clock: Clock) -> None:
    tp = TopicPartition("foo", 0)
    log = filthy_logs(tmp_path, clock, [tp])[tp]
    log.maybe_increment_log_start_offset(10)
    assert not cleanable_offsets(log, 15, clock.now).force_update_checkpoint
    log.maybe_increment_log_start_offset(20)
    assert cleanable_offsets(log, 15, clock.now).force_update_checkpoint
    assert cleanable_offsets(log, log.log_end_offset + 1, clock.now).force_update_checkpoint


def test_undecided_transactional_data_not_cleanable(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, TP, min_compaction_lag_ms=HOUR)
    p = TxnProducer(log, 15)
    p.append([1, 2])
    p.append([3])
    log.roll()
    clock.now += HOUR + 1
    offsets = cleanable_offsets(log, 0, clock.now)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 0)
    p.abort()
    log.roll()
    offsets = cleanable_offsets(log, 0, clock.now)
    assert offsets.first_uncleanable_dirty_offset == 3
    clock.now += HOUR + 1
    assert cleanable_offsets(log, 0, clock.now).first_uncleanable_dirty_offset == 4


def test_checkpoint_updated_for_invalid_offset(tmp_path: Path, clock: Clock) -> None:
    tp0, tp1 = TopicPartition("foo", 0), TopicPartition("foo", 1)
    logs = filthy_logs(tmp_path, clock, [tp0, tp1])
    logs[tp0].maybe_increment_log_start_offset(15)
    m = manager([tmp_path], logs, clock)
    m.update_checkpoints(tmp_path, update=(tp0, 10))
    m.update_checkpoints(tmp_path, update=(tp1, 5))
    chosen = m.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == tp1
    assert m.all_cleaner_checkpoints()[tp0] == 15


def test_checkpoint_updated_for_invalid_offset_no_cleaning(tmp_path: Path, clock: Clock) -> None:
    m = checkpointed(tmp_path, clock, 15, log_start=20)
    assert m.grab_filthiest_compacted_log() is None
    assert m.all_cleaner_checkpoints()[TopicPartition("foo", 0)] == 20


def test_max_compaction_lag_makes_a_log_cleanable(tmp_path: Path, clock: Clock) -> None:
    from logkeeper.cleaner.stats import PreCleanStats

    log = make_log(tmp_path, clock, TP, max_compaction_lag_ms=HOUR, min_cleanable_dirty_ratio=0.99)
    for i in range(30):
        append_kvs(log, [(str(i).encode(), b"v")])
    log.roll()
    m = manager([tmp_path], {TP: log}, clock)
    m.update_checkpoints(tmp_path, update=(TP, 15))
    assert m.grab_filthiest_compacted_log() is None  # the ratio alone is not enough
    clock.now += 2 * HOUR
    pre = PreCleanStats()
    chosen = m.grab_filthiest_compacted_log(pre)
    assert chosen is not None and chosen.need_compaction_now
    assert pre.delayed_partitions == 1 and pre.max_compaction_delay_ms >= HOUR
    assert 0 < m.dirtiest_log_cleanable_ratio < 0.99
