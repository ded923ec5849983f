"""The power-cut test's workload and its checks of records: the partitions and their configs,
the values the children write, what the disks must hold after a cut (``Expected``) and the
checks of a recovered log's records. The transactional logs' checks are in powercut_txn_checks.py,
the check of a whole recovered image in powercut_image.py. Kept apart from the FUSE machinery
(test_power_cut.py) so that the checks can be tested on their own (test_power_cut_checks.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from logkeeper.errors import KafkaStorageError, OutOfOrderSequenceError
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import iter_batches, read_records

PARTITIONS = [TopicPartition("cut", 0), TopicPartition("cut", 1), TopicPartition("cutfm", 0),
              TopicPartition("cutms", 0), TopicPartition("cutc", 0), TopicPartition("cutd", 0),
              TopicPartition("cuti", 0), TopicPartition("cutt", 0), TopicPartition("cutct", 0)]
NO_RETENTION = {2, 3, 4, 5, 6, 7, 8}  # indexes of PARTITIONS whose log start must stay 0
COMPACTED = 4  # its records have keys (offset % KEYS); the cleaner may drop all but each key's last
# deleted (LogManager.delete_log) and created again now and then: once a deletion returned, no
# record of the deleted log may come back, and the new log starts from offset 0
DELETED_TOPIC = 5
# written by idempotent producers (a producer id a writer, sequences from 0): a retry of a
# promised batch after the cut must not be appended again (its producer's state survived)
IDEMPOTENT = 6
# written in transactions (a producer id a writer): data batches, then a COMMIT or ABORT marker;
# once a marker's append returned, the outcome is promised: the marker is in the log, an aborted
# transaction is in the transaction index (a read_committed consumer skips its records), and the
# recovered producer state holds open exactly the transactions the log leaves open (their first
# offset bounds the last stable offset)
TRANSACTIONAL = 7
# TRANSACTIONAL's workload with keys (COMPACTED's), compacted by the cleaner: aborted records
# dropped, committed ones superseded, markers removed once their transaction has no data left
# (delete.retention.ms 0: at once); see check_compacted_transactions for what must survive
COMPACTED_TXN = 8
TXN_LOGS = (TRANSACTIONAL, COMPACTED_TXN)
KEYS = 17
TOPIC_PROPS: dict[str, dict[str, Any]] = {
    "cutfm": {"flush.messages": 1, "retention.bytes": -1},
    "cutms": {"flush.ms": 0, "retention.bytes": -1},
    "cutc": {"cleanup.policy": "compact", "flush.messages": 1, "min.cleanable.dirty.ratio": 0.01},
    "cutd": {"flush.messages": 1, "retention.bytes": -1},
    "cuti": {"flush.messages": 1, "retention.bytes": -1},
    "cutt": {"flush.messages": 1, "retention.bytes": -1},
    "cutct": {"cleanup.policy": "compact", "flush.messages": 1, "min.cleanable.dirty.ratio": 0.01,
              "delete.retention.ms": 0},
}
CLEANER_PROPS = {"log.cleaner.backoff.ms": 10, "log.cleaner.dedupe.buffer.size": 1 << 20,
                 "log.cleaner.io.buffer.size": 64 * 1024}


def manager_props(dirs: list[Path]) -> dict[str, Any]:
    return {
        "log.dirs": [str(d) for d in dirs],
        "log.segment.bytes": 8 * 1024,  # many rolls
        "log.index.size.max.bytes": 4 * 1024,
        "log.index.interval.bytes": 512,  # index entries in every segment
        "log.retention.bytes": 24 * 1024,
        "log.retention.ms": -1,
        "log.segment.delete.delay.ms": 20,
        "log.initial.task.delay.ms": 0,
        "log.retention.check.interval.ms": 30,
        "log.flush.scheduler.interval.ms": 10,
        "log.flush.offset.checkpoint.interval.ms": 15,
        "log.flush.start.offset.checkpoint.interval.ms": 15,
        "num.recovery.threads.per.data.dir": 1,
    }


def open_manager(dirs: list[Path], scheduler: Scheduler | None) -> LogManager:
    """A started LogManager on ``dirs`` (its own scheduler thread when ``scheduler`` is None),
    the topics' overrides in place BEFORE it starts, as the sidecar does (server/service.py): its
    retention task runs at once, and with the overrides applied after the start the broker's
    retention.bytes could delete segments of a topic that has none (found by ``make crash``:
    "cutms-0 starts at 2027 without retention")."""
    m = LogManager(ManagerConfig.from_props(manager_props(dirs)), scheduler=scheduler)
    for topic, props in TOPIC_PROPS.items():
        m.update_topic_config(topic, props)
    m.startup()
    return m


def key_of(i: int, offset: int) -> bytes | None:
    return str(offset % KEYS).encode() if i in (COMPACTED, COMPACTED_TXN) else None


def value_of(offset: int, child_id: int, repeat: int) -> bytes:
    return f"{offset}.{child_id}|".encode() * repeat


def parse_value(value: bytes | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        offset, child_id = value.split(b"|", 1)[0].split(b".")
        return int(offset), int(child_id)
    except ValueError:
        return None


@dataclass
class Figures:
    cuts: int = 0
    torn_cuts: int = 0
    productive: int = 0
    promises: int = 0
    records_checked: int = 0
    records_lost: int = 0
    superseded_after_promise: int = 0  # promised records the cleaner rightly dropped (check_compacted)
    aborted_cleaned: int = 0  # promised records of aborted transactions the cleaner dropped (COMPACTED_TXN)
    lost_bytes: int = 0
    deletions: int = 0  # deletions of DELETED_TOPIC's log that returned before the cut
    deleted_records_back: int = 0
    retries: int = 0  # promised idempotent batches sent again after the cut
    retries_appended: int = 0  # ... and appended a second time (a duplicate: a loss of producer state)
    markers_checked: int = 0  # promised transaction markers found in the recovered log as promised
    markers_lost: int = 0  # ... or not
    markers_cleaned: int = 0  # COMPACTED_TXN's promised markers the cleaner rightly removed (no data left)
    open_transactions: int = 0  # transactions the recovered logs left open (each checked against the state)
    transaction_state_wrong: int = 0  # recovered states (index, open transactions) that disagree with the log
    undone_dir_changes: int = 0
    fsyncs: int = 0
    dir_fsyncs: int = 0


@dataclass
class Expected:
    """What the disks must hold: promised end offsets and, per offset, the child that wrote it."""

    promised: dict[int, int] = field(default_factory=dict)
    writer: dict[tuple[int, int], int] = field(default_factory=dict)  # (partition, offset) -> child id
    # (partition, offset) -> the child whose promise covers it, when that child did not write it
    # itself (it was on disk when the child started): its writer is learnt at the first check
    older: dict[tuple[int, int], int] = field(default_factory=dict)
    # (partition, offset) below a promise that was on no disk when the promising child started
    gaps: set[tuple[int, int]] = field(default_factory=set)
    # partition -> the lowest writer id its records may have: those of lower ids belong to a log
    # whose deletion returned before the cut (writer ids grow with each child, start and deletion)
    deleted_below: dict[int, int] = field(default_factory=dict)
    # IDEMPOTENT's producer id -> its last promised batch: (base offset, base sequence, records)
    batches: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # TXN_LOGS' promised markers: (partition, offset) -> (producer id, the transaction's first offset, aborted)
    txns: dict[tuple[int, int], tuple[int, int, bool]] = field(default_factory=dict)
    # COMPACTED_TXN's promised data records: offset -> producer id (the cleaner may drop them: the
    # checks need to know which were written in which transaction)
    txn_data: dict[int, int] = field(default_factory=dict)

    def forget(self, i: int) -> None:
        """The log of partition ``i`` is being deleted: its promises no longer hold (a cut may
        keep it or not, until the deletion returns)."""
        self.promised.pop(i, None)
        for table in (self.writer, self.older, self.txns):
            for key in [k for k in table if k[0] == i]:
                del table[key]
        self.gaps = {k for k in self.gaps if k[0] != i}
        if i == COMPACTED_TXN:
            self.txn_data.clear()

    def deleted(self, i: int, next_writer: int) -> None:
        """The deletion of partition ``i``'s log returned; ``next_writer`` writes its new log."""
        self.forget(i)
        self.deleted_below[i] = next_writer

    def add(self, i: int, end: int, child_id: int, start_leo: int, found: list[tuple[int, int]]) -> None:
        before = self.promised.get(i, 0)
        if end <= before:
            return
        for offset in range(before, end):
            if offset >= start_leo:
                self.writer[(i, offset)] = child_id
            elif any(base <= offset < nxt for base, nxt in found):
                self.older.setdefault((i, offset), child_id)
            else:
                self.gaps.add((i, offset))
        self.promised[i] = end


