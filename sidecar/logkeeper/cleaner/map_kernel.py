"""The compiled loop that fills the offset map from the batches of a dirty segment.

One call covers a window of batches (compiled ``nogil``, see logkeeper.aot: threads run in
parallel). Each batch row has a record area, in the segment's mapped bytes or, for a
compressed batch, in ``dbuf`` (its decompressed records), and a mode:

    mode  batch                                what happens (Kafka's buildOffsetMapForSegment)
    0     data, not aborted                    records walked; keyed records at or above
                                               ``start_offset`` are put (offset = latest)
    1     aborted transactional data           counted as record_count records, not walked
    2     control                              counted as one record

After a whole batch, the map's latest offset moves to the batch's last offset when that is at
or above ``start_offset``. A record is only put while the map holds fewer than ``max_entries``
keys; the first keyed record beyond that stops the call with status FULL (Kafka then stops the
round there: a partial map). Before a data batch whose records could push a growing table
past ``grow_at``, the call returns NEED_GROW; the caller grows the table and calls again from
that row.

Record layout and varints: see records/scan.py. Only length, attributes, timestampDelta,
offsetDelta and the key are parsed; the rest of a record is skipped by its length. A data batch
is done in two phases: its records are parsed and their keys hashed first, each hash followed by
a prefetch of its home slot, then put in offset order; by then the slots are (mostly) in the
cache. Without the prefetch the puts' misses only overlap as far as the CPU reorders them: the
kernel took 92-120 ms a W1 round against 64-67 ms with it, measured in alternation on a busy host.
Returns (status, row, entries, latest offset, records counted, error code, error position, detail).

A put that replaces a key's offset sets the replaced offset's bit in ``superseded`` (bit
``offset - superseded_base``, when within the bitmap; see offset_map.py), for the cleaning pass.
"""

from __future__ import annotations

import numpy as np

from ..aot import intrinsic, kernel
from ..records.scan_kernels import (
    ERR_EXTRA_BYTES,
    ERR_LENGTH_PAST_END,
    ERR_NEGATIVE_LENGTH,
    ERR_NONE,
    ERR_SIZE_MISMATCH,
    ERR_TOO_FEW_RECORDS,
    _varint,
    _varlong,
)
from .offset_map import EMPTY, TABLE_FULL, home_slot, map_put
from .siphash import key_hash

_prefetch_row = intrinsic("prefetch_row")

DONE = 0
FULL = 1
NEED_GROW = 2
ERROR = 3

MODE_DATA = 0
MODE_ABORTED = 1
MODE_CONTROL = 2


@kernel("u1[], u1[], b[], i8[], i8[], i4[], i8[], i8[], i1[], i8, i8, i8[][], u8, u8, i8, i8, i8, b, "
        "i8, u1[], i8 -> (i8, i8, i8, i8, i8, i8, i8, i8)")
def map_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, in_dbuf, area_start, area_end, record_count, base_offset, last_offset, mode,
    row0, start_offset, table, k0, k1, entries, max_entries, grow_at, can_grow, latest,
    superseded, superseded_base,
):
    n = area_start.shape[0]
    slots = table.shape[0]
    superseded_bits = superseded.shape[0] * 8
    scratch = 1
    for r in range(row0, n):
        scratch = max(scratch, record_count[r])
    offsets = np.empty(scratch, np.int64)
    h1s = np.empty(scratch, np.int64)
    h2s = np.empty(scratch, np.int64)
    keyed = np.empty(scratch, np.bool_)
    counted = np.int64(0)
    for r in range(row0, n):
        m = mode[r]
        if m == MODE_CONTROL:
            counted += 1
        elif m == MODE_ABORTED:
            counted += record_count[r]
        else:
            count = record_count[r]
            if can_grow and entries + count > grow_at:
                return NEED_GROW, r, entries, latest, counted, ERR_NONE, np.int64(0), np.int64(0)
            src = dbuf if in_dbuf[r] else buf
            p = area_start[r]
            e = area_end[r]
            base = base_offset[r]
            # phase 1: parse and hash the whole batch (independent loads overlap their misses)
            for j in range(count):
                if p >= e:
                    return ERROR, r, entries, latest, counted, ERR_TOO_FEW_RECORDS, p, np.int64(j)
                length, q, err = _varint(src, p, e)
                if err != ERR_NONE:
                    return ERROR, r, entries, latest, counted, err, p, np.int64(0)
                rec_end = q + length
                if length < 0 or rec_end > e:
                    return ERROR, r, entries, latest, counted, ERR_LENGTH_PAST_END, p, length
                _ts, q, err = _varlong(src, q + 1, rec_end)
                if err != ERR_NONE:
                    return ERROR, r, entries, latest, counted, err, p, np.int64(0)
                delta, q, err = _varint(src, q, rec_end)
                if err != ERR_NONE:
                    return ERROR, r, entries, latest, counted, err, p, np.int64(0)
                key_len, q, err = _varint(src, q, rec_end)
                if err != ERR_NONE:
                    return ERROR, r, entries, latest, counted, err, p, np.int64(0)
                if key_len < -1:
                    return ERROR, r, entries, latest, counted, ERR_NEGATIVE_LENGTH, p, key_len
                if q + key_len > rec_end:
                    return ERROR, r, entries, latest, counted, ERR_SIZE_MISMATCH, p, length
                offset = base + delta
                offsets[j] = offset
                keyed[j] = key_len >= 0 and offset >= start_offset
                if keyed[j]:
                    h1s[j], h2s[j] = key_hash(src, q, key_len, k0, k1)
                    _prefetch_row(table, home_slot(h1s[j], slots))  # put in phase 2
                p = rec_end
            if p != e:
                return ERROR, r, entries, latest, counted, ERR_EXTRA_BYTES, p, e - p
            # phase 2: the puts, in offset order
            for j in range(count):
                if keyed[j]:
                    if entries >= max_entries:
                        return FULL, r, entries, latest, counted, ERR_NONE, np.int64(0), np.int64(0)
                    replaced = map_put(table, h1s[j], h2s[j], offsets[j])
                    if replaced == EMPTY:
                        entries += 1
                    elif replaced == TABLE_FULL:  # cannot happen: tables are sized for every key
                        return FULL, r, entries, latest, counted, ERR_NONE, np.int64(0), np.int64(0)
                    else:
                        d = replaced - superseded_base
                        if d >= 0 and d < superseded_bits:
                            superseded[d >> 3] |= np.uint8(1 << (d & 7))
                    latest = offsets[j]
                counted += 1
        if last_offset[r] >= start_offset:
            latest = last_offset[r]
    return DONE, n, entries, latest, counted, ERR_NONE, np.int64(0), np.int64(0)
