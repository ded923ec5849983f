"""The power-cut test's own checks (``powercut_checks.check_contiguous``) on logs built here: a
check that reports a loss where there is none hides real losses in the noise, one that misses a
loss proves nothing. No FUSE needed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from tests.crash.powercut_checks import (
    CLEANER_PROPS,
    COMPACTED,
    COMPACTED_TXN,
    DELETED_TOPIC,
    IDEMPOTENT,
    KEYS,
    PARTITIONS,
    TOPIC_PROPS,
    TRANSACTIONAL,
    Expected,
    Figures,
    check_compacted,
    check_contiguous,
    check_no_deleted_records,
    check_retries,
    idempotent_batch,
    key_of,
    manager_props,
    open_manager,
    value_of,
)
from tests.crash.powercut_image import check_image
from tests.crash.powercut_txn_checks import (
    check_compacted_transactions,
    check_transactions,
    marker_batch,
    transactional_batch,
)

PLAIN = 3  # cutms-0: neither compacted nor under retention


def _manager(tmp_path: Path) -> LogManager:
    m = LogManager(ManagerConfig.from_props(manager_props([tmp_path / "d0", tmp_path / "d1"])),
                   scheduler=Scheduler())
    m.startup()
    return m


def _append(m: LogManager, offsets: range, writer: int) -> None:
    now = int(time.time() * 1000)
    for o in offsets:
        m.append(PARTITIONS[PLAIN], build_batch([Record(o, now, None, value_of(o, writer, 1))]))


def _expected(promised: int, writer: int, written: range, gaps: range) -> Expected:
    e = Expected()
    e.promised[PLAIN] = promised
    e.writer.update({(PLAIN, o): writer for o in written})
    e.gaps.update((PLAIN, o) for o in gaps)
    return e


def _check(m: LogManager, expected: Expected) -> list[str]:
    problems: list[str] = []
    check_contiguous(m, PLAIN, expected.promised[PLAIN], expected, Figures(), problems)
    return problems


def test_a_gap_up_to_the_promise_is_no_loss(tmp_path: Path) -> None:
    """Found by `make crash` (cut 654 of seed 404): the old segment's unflushed tail 10-14 was lost,
    the rolled empty segment at 15 survived, so the log ends at 15 with nothing after the gap; a
    later child's promise of 15 covers no record there."""
    m = _manager(tmp_path)
    try:
        lg = m.get_or_create_log(PARTITIONS[PLAIN])
        _append(m, range(10), writer=7)
        lg.roll(15)  # the state recovery leaves: the next segment's base above the lost tail
        assert lg.log_end_offset == 10 and lg.active_segment.base_offset == 15
        lg.log_end_offset = 15  # what recovery reads from the empty last segment (as Kafka does)
        assert _check(m, _expected(15, 7, range(10), range(10, 15))) == []
        # the same log without the gap known: the check must call it a loss
        assert any("offset 10 unreadable" in p for p in _check(m, _expected(15, 7, range(10), range(0))))
    finally:
        m.shutdown()


