"""Kafka's LogCleanerTest transaction scenarios: aborted data, COMMIT and ABORT markers, empty batches
kept for active producers (the transaction index through a round: test_cleaner_txn_index.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.cleaner.txn import CleanedTransactionMetadata, collect_aborted
from logkeeper.index.txn_index import AbortedTxn
from logkeeper.log.log import Log
from logkeeper.records.builder import ControlType, control_key
from tests import cleaner_logs
from tests.cleaner_logs import (
    INT_MAX,
    LARGE_TS,
    LONG_MAX,
    RETENTION_MS,
    Clock,
    FakeOffsetMap,
    TxnProducer,
    aborted,
    append_kvs,
    append_marker,
    ensure_valid_segments,
    ikeys,
    last_offsets_per_batch,
    log_batches,
    ltc,
    make_log,
    offsets_in_log,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_cleaner(clock: Clock, capacity: int = INT_MAX) -> Cleaner:
    return cleaner_logs.make_cleaner(clock, capacity, map_type=FakeOffsetMap)


def two_pass(cleaner: Cleaner, t: LogToClean, now: int) -> int:
    cleaner.do_clean(t, now)
    return cleaner.do_clean(t, now + RETENTION_MS + 1)[0]


def batch_bases(log: Log) -> list[int]:
    return [h.base_offset for h, _raw in log_batches(log)]


def last_sequences(log: Log) -> dict[int, int]:
    return {h.producer_id: h.last_sequence for h, _raw in log_batches(log)
            if not h.is_control and h.producer_id >= 0}


def test_basic_transaction_aware_cleaning(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=2048)
    cleaner = make_cleaner(clock)
    p1, p2 = TxnProducer(log, 1), TxnProducer(log, 2)
    p1.append([1, 2])
    p2.append([2, 3])
    p1.append([3, 4])
    p1.abort()
    p2.commit()
    p1.append([2])
    p1.commit()
    txns = aborted(log)
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert ikeys(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert aborted(log) == txns
    ensure_valid_segments(log)


def test_clean_with_transactions_spanning_segments(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock)
    p1, p2, p3 = TxnProducer(log, 1), TxnProducer(log, 2), TxnProducer(log, 3)
    p1.append([1, 2])
    p3.append([2, 3])
    p2.append([3, 4])
    log.roll()
    p2.append([5, 6])
    p3.append([6, 7])
    p1.append([7, 8])
    p2.abort()
    p3.append([8, 9])
    p3.commit()
    p1.append([9, 10])
    p1.abort()
    dirty, _ = cleaner.clean(ltc(log, 0))
    assert ikeys(log) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    p2.append([11])
    p1.append([12])
    cleaner.clean(ltc(log, dirty))
    assert ikeys(log) == [2, 3, 6, 7, 8, 9, 11, 12]


def test_commit_marker_removal(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=256)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([1])
    p.append([2, 3])
    p.commit()
    p.append([2])
    p.commit()
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [1, 3, 2]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5]
    p.append([1, 3])
    p.commit()
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, dirty), LARGE_TS)
    assert ikeys(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    dirty, _ = cleaner.do_clean(ltc(log, dirty), LARGE_TS)
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    cleaner.do_clean(ltc(log, dirty), LONG_MAX)
    assert ikeys(log) == [2, 1, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8]
    ensure_valid_segments(log)


def test_deleted_batches_with_no_messages_read(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, max_message_bytes=100, segment_bytes=1000)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([1])
    p.abort()
    p.append([2])
    p.append([2])
    p.commit()
    log.roll()
    cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [2]
    assert offsets_in_log(log) == [1, 3, 4]
    two_pass(cleaner, ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [2]
    assert offsets_in_log(log) == [3, 4]


def test_commit_marker_retention_with_empty_batch(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=256)
    cleaner = make_cleaner(clock)
    p1, p2 = TxnProducer(log, 1), TxnProducer(log, 2)
    p1.append([2, 3])
    log.roll()
    p2.append([2, 3])
    p2.commit()
    log.roll()
    append_kvs(log, [(b"2", b"2")])
    append_kvs(log, [(b"3", b"3")])
    p1.commit()
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [2, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7]
    assert last_offsets_per_batch(log) == [1, 3, 4, 5, 6, 7]
    dirty, _ = cleaner.do_clean(ltc(log, dirty), LARGE_TS)
    assert last_offsets_per_batch(log) == [1, 3, 4, 5, 6, 7]
    p2.append([1])
    p2.commit()
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, dirty), LARGE_TS)
    assert ikeys(log) == [2, 3, 1]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log) == [1, 4, 5, 6, 7, 8, 9]
    two_pass(cleaner, ltc(log, dirty), LARGE_TS)
    assert ikeys(log) == [2, 3, 1]
    assert offsets_in_log(log) == [5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log) == [1, 5, 6, 7, 8, 9]


def test_clean_empty_control_batch(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=256)
    cleaner = make_cleaner(clock)
    append_marker(log, ControlType.COMMIT, 1, 0)
    append_kvs(log, [(b"2", b"2")])
    append_kvs(log, [(b"3", b"3")])
    log.roll()
    dirty = two_pass(cleaner, ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [2, 3]
    assert offsets_in_log(log) == [1, 2]
    assert last_offsets_per_batch(log) == [0, 1, 2]
    cleaner.do_clean(ltc(log, dirty), LONG_MAX)
    assert ikeys(log) == [2, 3]
    assert last_offsets_per_batch(log) == [0, 1, 2]


def test_committed_transaction_spanning_segments(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=128)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([1])
    log.roll()
    p.commit()
    log.roll()
    two_pass(cleaner, ltc(log, 0), LARGE_TS)
    assert offsets_in_log(log) == [0, 1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_aborted_transaction_spanning_segments(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=128)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([1])
    log.roll()
    p.abort()
    log.roll()
    cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]
    cleaner.do_clean(ltc(log, 0), LONG_MAX)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_abort_marker_removal(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=256)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([1])
    p.append([2, 3])
    p.abort()
    p.append([3])
    p.commit()
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert ikeys(log) == [3]
    assert offsets_in_log(log) == [3, 4, 5]
    two_pass(cleaner, ltc(log, dirty), LARGE_TS)
    assert ikeys(log) == [3]
    assert offsets_in_log(log) == [4, 5]


def test_empty_batch_removal_with_sequence_reuse(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=2048)
    cleaner = make_cleaner(clock)
    first = TxnProducer(log, 1)
    first.append([1])
    first.commit()
    second = TxnProducer(log, 1)  # sequences start again at 0
    second.append([2])
    second.commit()
    append_kvs(log, [(b"1", b"1")])
    append_kvs(log, [(b"2", b"1")])
    log.roll()
    cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert offsets_in_log(log) == [1, 3, 4, 5]
    assert last_offsets_per_batch(log) == [1, 2, 3, 4, 5]
    two_pass(cleaner, ltc(log, 0), LARGE_TS)
    assert offsets_in_log(log) == [3, 4, 5]
    assert last_offsets_per_batch(log) == [2, 3, 4, 5]


def test_abort_marker_retention_with_empty_batch(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=256)
    cleaner = make_cleaner(clock)
    p = TxnProducer(log, 1)
    p.append([2, 3])
    p.abort()
    log.roll()

    def assert_indexed() -> None:
        txns = collect_aborted(log, 0, 100)
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in txns] == [(1, 0, 2)]

    assert_indexed()
    dirty, _ = cleaner.do_clean(ltc(log, 0), LARGE_TS)
    assert_indexed()
    assert ikeys(log) == []
    assert offsets_in_log(log) == [2]
    assert last_offsets_per_batch(log) == [1, 2]
    dirty = two_pass(cleaner, ltc(log, dirty), LARGE_TS)
    assert_indexed()
    assert offsets_in_log(log) == [2]
    assert last_offsets_per_batch(log) == [1, 2]
    p.append([1])
    log.roll()
    dirty, _ = cleaner.do_clean(ltc(log, dirty), LARGE_TS)
    assert_indexed()
    assert ikeys(log) == [1]
    assert offsets_in_log(log) == [2, 3]
    assert last_offsets_per_batch(log) == [2, 3]
    two_pass(cleaner, ltc(log, dirty), LARGE_TS)
    assert ikeys(log) == [1]
    assert offsets_in_log(log) == [3]
    assert last_offsets_per_batch(log) == [3]
    assert collect_aborted(log, 0, 100) == []


def test_log_cleaner_retains_producer_last_sequence(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 10)
    append_kvs(log, [(b"0", b"0")])
    append_kvs(log, [(b"0", b"1")], producer_id=1, producer_epoch=0, base_sequence=0)
    append_kvs(log, [(b"0", b"2")], producer_id=2, producer_epoch=0, base_sequence=0)
    append_kvs(log, [(b"0", b"3")], producer_id=3, producer_epoch=0, base_sequence=0)
    append_kvs(log, [(b"1", b"1")], producer_id=2, producer_epoch=0, base_sequence=1)
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert ikeys(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 10)
    p = TxnProducer(log, 1)
    p.append([1])
    p.append([2, 3])
    p.abort()
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert last_offsets_per_batch(log) == [2, 3]
    assert last_sequences(log) == {1: 2}
    assert ikeys(log) == []
    assert offsets_in_log(log) == [3]
    p.append([1, 5])
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert last_offsets_per_batch(log) == [3, 5]
    assert last_sequences(log) == {1: 4}
    assert ikeys(log) == [1, 5]
    assert offsets_in_log(log) == [3, 4, 5]


def test_cleaning_with_keys_conflicting_with_txn_marker_keys(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock)
    cleaner = make_cleaner(clock, 10)
    p1 = TxnProducer(log, 1)
    p1.append([1])
    p1.commit()
    p2 = TxnProducer(log, 2)
    p2.append([control_key(ControlType.COMMIT)], value=b"foo")
    p2.commit()
    log.roll()
    assert offsets_in_log(log) == [0, 1, 2, 3]
    cleaner.clean(ltc(log, 0))
    assert last_offsets_per_batch(log) == [0, 1, 2, 3]
    assert offsets_in_log(log) == [0, 1, 2, 3]


def test_duplicate_check_after_cleaning_keeps_last_sequences(tmp_path: Path, clock: Clock) -> None:
    log = make_log(tmp_path, clock, segment_bytes=2048)
    cleaner = make_cleaner(clock)

    def idempotent(pid: int, keys: list[int], seq: int) -> None:
        append_kvs(log, [(str(k).encode(), str(k).encode()) for k in keys], producer_id=pid, producer_epoch=0,
                   base_sequence=seq)

    idempotent(1, [1, 2, 3], 0)
    idempotent(2, [3, 1, 4], 0)
    idempotent(3, [1, 4], 0)
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert last_offsets_per_batch(log) == [2, 5, 7]
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1}
    assert ikeys(log) == [2, 3, 1, 4]
    assert offsets_in_log(log) == [1, 3, 6, 7]
    idempotent(4, [2], 0)
    log.roll()
    cleaner.clean(ltc(log, 0))
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert last_offsets_per_batch(log) == [2, 5, 7, 8]
    assert ikeys(log) == [3, 1, 4, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8]


def test_multi_pass_segment_cleaning_with_aborted_transactions(tmp_path: Path, clock: Clock) -> None:
    retention = 50000
    log = make_log(tmp_path, clock, delete_retention_ms=retention)
    cleaner = make_cleaner(clock)
    p1, p2 = TxnProducer(log, 1), TxnProducer(log, 2)
    p1.append([1, 2])
    p2.append([2, 3])
    p1.append([3, 4])
    p1.commit()
    p2.commit()
    p1.append([2, 3])
    p1.abort()
    p2.append([4, 5])
    p1.append([5, 6])
    p1.commit()
    p2.abort()
    p2.append([6, 7])
    p2.commit()
    log.roll()
    assert log.log_end_offset == 20
    expected = [AbortedTxn(1, 8, 10, 11), AbortedTxn(2, 11, 16, 17)]
    assert aborted(log) == expected
    dirty = 0

    def clean_segments() -> int:
        m = SipHashOffsetMap(slots=4, load_factor=0.75)
        segments = log.segments.values(0, log.active_segment.base_offset)
        stats = CleanerStats()
        cleaner.build_offset_map(log, dirty, log.active_segment.base_offset, m, stats)
        cleaner.clean_segments(log, segments, m, clock.now, stats, CleanedTransactionMetadata(),
                               segments[-1].read_next_offset())
        return m.latest_offset + 1

    dirty = clean_segments()
    assert dirty == 4
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert aborted(log) == expected
    dirty = clean_segments()
    assert dirty == 14
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert offsets_in_log(log) == [0, 2, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert aborted(log) == []
    clock.now += retention
    dirty = clean_segments()
    assert dirty == 20
    assert batch_bases(log) == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert offsets_in_log(log) == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert aborted(log) == []
    ensure_valid_segments(log)


def test_undecided_transactional_data_is_not_cleanable(tmp_path: Path, clock: Clock) -> None:
    from logkeeper.cleaner.selection import cleanable_offsets

    log = make_log(tmp_path, clock)
    p = TxnProducer(log, 1)
    append_kvs(log, [(b"1", b"1")])
    log.roll()
    p.append([2])
    log.roll()
    append_kvs(log, [(b"3", b"3")])
    log.roll()
    offsets = cleanable_offsets(log, None, clock.now)
    assert offsets.first_uncleanable_dirty_offset == 1  # the open transaction's first offset
    assert LogToClean(log, 0, offsets.first_uncleanable_dirty_offset).first_uncleanable_offset == 1
    p.commit()
    log.roll()
    offsets = cleanable_offsets(log, None, clock.now)
    assert offsets.first_uncleanable_dirty_offset == log.active_segment.base_offset
