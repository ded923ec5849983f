"""The transaction index through a cleaning round: the aborted transactions a round reads once
for all its groups (AbortedTxns), and each cleaned segment's transaction index."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.cleaner.txn import AbortedTxns
from logkeeper.index.txn_index import AbortedTxn
from logkeeper.log.log import Log
from tests.cleaner_logs import (
    LARGE_TS,
    Clock,
    FakeOffsetMap,
    TxnProducer,
    aborted,
    append_kvs,
    log_batches,
    ltc,
    make_cleaner,
    make_log,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _walk_every_index(log: Log, start: int, upper: int) -> list[AbortedTxn]:
    """collect_aborted as Kafka writes it: every later segment's index, read for this call."""
    floor = log.segments.floor_segment(start)
    out: list[AbortedTxn] = []
    for seg in log.segments.values(floor.base_offset if floor else 0, None) if floor else ():
        for t in seg.txn_index.entries:
            if t.last_offset >= log.log_start_offset and t.first_offset < upper:
                out.append(t)
            if t.last_stable_offset >= upper:
                return out
    return out


def test_aborted_txns_read_once_answer_every_range_as_a_walk_of_the_indexes(tmp_path: Path, clock: Clock) -> None:
    """A round reads the transaction indexes once (AbortedTxns) and asks for each group's range:
    the same answer as reading every later segment's index for each (which was quadratic in the
    segments), including markers in a later segment than their data."""
    log = make_log(tmp_path, clock, segment_bytes=300)
    producers = [TxnProducer(log, pid) for pid in (1, 2, 3)]
    for i in range(12):
        p = producers[i % 3]
        p.append([i, i + 1])
        if i % 4 == 3:
            log.roll()  # the marker lands in a later segment than the data
        (p.abort if i % 2 else p.commit)()
        append_kvs(log, [(b"plain", b"v")])
    log.roll()
    bases = [seg.base_offset for seg in log.segments.values()]
    assert len(bases) > 4 and sum(len(seg.txn_index.entries) for seg in log.segments.values()) >= 5
    once = AbortedTxns(log.segments, log.log_start_offset, bases[0])
    end = log.log_end_offset
    for start in bases:
        for upper in sorted({start + 1, start + 3, *bases, end}):
            assert once.collect(start, upper) == _walk_every_index(log, start, upper), (start, upper)


def test_each_cleaned_segment_indexes_the_aborted_transactions_whose_marker_it_keeps(tmp_path: Path,
                                                                                       clock: Clock) -> None:
    """A round cleans many groups as one stream (the next group's batches are read, and its
    transaction state walked, while this one is written): each cleaned segment's transaction
    index still holds exactly the aborted transactions whose kept marker it holds."""
    log = make_log(tmp_path, clock, segment_bytes=400)
    producers = [TxnProducer(log, pid) for pid in (1, 2, 3)]
    for i in range(30):
        p = producers[i % 3]
        p.append([i % 7, 100 + i])
        (p.abort if i % 3 != 1 else p.commit)()
        append_kvs(log, [(str(i % 5).encode(), b"v")])
    log.roll()
    before = aborted(log)
    assert len(before) >= 10 and len(log.segments.values()) > 10
    cleaner = make_cleaner(clock, map_type=FakeOffsetMap)
    cleaner.do_clean(ltc(log, 0), LARGE_TS)
    segments = log.segments.values()
    assert len(segments) >= 3  # several groups were written in the round
    for seg, nxt in zip(segments, [s.base_offset for s in segments[1:]] + [log.log_end_offset]):
        for txn in seg.txn_index.entries:
            assert seg.base_offset <= txn.last_offset < nxt, (seg.base_offset, txn)
            marker = [b for b in log_batches(log) if b[0].base_offset == txn.last_offset]
            assert marker and marker[0][0].is_control, txn
    assert sorted(aborted(log), key=lambda t: t.last_offset) == [
        t for t in sorted(before, key=lambda t: t.last_offset)
        if any(b[0].base_offset == t.last_offset for b in log_batches(log))]