def test_a_gap_between_records_is_skipped_and_a_hole_is_a_loss(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    try:
        lg = m.get_or_create_log(PARTITIONS[PLAIN])
        _append(m, range(10), writer=7)
        lg.roll(15)
        lg.log_end_offset = 15
        _append(m, range(15, 20), writer=8)
        expected = _expected(20, 8, range(15, 20), range(10, 15))
        expected.writer.update({(PLAIN, o): 7 for o in range(10)})
        assert _check(m, expected) == []
        # offsets 10-14 promised as written: the hole is a loss
        lost = _expected(20, 8, range(15, 20), range(0))
        lost.writer.update({(PLAIN, o): 7 for o in range(15)})
        assert any("offset 10" in p for p in _check(m, lost))
        # a record of another writer where the promised one was is a loss too
        wrong = _expected(20, 9, range(15, 20), range(10, 15))
        assert any("writer 9 wrote the promised one" in p for p in _check(m, wrong))
    finally:
        m.shutdown()


def test_a_promised_record_superseded_after_the_promise_is_no_loss(tmp_path: Path) -> None:
    """Found by `make crash` (cut 21 of the default seed): records appended after the parent drained
    the promises, but before the cut, superseded the last promised records of 8 keys, and the
    cleaner dropped those. Compaction keeps each key's newest record: that is no loss."""
    m = _manager(tmp_path)
    compacted = PARTITIONS[COMPACTED]
    try:
        m.update_topic_config(compacted.topic, TOPIC_PROPS[compacted.topic])
        lg = m.get_or_create_log(compacted)
        now = int(time.time() * 1000)
        for o in range(KEYS + 4):  # every key once, then keys 0-3 again (offsets 17-20)
            m.append(compacted, build_batch([Record(o, now, key_of(COMPACTED, o), value_of(o, 7, 1))]))
        lg.roll()
        cleaner = LogCleaner(CleanerConfig.from_props(CLEANER_PROPS), m.live_log_dirs, m.current_logs)
        cleaner.install_hooks(m.cleaner_hooks)
        cleaner.startup()
        try:
            assert cleaner.await_cleaned(compacted, lg.active_segment.base_offset, max_wait_ms=60000)
        finally:
            cleaner.shutdown()
        kept = [r.offset for r in read_records(m.read(compacted, 0, 1 << 20).records)]
        assert kept == list(range(4, KEYS + 4))  # offsets 0-3 went: 17-20 supersede them

        def check(want: int) -> list[str]:
            e = Expected()
            e.promised[COMPACTED] = want
            e.writer.update({(COMPACTED, o): 7 for o in range(want)})
            problems: list[str] = []
            check_compacted(m, COMPACTED, want, e, Figures(), problems)
            return problems

        assert check(KEYS) == []  # promised up to 17: keys 0-3's promised records superseded
        assert check(KEYS + 4) == []
        # promised beyond the log's end: key 4's last promised record (offset 21) is gone
        assert any("key 4: its last promised record, offset 21, is gone" in p for p in check(KEYS + 5))
    finally:
        m.shutdown()


def test_children_start_with_the_topics_overrides_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by `make crash` ("cutms-0 starts at 2027 without retention"): the child applied the
    topics' overrides after LogManager.startup, whose retention task (initial delay 0) could run
    first with the broker's retention.bytes and delete segments of a topic that has none."""
    seen: dict[str, int] = {}
    started = LogManager.startup

    def startup(self: LogManager) -> None:
        seen.update({t: self.config_for(t).retention_bytes for t in TOPIC_PROPS})
        started(self)

    monkeypatch.setattr(LogManager, "startup", startup)
    m = open_manager([tmp_path / "d0", tmp_path / "d1"], Scheduler())
    m.shutdown()
    assert seen == {"cutfm": -1, "cutms": -1, "cutc": 24 * 1024, "cutd": -1, "cuti": -1,
                    "cutt": -1, "cutct": 24 * 1024}


def test_a_record_of_a_deleted_log_is_caught_wherever_it_is(tmp_path: Path) -> None:
    """Once delete_log returned, no record of the deleted log may come back after a cut: not below
    the new log's promise and not above it, where no promise looks."""
    m = _manager(tmp_path)
    tp = PARTITIONS[DELETED_TOPIC]
    try:
        m.update_topic_config(tp.topic, TOPIC_PROPS[tp.topic])
        m.get_or_create_log(tp)
        now = int(time.time() * 1000)
        for o in range(6):  # the new log's writer (701) wrote 0-2; 3-5 came back from writer 700's
            m.append(tp, build_batch([Record(o, now, None, value_of(o, 701 if o < 3 else 700, 1))]))

        def check(floor: int) -> list[str]:
            e = Expected()
            e.promised[DELETED_TOPIC] = 3
            e.writer.update({(DELETED_TOPIC, o): 701 for o in range(3)})
            e.deleted_below[DELETED_TOPIC] = floor
            problems: list[str] = []
            check_contiguous(m, DELETED_TOPIC, 3, e, Figures(), problems)
            check_no_deleted_records(m, DELETED_TOPIC, e, Figures(), problems)
            return problems

        assert check(700) == []
        assert check(701) == [f"{tp} offset 3 holds a record of writer 700, whose log was deleted "
                              "(the deletion returned before the cut)"]
    finally:
        m.shutdown()


def test_forgetting_a_deleted_log_drops_its_promises_only() -> None:
    e = Expected()
    e.add(DELETED_TOPIC, 4, 900, 0, [])
    e.add(PLAIN, 2, 900, 0, [])
    e.gaps.update({(DELETED_TOPIC, 9), (PLAIN, 9)})
    e.deleted(DELETED_TOPIC, 901)
    assert e.promised == {PLAIN: 2} and set(e.writer) == {(PLAIN, 0), (PLAIN, 1)}
    assert e.gaps == {(PLAIN, 9)} and e.deleted_below == {DELETED_TOPIC: 901}


def test_files_of_a_directory_pending_removal_are_not_left_behind(tmp_path: Path) -> None:
    """A cut during a removal leaves a ``-delete`` directory whose files may be temporary ones: the
    next start removes the whole directory, so they are not files an interrupted step left."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    m = open_manager(dirs, Scheduler())
    m.get_or_create_log(PARTITIONS[DELETED_TOPIC])
    m.delete_log(PARTITIONS[DELETED_TOPIC])
    live = m.get_or_create_log(PARTITIONS[PLAIN]).dir
    m.shutdown()
    [pending] = [p for d in dirs for p in d.iterdir() if p.name.endswith("-delete")]
    (pending / "leader-epoch-checkpoint.tmp").write_bytes(b"")
    check_image(dirs, Expected(), Figures(), "pending removal")
    (live / "leader-epoch-checkpoint.tmp").write_bytes(b"")  # in a live partition: left behind
    with pytest.raises(AssertionError, match="temporary files left"):
        check_image(dirs, Expected(), Figures(), "left in a live partition")



def test_a_retry_of_a_promised_idempotent_batch_must_not_be_appended_twice(tmp_path: Path) -> None:
    """The check sends each producer's last promised batch again: answered as a duplicate, or
    refused as out of order behind later batches of the producer, it passes; appended again (the
    producer state lost, as after a cut that took an unflushed snapshot and the log it covered),
    it fails."""
    m = _manager(tmp_path)
    tp = PARTITIONS[IDEMPOTENT]
    try:
        lg = m.get_or_create_log(tp)
        m.append(tp, idempotent_batch(0, 901, 0, 3))  # producer 901: offsets 0-2, sequences 0-2
        for k in range(6):  # producer 902: six batches of 2, sequences 0-11
            m.append(tp, idempotent_batch(3 + 2 * k, 902, 2 * k, 2))

        def check(batches: dict[int, tuple[int, int, int]]) -> tuple[list[str], Figures]:
            e = Expected()
            e.batches.update(batches)
            problems: list[str] = []
            figures = Figures()
            check_retries(m, e, figures, problems)
            return problems, figures

        # 901's only batch and 902's last are duplicates; 902's first is behind five later ones
        assert check({901: (0, 0, 3), 902: (13, 10, 2)}) == ([], Figures(retries=2))
        assert check({902: (3, 0, 2)})[0] == []
        assert lg.log_end_offset == 15  # nothing appended by the retries
        del lg.producer_state.producers[901]  # producer state lost: the retry goes in again
        problems, figures = check({901: (0, 0, 3)})
        assert figures.retries_appended == 1
        assert problems == [f"{tp}: the retry of producer 901's promised batch at 0 (sequence 0) was appended "
                            "again at 15 (the log ended at 15): its producer state was lost"]
    finally:
        m.shutdown()


def test_transactions_recovered_as_the_log_holds_them_pass_and_each_kind_of_loss_is_named(tmp_path: Path) -> None:
    """check_transactions: promised markers must be in the log as promised; the transaction index
    must list exactly the aborted transactions, the producer state hold open exactly those with
    no marker, and the last stable offset sit at the first of them."""
    m = _manager(tmp_path)
    tp = PARTITIONS[TRANSACTIONAL]
    try:
        m.update_topic_config(tp.topic, TOPIC_PROPS[tp.topic])
        lg = m.get_or_create_log(tp)
        m.append(tp, transactional_batch(0, 801, 0, 2))  # 801: 0-1, committed at 2
        m.append(tp, marker_batch(2, 801, False), assign_offsets=False)
        m.append(tp, transactional_batch(3, 802, 0, 2))  # 802: 3-4, aborted at 5
        m.append(tp, marker_batch(5, 802, True), assign_offsets=False)
        m.append(tp, transactional_batch(6, 803, 0, 2))  # 803: 6-7, open

        def check(txns: dict[int, tuple[int, int, bool]]) -> tuple[list[str], Figures]:
            e = Expected()
            e.promised[TRANSACTIONAL] = 8
            e.writer.update({(TRANSACTIONAL, o): 801 + o // 3 for o in range(8)})
            e.txns.update({(TRANSACTIONAL, o): t for o, t in txns.items()})
            problems: list[str] = []
            figures = Figures()
            check_transactions(m, TRANSACTIONAL, 8, e, figures, problems)
            return problems, figures

        promised = {2: (801, 0, False), 5: (802, 3, True)}
        problems, figures = check(promised)
        assert problems == []
        assert (figures.records_checked, figures.markers_checked, figures.open_transactions) == (6, 2, 1)
        problems, figures = check({5: (802, 3, False)})  # the log holds an ABORT where a COMMIT was promised
        assert problems == [f"{tp}: the COMMIT marker of producer 802's transaction from 3, promised at 5, "
                            "is not there (the log has (802, True))"]
        assert figures.markers_lost == 1
        lg.active_segment.txn_index.reset()  # the index lost its entry: aborted records read as committed
        assert check(promised)[0] == [f"{tp} as recovered: its transaction indexes list aborted transactions [] "
                                      "that the log does not hold and miss [(802, 3, 5)] (producer id, first "
                                      "offset, marker)"]
        del lg.producer_state.ongoing[803]  # the open transaction forgotten: its records would read as stable
        lg._set_end(lg.log_end_offset)  # as a recovery that forgot it publishes
        problems, figures = check({})
        assert figures.transaction_state_wrong == 1
        assert problems[0].endswith("its producer state holds open transactions {}, the log {803: 6} (producer id: "
                                    "first offset); its last stable offset is 8 with open transactions {803: 6}")
    finally:
        m.shutdown()


def _roll_and_clean(m: LogManager, tp: TopicPartition) -> None:
    """Roll ``tp``'s log and run the cleaner until it has cleaned up to the last stable offset."""
    lg = m.get_log(tp)
    assert lg is not None
    lg.roll()
    cleaner = LogCleaner(CleanerConfig.from_props(CLEANER_PROPS), m.live_log_dirs, m.current_logs)
    cleaner.install_hooks(m.cleaner_hooks)
    cleaner.startup()
    try:
        assert cleaner.await_cleaned(tp, lg.last_stable_offset, max_wait_ms=60000)
    finally:
        cleaner.shutdown()


def test_a_cleaned_transactional_log_passes_and_each_kind_of_loss_is_named(tmp_path: Path) -> None:
    """check_compacted_transactions on a log the real cleaner compacted three times: aborted records
    and superseded committed ones dropped, then markers whose transaction has no data left removed;
    what the cleaner rightly dropped is no loss, and each kind of loss is named."""
    m = _manager(tmp_path)
    tp = PARTITIONS[COMPACTED_TXN]
    e = Expected()
    writers: dict[int, int] = {}
    sequences: dict[int, int] = {}

    def txn(pid: int, first: int, count: int, end: int | None = None, aborted: bool = False) -> None:
        m.append(tp, transactional_batch(first, pid, sequences.get(pid, 0), count, COMPACTED_TXN))
        sequences[pid] = sequences.get(pid, 0) + count
        e.txn_data.update(dict.fromkeys(range(first, first + count), pid))
        writers.update(dict.fromkeys(range(first, (end or first + count - 1) + 1), pid))
        if end is not None:
            m.append(tp, marker_batch(end, pid, aborted), assign_offsets=False)
            e.txns[(COMPACTED_TXN, end)] = (pid, first, aborted)

    def check(expected: Expected) -> tuple[list[str], Figures]:
        expected.promised[COMPACTED_TXN] = lg.log_end_offset
        expected.writer.update({(COMPACTED_TXN, o): w for o, w in writers.items()})
        problems: list[str] = []
        figures = Figures()
        check_compacted_transactions(m, COMPACTED_TXN, lg.log_end_offset, expected, figures, problems)
        return problems, figures

    try:
        m.update_topic_config(tp.topic, TOPIC_PROPS[tp.topic])
        lg = m.get_or_create_log(tp)
        txn(801, 0, 2, 2)  # keys 0-1, committed at 2
        txn(802, 3, 2, 5, aborted=True)  # keys 3-4, aborted at 5
        txn(803, 6, 13, 19)  # keys 6-16, then 0-1 again (17-18): 801's are superseded; committed at 19
        # a later transaction of 801 and of 802: the cleaner keeps a producer's last batch (its
        # sequence), and with it the marker after it; their first batches may go
        txn(801, 20, 1, 21)
        txn(802, 22, 1, 23, aborted=True)
        _roll_and_clean(m, tp)  # up to 24: the aborted records and 801's first ones go; the markers stay
        txn(804, 24, 2)  # open: past the last stable offset, the cleaner leaves it alone
        problems, figures = check(e)
        assert problems == []
        assert (figures.aborted_cleaned, figures.superseded_after_promise, figures.markers_checked,
                figures.markers_cleaned, figures.open_transactions) == (3, 0, 5, 0, 1)
        # 803's transaction written after the promises were drained: its records rightly supersede
        # the last promised ones of keys 0 and 1
        early = Expected(txns={k: t for k, t in e.txns.items() if t[0] != 803},
                         txn_data={o: w for o, w in e.txn_data.items() if w != 803})
        problems, figures = check(early)
        assert problems == []
        assert figures.superseded_after_promise == 2
        m.append(tp, marker_batch(26, 804, False), assign_offsets=False)
        e.txns[(COMPACTED_TXN, 26)] = (804, 24, False)
        writers[26] = 804
        # a marker whose transaction has no data left gets a delete horizon (delete.retention.ms 0:
        # now) in the next round, and goes in the round after, as in Kafka
        _roll_and_clean(m, tp)
        assert check(e)[1].markers_checked == 6
        txn(805, 27, 2, 29)
        _roll_and_clean(m, tp)
        problems, figures = check(e)
        assert problems == []
        assert (figures.markers_checked, figures.markers_cleaned, figures.open_transactions) == (5, 2, 0)

        wrong = Expected(txns={**e.txns, (COMPACTED_TXN, 19): (803, 6, True)}, txn_data=dict(e.txn_data))
        problems, figures = check(wrong)  # 803 promised aborted: its records supersede nothing
        assert f"{tp}: the ABORT marker of producer 803's transaction from 6, promised at 19, is not there " \
               "(the log has (803, False); records of the transaction left: [6, 9, 12, 13, 14])" in problems
        assert f"{tp} key b'0': its last promised committed record, offset 0, is gone and no later committed " \
               "record of the key is there" in problems
        gone = Expected(txns=dict(e.txns), txn_data={**e.txn_data, 30: 806})
        assert check(gone)[0] == [f"{tp} offset 30: a promised record of producer 806's transaction, open in the "
                                  "log, is gone"]
        txn(807, 30, 2, 32, aborted=True)  # not cleaned: its records are there
        lg.active_segment.txn_index.reset()  # the index lost its entry: aborted records read as committed
        problems, figures = check(e)
        assert problems == [f"{tp} as recovered: its transaction indexes miss aborted transactions with records "
                            "there [(807, 30, 32)] (producer id, first record, marker)"]
        assert figures.transaction_state_wrong == 1
        txn(808, 33, 2)  # open
        del lg.producer_state.ongoing[808]  # forgotten: its records would read as stable
        lg._set_end(lg.log_end_offset)  # as a recovery that forgot it publishes
        problems, _ = check(e)
        assert problems[-1].endswith("its producer state holds open transactions {}, the log {808: 33} (producer "
                                     "id: first offset); its last stable offset is 35 with open transactions "
                                     "{808: 33}")
    finally:
        m.shutdown()



def test_a_read_of_only_batches_the_cleaner_emptied_does_not_end_the_walk(tmp_path: Path) -> None:
    """Found by the first power cuts of COMPACTED_TXN: a cleaned segment ended in a batch the
    cleaner emptied (an aborted transaction's last batch keeps its header: its producer's last
    sequence), so a read from there held no record; the check, stepping by records, stopped
    there, and every promised record after it read as lost. Here each batch is a segment of its
    own (segment.bytes 100), so the read of 902's emptied batch holds nothing else."""
    m = _manager(tmp_path)
    tp = PARTITIONS[COMPACTED_TXN]
    e = Expected()
    try:
        m.update_topic_config(tp.topic, {**TOPIC_PROPS[tp.topic], "segment.bytes": 100})
        lg = m.get_or_create_log(tp)
        for pid, first, aborted in ((901, 0, False), (902, 3, True), (903, 6, False)):
            m.append(tp, transactional_batch(first, pid, 0, 2, COMPACTED_TXN))
            m.append(tp, marker_batch(first + 2, pid, aborted), assign_offsets=False)
            e.txn_data.update({first: pid, first + 1: pid})
            e.txns[(COMPACTED_TXN, first + 2)] = (pid, first, aborted)
            e.writer.update({(COMPACTED_TXN, o): pid for o in range(first, first + 3)})
        _roll_and_clean(m, tp)
        assert read_records(m.read(tp, 3, 1 << 20).records) == []  # 902's batch: emptied, alone
        e.promised[COMPACTED_TXN] = lg.log_end_offset
        problems: list[str] = []
        figures = Figures()
        check_compacted_transactions(m, COMPACTED_TXN, lg.log_end_offset, e, figures, problems)
        assert problems == []
        assert (figures.records_checked, figures.aborted_cleaned, figures.markers_checked) == (4, 2, 3)
    finally:
        m.shutdown()