def check_record(i: int, rec: Any, expected: Expected, problems: list[str]) -> bool:
    """Whether a record below the promise holds what was written at its offset (see ``Expected``)."""
    tp = PARTITIONS[i]
    got = parse_value(rec.value)
    key = (i, rec.offset)
    writer = expected.writer.get(key)
    if got is None or got[0] != rec.offset or rec.key != key_of(i, rec.offset):
        problems.append(f"{tp} offset {rec.offset} holds key {rec.key!r} value {rec.value!r}")
        return False
    if writer is not None and got[1] != writer:
        problems.append(f"{tp} offset {rec.offset} holds the record of writer {got[1]}, "
                        f"writer {writer} wrote the promised one")
        return False
    if writer is None:
        covered_by = expected.older.pop(key, None)
        expected.writer[key] = got[1]  # from now on it must stay that record
        if covered_by is not None and got[1] >= covered_by:
            problems.append(f"{tp} offset {rec.offset} holds a record of writer {got[1]}, "
                            f"written after writer {covered_by} promised it")
            return False
    return True


def read_from(m: LogManager, tp: TopicPartition, offset: int) -> tuple[list[Any], BaseException | None]:
    try:
        batch = m.read(tp, offset, 1 << 20).records
    except Exception as e:  # a read failing is a lost record, named by the caller
        return [], e
    return [rec for rec in read_records(batch) if rec.offset >= offset] if batch else [], None


