"""Where a segment's index entries go, computed for all batches at once (recovery, splits).

The rule is the append path's (see ``segment.py``): walking the batches in order, an entry goes
before batch ``i`` when more than index.interval.bytes lie between the position of the last
entry and batch ``i``'s start; the offset entry pairs batch ``i``'s last offset with its start,
and the time entry pairs the largest batch max timestamp seen so far (batches 0..i) with the
last offset of the batch that first reached it — kept only when it grows, as
``TimeIndex.maybe_append`` does. The sequential part is one compiled loop; the rest is numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..aot import kernel
from ..records.batch import NO_TIMESTAMP

I64 = npt.NDArray[np.int64]


@kernel("i8[], i8 -> (i8[], i8)")
def _entry_rows(positions, interval):  # type: ignore[no-untyped-def]
    out = np.empty(positions.shape[0], np.int64)
    k = 0
    last = np.int64(0)
    for i in range(positions.shape[0]):
        if positions[i] - last > interval:
            out[k] = i
            k += 1
            last = positions[i]
    return out[:k], last


@dataclass(frozen=True)
class IndexPlan:
    offset_entries: tuple[I64, I64]  # (offsets, positions)
    time_entries: tuple[I64, I64]  # (timestamps, offsets)
    max_timestamp: int  # largest batch max timestamp, -1 when none
    offset_of_max_timestamp: int  # last offset of the batch that first reached it
    bytes_since_last_entry: int


def plan_index_entries(positions: npt.ArrayLike, sizes: npt.ArrayLike, last_offsets: npt.ArrayLike,
                       max_timestamps: npt.ArrayLike, interval_bytes: int, base_offset: int) -> IndexPlan:
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    last = np.asarray(last_offsets, dtype=np.int64)
    ts = np.asarray(max_timestamps, dtype=np.int64)
    empty = np.zeros(0, np.int64)
    if pos.shape[0] == 0:
        return IndexPlan((empty, empty), (empty, empty), NO_TIMESTAMP, base_offset, 0)
    rows, last_entry_pos = _entry_rows(pos, np.int64(interval_bytes))
    # Kafka's "max so far" starts at -1 (no timestamp): clamp before accumulating
    running_max = np.maximum.accumulate(np.maximum(ts, NO_TIMESTAMP))
    previous = np.concatenate(([NO_TIMESTAMP], running_max[:-1]))
    reached = np.where(ts > previous, np.arange(ts.shape[0]), -1)
    reached = np.maximum.accumulate(reached)  # row whose batch first reached the running max
    sel_ts = running_max[rows]
    sel_prev = np.concatenate(([NO_TIMESTAMP], sel_ts[:-1]))
    keep = sel_ts > sel_prev
    time_rows = rows[keep]
    final = int(reached[-1])
    return IndexPlan(
        (last[rows], pos[rows]),
        (sel_ts[keep], last[reached[time_rows]]),
        int(running_max[-1]) if final >= 0 else NO_TIMESTAMP,
        int(last[final]) if final >= 0 else base_offset,
        int(pos[-1] + size[-1] - last_entry_pos),
    )
