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
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from tests.crash.powercut_checks import (
    CLEANER_PROPS,
    COMPACTED,
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
    check_image,
    check_no_deleted_records,
    check_retries,
    check_transactions,
    idempotent_batch,
    key_of,
    manager_props,
    marker_batch,
    open_manager,
    transactional_batch,
    value_of,
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
                    "cutt": -1}


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
            e.txns.update(txns)
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
        problems, figures = check({})
        assert figures.transaction_state_wrong == 1
        assert problems[0].endswith("its producer state holds open transactions {}, the log {803: 6} (producer id: "
                                    "first offset); its last stable offset is 8 with open transactions {803: 6}")
    finally:
        m.shutdown()
