"""The producers still active in a log and their last record (Kafka's lastRecordsOfActiveProducers).

The cleaner keeps, even emptied of its records, the batch that holds an active producer's last
sequence number, and the marker that holds its epoch, so that producer's next append is not
rejected. Kafka reads this from its producer state (kept in memory and in ``.snapshot``
files); the cleaner derives the same state from the batch headers of the log, which are all it
depends on, so that the Spark job, which has no Log, derives it the same way:

- only batches with a producer id (>= 0) count;
- a producer's epoch is that of its last batch (data or marker); a batch of another epoch
  clears what was known of its data batches (Kafka's ``maybeUpdateProducerEpoch``);
- its last data offset is the last offset of its last data batch of that epoch, or none;
- it has an ongoing transaction when a transactional data batch follows its last marker;
- it is expired (no longer active) when no transaction is ongoing and its last batch's max
  timestamp is ``producer.id.expiration.ms`` or more before now.

Vectorised over the header columns (numpy), one pass over every segment's headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from ..log.log import Log
from ..log.segment import LogSegment
from ..records.batch_format import CONTROL_FLAG, TRANSACTIONAL_FLAG


class LastRecord(NamedTuple):
    """An active producer's last data offset (None when it has none) and epoch."""

    last_data_offset: int | None
    producer_epoch: int


def _header_columns(segments: Iterable[LogSegment]) -> tuple[np.ndarray, ...]:
    cols: list[tuple[np.ndarray, ...]] = []
    for seg in segments:
        if seg.size_in_bytes == 0:
            continue
        t = seg.log.scan()
        keep = t.producer_id >= 0
        if keep.any():
            cols.append((t.producer_id[keep], t.producer_epoch[keep], t.attributes[keep],
                         t.last_offset[keep], t.max_timestamp[keep]))
    if not cols:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, empty
    return tuple(np.concatenate([c[i] for c in cols]) for i in range(5))


def last_records_of_active_producers(log: Log, now_ms: int, expiration_ms: int) -> dict[int, LastRecord]:
    return last_records_in(log.segments.values(), now_ms, expiration_ms)


def last_records_in(segments: Iterable[LogSegment], now_ms: int, expiration_ms: int) -> dict[int, LastRecord]:
    """``last_records_of_active_producers`` over a log's segments (all of them, in offset order)."""
    pid, epoch, attributes, last_offset, max_ts = _header_columns(segments)
    n = pid.shape[0]
    if n == 0:
        return {}
    order = np.argsort(pid, kind="stable")
    pid_s = pid[order]
    starts = np.flatnonzero(np.r_[True, pid_s[1:] != pid_s[:-1]])
    ends = np.r_[starts[1:], n] - 1  # last row of each producer, in sorted order
    last_rows = order[ends]
    group = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))
    final_epoch = epoch[last_rows].astype(np.int64)
    epoch_s = epoch[order].astype(np.int64)
    attrs_s = attributes[order].astype(np.int64)
    is_control = (attrs_s & CONTROL_FLAG) != 0
    is_txn = (attrs_s & TRANSACTIONAL_FLAG) != 0
    row_s = order.astype(np.int64)  # log order of each sorted row
    data_now = (~is_control) & (epoch_s == final_epoch[group])
    last_data = np.full(starts.size, -1, dtype=np.int64)
    np.maximum.at(last_data, group[data_now], last_offset[order][data_now])
    last_marker_row = np.full(starts.size, -1, dtype=np.int64)
    np.maximum.at(last_marker_row, group[is_control], row_s[is_control])
    last_txn_data_row = np.full(starts.size, -1, dtype=np.int64)
    txn_data = is_txn & ~is_control
    np.maximum.at(last_txn_data_row, group[txn_data], row_s[txn_data])
    ongoing = last_txn_data_row > last_marker_row
    expired = (~ongoing) & (now_ms - max_ts[last_rows].astype(np.int64) >= expiration_ms)
    out: dict[int, LastRecord] = {}
    for g in np.flatnonzero(~expired).tolist():
        data = int(last_data[g])
        out[int(pid_s[starts[g]])] = LastRecord(data if data >= 0 else None, int(final_epoch[g]))
    return out
