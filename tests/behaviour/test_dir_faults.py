"""Injected disk faults: ENOSPC and EIO on write, fsync, rename and fallocate in one log directory.

The fault (tests/disk.py) wraps ``os.write/writev/pwrite/pwritev`` (fds are mapped to paths
through /proc/self/fd), ``os.fsync``, ``os.replace``, ``os.rename`` and ``os.posix_fallocate``
(an index allocates its blocks with it before it maps them: the fault reaches the mmap path) so
that they fail only for paths in the victim directory. Each scenario checks that the victim goes offline (visible in
``dir_status`` with the error), that its partitions raise KafkaStorageError naming it, that the
other directory keeps appending, flushing, reading and checkpointing, and that after the fault
is gone a restart finds every flushed record of both directories intact and ``verify`` clean.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logkeeper.errors import KafkaStorageError
from logkeeper.log.checkpoint import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE, LOCK_FILE
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import ManualClock, Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from logkeeper.tools.verify import verify_path
from tests.disk import Faults

START_MS = 1_700_000_000_000
CHECKPOINT_MS = 1_000


class Node:
    def __init__(self, tmp_path: Path) -> None:
        self.dirs = [tmp_path / "disk0", tmp_path / "disk1"]
        self.clock = ManualClock(START_MS)
        self.scheduler = Scheduler(self.clock)
        self.manager = self.start()
        self.tps = [TopicPartition("t", i) for i in range(4)]  # least loaded: 0, 2 -> disk0; 1, 3 -> disk1
        for tp in self.tps:
            self.manager.get_or_create_log(tp)
        self.flushed = {tp: 0 for tp in self.tps}

    def start(self) -> LogManager:
        self.scheduler = Scheduler(self.clock)
        config = ManagerConfig.from_props({
            "log.dirs": [str(d) for d in self.dirs], "log.segment.bytes": 2048,
            "log.index.size.max.bytes": 4096, "log.initial.task.delay.ms": 0,
            "log.retention.check.interval.ms": CHECKPOINT_MS, "log.retention.ms": 3_600_000,
            "log.flush.offset.checkpoint.interval.ms": CHECKPOINT_MS,
            "log.flush.start.offset.checkpoint.interval.ms": CHECKPOINT_MS,
            "log.flush.scheduler.interval.ms": CHECKPOINT_MS, "log.flush.interval.ms": 3_600_000,
            "log.segment.delete.delay.ms": 0})
        m = LogManager(config, clock_ms=self.clock, scheduler=self.scheduler)
        m.startup()
        return m

    def batch(self, tp: TopicPartition, n: int = 3) -> bytes:
        lg = self.manager.get_log(tp)
        assert lg is not None
        leo = lg.log_end_offset
        return build_batch([Record(leo + k, self.clock(), None, f"{tp}:{leo + k}".encode()) for k in range(n)])

    def write(self, tp: TopicPartition, batches: int = 5, *, flush: bool = True) -> None:
        for _ in range(batches):
            self.manager.append(tp, self.batch(tp))
        if flush:
            self.flushed[tp] = self.manager.flush(tp)

    def victim_tps(self, victim: Path) -> list[TopicPartition]:
        return [tp for tp in self.tps if self.manager.dir_of(tp).path == victim]

    def sleep(self, ms: int) -> None:
        self.clock.advance(ms)
        self.scheduler.tick()


def check_all_flushed_records(m: LogManager, flushed: dict[TopicPartition, int]) -> None:
    for tp, upto in flushed.items():
        lg = m.get_log(tp)
        assert lg is not None, f"{tp} missing after restart"
        assert lg.log_end_offset >= upto
        records = [r for r in read_records(m.read(tp, lg.log_start_offset, 1 << 24).records)]
        by_offset = {r.offset: r for r in records}
        for offset in range(lg.log_start_offset, upto):
            assert by_offset[offset].value == f"{tp}:{offset}".encode(), f"{tp} offset {offset}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    for tp in n.tps:
        n.write(tp)
    yield n
    n.manager.shutdown()


def trigger_append(n: Node, victim: Path) -> None:
    with pytest.raises(KafkaStorageError) as e:
        n.manager.append(n.victim_tps(victim)[0], n.batch(n.victim_tps(victim)[0]))
    assert str(victim) in str(e.value)


def trigger_flush(n: Node, victim: Path) -> None:
    tp = n.victim_tps(victim)[0]
    n.manager.append(tp, n.batch(tp))
    with pytest.raises(KafkaStorageError) as e:
        n.manager.flush(tp)
    assert str(victim) in str(e.value)


def trigger_background_flush(n: Node, victim: Path) -> None:
    tp = n.victim_tps(victim)[0]
    n.manager.update_topic_config("t", {"flush.ms": 0})
    n.manager.append(tp, n.batch(tp))
    n.sleep(CHECKPOINT_MS)


def trigger_checkpoint(n: Node, victim: Path) -> None:
    n.sleep(CHECKPOINT_MS)


def trigger_retention(n: Node, victim: Path) -> None:
    n.manager.update_topic_config("t", {"retention.bytes": 1})
    n.sleep(CHECKPOINT_MS)


def trigger_delete(n: Node, victim: Path) -> None:
    tp = n.victim_tps(victim)[0]
    with pytest.raises(KafkaStorageError):
        n.manager.delete_log(tp)


def trigger_roll(n: Node, victim: Path) -> None:
    """Append until a roll: the new segment's index allocates its blocks (posix_fallocate) before
    mapping them, which is where a full disk must fail, with an OSError and not a SIGBUS."""
    tp = n.victim_tps(victim)[0]
    with pytest.raises(KafkaStorageError) as e:
        for _ in range(200):  # a 2 KiB segment rolls after a dozen batches
            n.manager.append(tp, n.batch(tp))
    assert str(victim) in str(e.value)


SCENARIOS = [
    ("write", "append", trigger_append),
    ("fallocate", "roll", trigger_roll),
    ("write", "checkpoint", trigger_checkpoint),
    ("fsync", "flush", trigger_flush),
    ("fsync", "background-flush", trigger_background_flush),
    ("fsync", "checkpoint", trigger_checkpoint),
    ("rename", "checkpoint", trigger_checkpoint),
    ("rename", "retention", trigger_retention),
    ("rename", "delete", trigger_delete),
]


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize(("op", "when", "trigger"), SCENARIOS, ids=[f"{o}-{w}" for o, w, _t in SCENARIOS])
def test_fault_takes_one_directory_offline(node: Node, monkeypatch: pytest.MonkeyPatch, op: str, when: str,
                                           trigger: Callable[[Node, Path], None], err: int) -> None:
    victim, other = node.dirs
    faults = Faults(monkeypatch, victim, op, err)
    victim_tps, other_tps = node.victim_tps(victim), node.victim_tps(other)
    faults.armed = True
    trigger(node, victim)
    assert faults.hits > 0
    m = node.manager

    # the victim is offline, visibly, with its error
    status = {s.path: s for s in m.dir_status()}
    assert not status[str(victim)].online and status[str(victim)].size_bytes == 0
    assert status[str(victim)].partitions == len(victim_tps)  # the partitions now offline
    assert os.strerror(err) in (status[str(victim)].error or "")
    assert status[str(other)].online and status[str(other)].error is None
    assert m.live_log_dirs == [other] and m.offline_log_dirs == [victim]
    assert not (victim / LOCK_FILE).exists()  # released, as Kafka does for a failed directory
    for tp in victim_tps:
        assert m.get_log(tp) is None
        with pytest.raises(KafkaStorageError) as e:
            m.append(tp, b"")
        assert str(victim) in str(e.value)

    # the other directory goes on, in the foreground and in the background
    for tp in other_tps:
        node.write(tp)
        assert m.read(tp, 0, 1 << 20).first_offset == 0
    node.sleep(CHECKPOINT_MS)
    checkpoint = OffsetCheckpointFile(other / RECOVERY_POINT_CHECKPOINT).read()
    assert {tp: checkpoint[tp] for tp in other_tps} == {tp: node.flushed[tp] for tp in other_tps}
    new_tp = TopicPartition("new", 0)
    m.get_or_create_log(new_tp, is_new=True)
    assert m.dir_of(new_tp).path == other

    # shutdown: only the healthy directory is marked clean
    faults.armed = False
    m.shutdown()
    assert (other / CLEAN_SHUTDOWN_FILE).exists()
    assert not (victim / CLEAN_SHUTDOWN_FILE).exists()

    # restart without the fault: everything flushed is there, in both directories
    node.manager = node.start()
    assert all(s.online for s in node.manager.dir_status())
    lost_by_delete = victim_tps[:1] if when == "delete" else []  # a partial delete may or may not be undone
    check_all_flushed_records(node.manager, {tp: n for tp, n in node.flushed.items() if tp not in lost_by_delete})
    for d in node.dirs:
        report = verify_path(d)
        assert report.ok, "; ".join(map(str, report.problems))
        assert not [p for p in d.rglob("*") if p.name.endswith((".tmp", ".cleaned", ".swap"))]


def test_fault_while_loading_takes_that_directory_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = Node(tmp_path)
    for tp in n.tps:
        n.write(tp)
    n.manager.shutdown()
    victim = n.dirs[0]
    faults = Faults(monkeypatch, victim, "fsync", errno.EIO)
    faults.armed = True  # taking the clean-shutdown marker fsyncs the directory
    m = n.start()
    try:
        assert m.offline_log_dirs == [victim]
        assert "Input/output error" in (m.dir_status()[0].error or "")
        assert sorted(lg.topic_partition.partition for lg in m.all_logs()) == [1, 3]
        with pytest.raises(KafkaStorageError):
            m.get_or_create_log(TopicPartition("t", 0))  # it may be on the offline disk
    finally:
        faults.armed = False
        m.shutdown()
    m2 = n.start()
    try:
        check_all_flushed_records(m2, n.flushed)
    finally:
        m2.shutdown()


def test_every_directory_failing_keeps_the_process(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    for d in node.dirs:
        Faults(monkeypatch, d, "fsync", errno.EIO).armed = True
    for tp in node.tps[:2]:  # one partition in each directory
        node.manager.append(tp, node.batch(tp))
        with pytest.raises(KafkaStorageError):
            node.manager.flush(tp)
    assert node.manager.live_log_dirs == []
    with pytest.raises(KafkaStorageError, match="no log directory is online"):
        node.manager.get_or_create_log(TopicPartition("x", 0), is_new=True)


@pytest.mark.parametrize("op", ["write", "fsync", "rename"])
def test_fault_during_shutdown_leaves_that_directory_unclean(node: Node, monkeypatch: pytest.MonkeyPatch,
                                                             op: str) -> None:
    victim, other = node.dirs
    for tp in node.tps:
        node.write(tp, flush=False)  # shutdown has to flush these
    faults = Faults(monkeypatch, victim, op, errno.EIO)
    faults.armed = True
    node.manager.shutdown()
    faults.armed = False
    assert faults.hits > 0
    assert not (victim / CLEAN_SHUTDOWN_FILE).exists()
    assert (other / CLEAN_SHUTDOWN_FILE).exists()
    assert not (victim / LOCK_FILE).exists() and not (other / LOCK_FILE).exists()
    node.manager = node.start()
    assert [d.had_clean_shutdown for d in node.manager.dirs] == [False, True]
    check_all_flushed_records(node.manager, node.flushed)
    for d in node.dirs:
        assert verify_path(d).ok


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_untrimmed_index_on_a_full_disk_loads_without_allocating(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """A SIGKILL leaves the active segment's index untrimmed: sparse up to its maximum size. Its
    entries end at its first hole, so loading it allocates nothing: with the disk still full (or
    failing) after the kill, every directory loads, recovered, and keeps what was flushed.
    (Allocating the holes first took that directory offline until the disk had room.)"""
    n = Node(tmp_path)
    for tp in n.tps:
        n.write(tp)
    n.manager.shutdown()
    victim, _other = n.dirs
    index = sorted((victim / "t-0").glob("*.index"))[-1]
    os.truncate(index, 4096)  # as the killed process left it: entries, then a hole
    (victim / CLEAN_SHUTDOWN_FILE).unlink()
    faults = Faults(monkeypatch, victim, "fallocate", err)
    faults.armed = True
    m = n.manager = n.start()
    try:
        assert faults.hits == 0
        assert m.offline_log_dirs == [] and sorted(m.live_log_dirs) == sorted(n.dirs)
        assert [d.had_clean_shutdown for d in m.dirs] == [False, True]
        check_all_flushed_records(m, n.flushed)
    finally:
        faults.armed = False
        m.shutdown()
    n.manager = n.start()
    check_all_flushed_records(n.manager, n.flushed)
    for d in n.dirs:
        assert verify_path(d).ok
