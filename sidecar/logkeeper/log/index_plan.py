"""Where a segment's index entries go, computed for many batches at once (recovery, the cleaner's
appends of whole windows).

The rule is the append path's (see ``segment.py``): walking the batches in order, an entry goes
before batch ``i`` when more than index.interval.bytes lie between the position of the last
entry and batch ``i``'s start; the offset entry pairs batch ``i``'s last offset with its start,
and the time entry pairs the largest batch max timestamp seen so far (batches 0..i) with the
last offset of the batch that first reached it — kept only when it grows, as
``TimeIndex.maybe_append`` does. The sequential part is one compiled loop; the rest is numpy.

A plan continues from a segment's state (``IndexState``: bytes since its last entry, largest
timestamp so far and its offset, the time index's last timestamp); a rebuild starts from
``IndexState.empty``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..aot import kernel
from ..records.batch_format import NO_TIMESTAMP

I64 = npt.NDArray[np.int64]


@kernel("i8[], i8, i8 -> (i8[], i8)")
def _entry_rows(positions, interval, last_entry):  # type: ignore[no-untyped-def]
    out = np.empty(positions.shape[0], np.int64)
    k = 0
    last = last_entry
    for i in range(positions.shape[0]):
        if positions[i] - last > interval:
            out[k] = i
            k += 1
            last = positions[i]
    return out[:k], last


class IndexState(NamedTuple):
    """What the append path carries from batch to batch (LogSegment's fields of the same names)."""

    bytes_since_last_entry: int
    max_timestamp: int
    offset_of_max_timestamp: int
    last_time_entry: int  # the time index's last timestamp, NO_TIMESTAMP when it is empty

    @classmethod
    def empty(cls, base_offset: int) -> IndexState:
        return cls(0, NO_TIMESTAMP, base_offset, NO_TIMESTAMP)


class IndexPlan(NamedTuple):
    """The index entries a run of appended batches makes, and the index state after them."""

    offset_entries: tuple[I64, I64]  # (offsets, positions)
    time_entries: tuple[I64, I64]  # (timestamps, offsets)
    max_timestamp: int  # largest batch max timestamp, -1 when none
    offset_of_max_timestamp: int  # last offset of the batch that first reached it
    bytes_since_last_entry: int


def plan_index_entries(positions: npt.ArrayLike, sizes: npt.ArrayLike, last_offsets: npt.ArrayLike,
                       max_timestamps: npt.ArrayLike, interval_bytes: int, state: IndexState) -> IndexPlan:
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    last = np.asarray(last_offsets, dtype=np.int64)
    ts = np.asarray(max_timestamps, dtype=np.int64)
    empty = np.zeros(0, np.int64)
    if pos.shape[0] == 0:
        return IndexPlan((empty, empty), (empty, empty), state.max_timestamp, state.offset_of_max_timestamp,
                         state.bytes_since_last_entry)
    rows, last_entry_pos = _entry_rows(pos, np.int64(interval_bytes),
                                       np.int64(pos[0] - state.bytes_since_last_entry))
    # Kafka's "max so far" starts at -1 (no timestamp): clamp before accumulating
    running_max = np.maximum.accumulate(np.maximum(ts, max(state.max_timestamp, NO_TIMESTAMP)))
    previous = np.concatenate(([state.max_timestamp], running_max[:-1]))
    reached = np.where(ts > previous, np.arange(ts.shape[0]), -1)
    reached = np.maximum.accumulate(reached)  # row whose batch first reached the running max, or -1
    reached_offsets = np.where(reached >= 0, last[np.maximum(reached, 0)], state.offset_of_max_timestamp)
    sel_ts = running_max[rows]
    sel_prev = np.concatenate(([state.last_time_entry], sel_ts[:-1]))
    keep = sel_ts > sel_prev
    time_rows = rows[keep]
    return IndexPlan(
        (last[rows], pos[rows]),
        (sel_ts[keep], reached_offsets[time_rows]),
        int(running_max[-1]),
        int(reached_offsets[-1]),
        int(pos[-1] + size[-1] - last_entry_pos),
    )