def records_in(m: LogManager, tp: TopicPartition, problems: list[str] | None = None) -> Iterator[Any]:
    """Every record of ``tp``'s log from its start (markers' records too), read by batches: a read
    may hold only batches the cleaner emptied (a producer's last batch keeps its header) and no
    record, and a walk stepping by records stopped there (found by the power cuts of
    COMPACTED_TXN). An unreadable offset ends the walk, named in ``problems`` when given."""
    lg = m.get_log(tp)
    assert lg is not None
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        try:
            data = m.read(tp, offset, 1 << 20).records
        except Exception as e:
            if problems is not None:
                problems.append(f"{tp} offset {offset} unreadable: {e}")
            return
        if not data:
            return
        last = list(iter_batches(np.frombuffer(data, dtype=np.uint8)))[-1].header
        start, offset = offset, last.base_offset + last.last_offset_delta + 1
        yield from (rec for rec in read_records(data) if rec.offset >= start)


def check_kept_record(i: int, rec: Any, want: int, expected: Expected, figures: Figures,
                      problems: list[str]) -> bool:
    """A record a compacted log kept: below the promise, ``check_record``'s; above it, it must hold
    what was written at its offset. False when it does not (above the promise)."""
    if rec.offset < want:
        figures.records_checked += 1
        figures.records_lost += not check_record(i, rec, expected, problems)
    elif (parse_value(rec.value) or (-1,))[0] != rec.offset or rec.key != key_of(i, rec.offset):
        problems.append(f"{PARTITIONS[i]} offset {rec.offset} (after the promise) holds key {rec.key!r} "
                        f"value {rec.value!r}")
        return False
    return True


