"""The power-cut test's transactional logs (TXN_LOGS): the batches and markers their children
write, and the checks of what recovery (and, for COMPACTED_TXN, the cleaner) left of them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from logkeeper.cleaner.txn import collect_aborted
from logkeeper.log.log import Log
from logkeeper.log.manager import LogManager
from logkeeper.log.names import TopicPartition
from logkeeper.log.producer_state import end_txn_marker_of
from logkeeper.records.builder import Record, build_batch, build_marker_batch
from logkeeper.records.control import ControlType
from logkeeper.records.reader import iter_batches
from tests.crash.powercut_checks import (
    PARTITIONS,
    TRANSACTIONAL,
    Expected,
    Figures,
    check_contiguous,
    check_kept_record,
    key_of,
    parse_value,
    records_in,
    value_of,
)


def transactional_batch(base_offset: int, producer_id: int, base_sequence: int, count: int,
                        partition: int = TRANSACTIONAL) -> bytes:
    """A data batch of TXN_LOGS' ``partition``: ``idempotent_batch``'s, in a transaction (keyed as
    ``key_of`` keys that partition's records)."""
    now = int(time.time() * 1000)
    return build_batch([Record(base_offset + k, now, key_of(partition, base_offset + k),
                               value_of(base_offset + k, producer_id, 1))
                        for k in range(count)], producer_id=producer_id, producer_epoch=0,
                       base_sequence=base_sequence, is_transactional=True)


def writer_of(rec: Any) -> int:
    """The writer (its producer id) a record's value names; -1 when it names none."""
    return (parse_value(rec.value) or (0, -1))[1]


def marker_batch(offset: int, producer_id: int, aborted: bool) -> bytes:
    """The marker ending producer ``producer_id``'s transaction at ``offset`` (appended as the
    transaction coordinator's WriteTxnMarkers does: at its own offset, ``assign_offsets=False``)."""
    return build_marker_batch(ControlType.ABORT if aborted else ControlType.COMMIT, offset=offset,
                              timestamp=int(time.time() * 1000), producer_id=producer_id, producer_epoch=0)


def scan_transactions(m: LogManager, tp: TopicPartition) -> tuple[dict[int, tuple[int, bool]], dict[int, int],
                                                                   set[tuple[int, int, int]]]:
    """What ``tp``'s log itself says, batch by batch from its start: its markers (offset ->
    (producer id, aborted)), the transactions it leaves open (producer id -> first offset) and the
    aborted ones (producer id, first offset, marker offset). Stops at an unreadable offset (the
    contiguity check names it)."""
    lg = m.get_log(tp)
    assert lg is not None
    markers: dict[int, tuple[int, bool]] = {}
    ongoing: dict[int, int] = {}
    aborted: set[tuple[int, int, int]] = set()
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        try:
            data = m.read(tp, offset, 1 << 20).records
        except Exception:  # named by check_contiguous
            break
        if not data:
            break
        for batch in iter_batches(np.frombuffer(data, dtype=np.uint8)):
            h = batch.header
            offset = h.base_offset + h.last_offset_delta + 1
            if not h.is_transactional:
                continue
            if not h.is_control:
                ongoing.setdefault(h.producer_id, h.base_offset)
                continue
            marker = end_txn_marker_of(memoryview(data)[batch.position:], h)
            if marker is None:  # an empty control batch: the cleaner removed the marker and kept
                continue  # the batch for its producer's last sequence (Kafka's RETAIN_EMPTY)
            is_abort = marker.control_type == ControlType.ABORT
            markers[h.base_offset] = (h.producer_id, is_abort)
            first = ongoing.pop(h.producer_id, None)
            if first is not None and is_abort:
                aborted.add((h.producer_id, first, h.base_offset))
    return markers, ongoing, aborted


def report_recovered_state(lg: Log, ongoing: dict[int, int], wrong: list[str], figures: Figures,
                           problems: list[str]) -> None:
    """Add to ``wrong`` (what the log's transaction indexes got wrong) what its producer state got
    wrong: the open transactions (``ongoing``: the log's own, counted) and the last stable offset;
    report."""
    figures.open_transactions += len(ongoing)
    if lg.producer_state.ongoing != ongoing:
        wrong.append(f"its producer state holds open transactions {lg.producer_state.ongoing}, the log {ongoing} "
                     "(producer id: first offset)")
    if lg.last_stable_offset != min(ongoing.values(), default=lg.log_end_offset):
        wrong.append(f"its last stable offset is {lg.last_stable_offset} with open transactions {ongoing}")
    if wrong:
        figures.transaction_state_wrong += 1
        problems.append(f"{lg.topic_partition} as recovered: " + "; ".join(wrong))


def check_transactions(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                       problems: list[str]) -> None:
    """TRANSACTIONAL's records as ``check_contiguous``'s; each promised marker is in the log as
    promised; and what recovery rebuilt agrees with the log: the transaction index lists exactly
    the aborted transactions (a read_committed consumer skips by it), and the producer state holds
    open exactly the transactions without a marker (the last stable offset is the first of them)."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    markers, ongoing, aborted = scan_transactions(m, tp)
    check_contiguous(m, i, want, expected, figures, problems, frozenset(markers))
    for (j, offset), (pid, first, is_abort) in sorted(expected.txns.items()):
        if j != i:
            continue
        if markers.get(offset) == (pid, is_abort) and (not is_abort or (pid, first, offset) in aborted):
            figures.markers_checked += 1
            continue
        figures.markers_lost += 1
        problems.append(f"{tp}: the {'ABORT' if is_abort else 'COMMIT'} marker of producer {pid}'s transaction "
                        f"from {first}, promised at {offset}, is not there (the log has {markers.get(offset)})")
    indexed = {(t.producer_id, t.first_offset, t.last_offset)
               for t in collect_aborted(lg, lg.log_start_offset, lg.log_end_offset)}
    wrong = []
    if indexed != aborted:
        wrong.append(f"its transaction indexes list aborted transactions {sorted(indexed - aborted)} that the log "
                     f"does not hold and miss {sorted(aborted - indexed)} (producer id, first offset, marker)")
    report_recovered_state(lg, ongoing, wrong, figures, problems)


def check_compacted_transactions(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                                 problems: list[str]) -> None:
    """COMPACTED_TXN, cleaned while transactions were written and the power cut:

    - every record there holds what was written at its offset (``check_record``);
    - a promised record of a transaction the log leaves open is there (the cleaner must stop at
      the last stable offset);
    - each key's last promised committed record is there, or a later committed record of the key
      is (a record of an aborted or open transaction supersedes nothing);
    - each promised marker is there as promised, or the cleaner removed it with every record of
      its transaction (a marker goes only when its transaction has no data left);
    - what recovery rebuilt agrees with the log: each aborted transaction with records there is
      in the transaction index (a read_committed consumer skips by it), each index entry has its
      ABORT marker there, and the producer state holds open exactly what the log leaves open."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    markers, ongoing, aborted = scan_transactions(m, tp)
    ends: dict[int, list[tuple[int, bool]]] = {}  # producer id -> its markers (offset, aborted), in order
    for offset, (pid, is_abort) in sorted(markers.items()):
        ends.setdefault(pid, []).append((offset, is_abort))
    promised_ends = {(pid, first): (offset, is_abort)
                     for (j, offset), (pid, first, is_abort) in expected.txns.items() if j == i}

    def outcome(offset: int, pid: int) -> bool | None:
        """Whether the transaction of ``pid``'s record at ``offset`` committed (None: still open),
        by its promised marker, else by the first marker of ``pid`` after it in the log."""
        for (p, first), (end, is_abort) in promised_ends.items():
            if p == pid and first <= offset < end:
                return not is_abort
        return next((not is_abort for end, is_abort in ends.get(pid, []) if end > offset), None)

    present: dict[int, Any] = {}  # offset -> data record
    for rec in records_in(m, tp, problems):
        if rec.offset not in markers:
            present[rec.offset] = rec
            check_kept_record(i, rec, want, expected, figures, problems)

    last_committed: dict[bytes | None, int] = {}  # key -> its last promised committed record
    for offset, pid in sorted(expected.txn_data.items()):
        committed = outcome(offset, pid)
        if committed is None and offset not in present:
            figures.records_lost += 1
            problems.append(f"{tp} offset {offset}: a promised record of producer {pid}'s transaction, "
                            "open in the log, is gone")
        elif committed is False and offset not in present:
            figures.aborted_cleaned += 1
        elif committed:
            last_committed[key_of(i, offset)] = offset
    for key, offset in sorted(last_committed.items()):
        if offset in present:
            continue
        later = [o for o, rec in present.items() if o > offset and rec.key == key and outcome(o, writer_of(rec))]
        if later:
            figures.superseded_after_promise += 1
        else:
            figures.records_lost += 1
            problems.append(f"{tp} key {key!r}: its last promised committed record, offset {offset}, is gone "
                            "and no later committed record of the key is there")

    for (j, offset), (pid, first, is_abort) in sorted(expected.txns.items()):
        if j != i:
            continue
        left = [o for o, rec in present.items() if first <= o < offset and writer_of(rec) == pid]
        if markers.get(offset) == (pid, is_abort):
            figures.markers_checked += 1
        elif offset not in markers and not left:
            figures.markers_cleaned += 1
        else:
            figures.markers_lost += 1
            problems.append(f"{tp}: the {'ABORT' if is_abort else 'COMMIT'} marker of producer {pid}'s transaction "
                            f"from {first}, promised at {offset}, is not there (the log has {markers.get(offset)}; "
                            f"records of the transaction left: {left[:5]})")

    indexed = collect_aborted(lg, lg.log_start_offset, lg.log_end_offset)
    wrong = []
    unindexed = sorted((pid, first, end) for pid, first, end in aborted
                       if not any(t.producer_id == pid and t.last_offset == end and t.first_offset <= first
                                  for t in indexed))
    if unindexed:
        wrong.append(f"its transaction indexes miss aborted transactions with records there {unindexed} "
                     "(producer id, first record, marker)")
    stray = sorted((t.producer_id, t.first_offset, t.last_offset) for t in indexed
                   if markers.get(t.last_offset) != (t.producer_id, True))
    if stray:
        wrong.append(f"its transaction indexes list aborted transactions {stray} without their ABORT marker")
    report_recovered_state(lg, ongoing, wrong, figures, problems)