def check_contiguous(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                     problems: list[str], markers: frozenset[int] = frozenset()) -> None:
    """Every offset from the log start up to the promise is there (except gaps no promise covered);
    ``markers``: offsets of transaction markers, there but holding no written value."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    offset = lg.log_start_offset
    while offset < want:
        if (i, offset) in expected.gaps:  # no promise covers it (see Expected.gaps)
            # it may even run up to the promise with no record after it: a roll made the next
            # segment's name durable, the old segment's unflushed tail was lost, and the log end
            # offset recovered from the empty new segment is above the gap (as in Kafka)
            offset += 1
            continue
        records, err = read_from(m, tp, offset)
        if offset < want and (not records or records[0].offset != offset):
            lost = want - offset
            problems.append(f"{tp} offset {offset} unreadable ({err or 'no batch'}): {lost} promised "
                            "records lost from there")
            figures.records_lost += lost
            return
        for rec in records:
            if rec.offset >= want:
                break
            while offset < rec.offset and (i, offset) in expected.gaps:
                offset += 1
            if rec.offset != offset:
                problems.append(f"{tp} offset {offset} missing (the next record is {rec.offset})")
                figures.records_lost += 1
            offset = rec.offset + 1
            if rec.offset in markers:
                continue  # check_transactions checks it
            figures.records_checked += 1
            figures.records_lost += not check_record(i, rec, expected, problems)
        offset = max(offset, records[-1].offset + 1)


def check_compacted(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                    problems: list[str]) -> None:
    """The records kept are the ones written; each key's last promised record is among them, or a
    later record of that key is: between draining the promises and the cut the child goes on
    appending (durable, unpromised records), rolling and cleaning, and the cleaner rightly drops
    a promised record that such a record supersedes (found by ``make crash``: cut 21 of the
    default seed lost 8 keys' promised records to their successors)."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    present: set[int] = set()
    newest: dict[bytes | None, int] = {}  # key -> its newest offset anywhere in the log
    for rec in records_in(m, tp, problems):
        if rec.offset < want:
            present.add(rec.offset)
        if check_kept_record(i, rec, want, expected, figures, problems):
            newest[rec.key] = rec.offset
    for key in range(KEYS):
        last = want - 1 - (want - 1 - key) % KEYS  # the key's last offset below the promise
        while last >= 0 and (i, last) in expected.gaps:
            last -= KEYS
        if last < 0 or last in present:
            continue
        if newest.get(str(key).encode(), -1) > last:
            figures.superseded_after_promise += 1
        else:
            problems.append(f"{tp} key {key}: its last promised record, offset {last}, is gone "
                            "and no later record of the key is there")
            figures.records_lost += 1


def check_no_deleted_records(m: LogManager, i: int, expected: Expected, figures: Figures,
                             problems: list[str]) -> None:
    """No record of a log whose deletion returned is back: not below the promise (check_record
    would catch it there too) nor above it, where no promise looks."""
    floor = expected.deleted_below.get(i)
    lg = m.get_log(PARTITIONS[i])
    if floor is None or lg is None:
        return
    for rec in records_in(m, PARTITIONS[i]):  # an unreadable offset: the other checks say so
        got = parse_value(rec.value)
        if got is not None and got[1] < floor:
            problems.append(f"{PARTITIONS[i]} offset {rec.offset} holds a record of writer {got[1]}, "
                            f"whose log was deleted (the deletion returned before the cut)")
            figures.deleted_records_back += 1
            return


def idempotent_batch(base_offset: int, producer_id: int, base_sequence: int, count: int) -> bytes:
    """IDEMPOTENT's batch: ``count`` records from ``base_offset`` by producer ``producer_id``
    (epoch 0; its writer id too) from ``base_sequence``; a retry is built the same way."""
    now = int(time.time() * 1000)
    return build_batch([Record(base_offset + k, now, None, value_of(base_offset + k, producer_id, 1))
                        for k in range(count)], producer_id=producer_id, producer_epoch=0,
                       base_sequence=base_sequence)


def check_retries(m: LogManager, expected: Expected, figures: Figures, problems: list[str]) -> None:
    """Send each producer's last promised batch again, as a client does when the power cut took
    its answer: it must be answered as a duplicate with its offsets, or refused as out of order when
    a later batch of the producer is in the log, never appended twice. Run last: it appends."""
    tp = PARTITIONS[IDEMPOTENT]
    lg = m.get_log(tp)
    for pid, (base, seq, count) in sorted(expected.batches.items()):
        if lg is None:
            problems.append(f"{tp} is missing: producer {pid}'s batch at {base} was promised")
            return
        figures.retries += 1
        end = lg.log_end_offset
        entry = lg.producer_state.producers.get(pid)
        try:
            info = m.append(tp, idempotent_batch(base, pid, seq, count))
        except OutOfOrderSequenceError:
            if entry is None or entry.last_seq < seq + count:
                problems.append(f"{tp}: the retry of producer {pid}'s batch at {base} (sequence {seq}) was "
                                f"refused as out of order, with no later batch of the producer in the log")
            continue
        except KafkaStorageError as e:
            problems.append(f"{tp}: the retry of producer {pid}'s batch at {base} failed: {e}")
            continue
        if not info.duplicate or info.first_offset != base:
            figures.retries_appended += 1
            problems.append(f"{tp}: the retry of producer {pid}'s promised batch at {base} (sequence {seq}) "
                            f"was appended again at {info.first_offset} (the log ended at {end}): "
                            "its producer state was lost")
