"""The compiled loops that fill the offset map from the batches of a dirty segment.

A window of batches is done in two steps, each one compiled ``nogil`` call (see logkeeper.aot):

- ``hash_kernel`` parses the window's records and hashes their keys into ``hashed``, one row a
  record of the window's data batches, in order: ``(h1, h2, offset)``, the offset -1 for a record
  that goes into no map (no key, or below ``start_offset``);
- ``put_kernel`` puts those rows into the table in offset order, following the batches.

Only the puts depend on what came before, so map_builder.py hashes windows ahead on a helper
thread while the cleaner's thread puts them in order (and, rather than wait, hashes one itself:
cleaner/ahead.py). The puts themselves prefetch
the home slot of the row ``PREFETCH_ROWS`` ahead: it arrives while the rows before it are put.
The two steps one after the other are faster than one loop that hashed a batch, prefetched its
slots and put them, and faster again on two threads (bench/results/design_figures.md: map
kernel).

Each batch row has a record area, in the segment's mapped bytes or, for a compressed batch, in
``dbuf`` (its decompressed records), and a mode:

    mode  batch                                what happens (Kafka's buildOffsetMapForSegment)
    0     data, not aborted                    records walked; keyed records at or above
                                               ``start_offset`` are put (offset = latest)
    1     aborted transactional data           counted as record_count records, not walked
    2     control                              counted as one record

After a whole batch, the map's latest offset moves to the batch's last offset when that is at
or above ``start_offset``. A record is only put while the map holds fewer than ``max_entries``
keys; the first keyed record beyond that stops the puts with status FULL (Kafka then stops the
round there: a partial map). Before a data batch whose records could push a growing table past
``grow_at``, ``put_kernel`` returns NEED_GROW; the caller grows the table and calls again from
that row.

Record layout and varints: see records/scan.py. Only length, attributes, timestampDelta,
offsetDelta and the key are parsed (scan_kernels.record_key); the rest of a record is skipped by
its length. A record so
parsed takes at least ``MIN_PARSED_RECORD`` bytes, which bounds the rows a window needs
(``hashed_rows``) whatever its batches claim.

A put that replaces a key's offset sets the replaced offset's bit in ``superseded`` (bit
``offset - superseded_base``, when within the bitmap; see offset_map.py), for the cleaning pass.
"""

from __future__ import annotations

import numpy as np

from ..aot import intrinsic, kernel
from ..records.scan_kernels import ERR_EXTRA_BYTES, ERR_NONE, ERR_TOO_FEW_RECORDS, record_key
from .offset_map import EMPTY, TABLE_FULL, home_slot, map_put
from .siphash import key_hash

_prefetch_row = intrinsic("prefetch_row")

DONE = 0
FULL = 1
NEED_GROW = 2

# A batch row's mode (the table in the docstring); the filter's modes are filter_kernels.FILTER_*.
MAP_DATA = 0
MAP_ABORTED = 1
MAP_CONTROL = 2
MODE_ABORTED = MAP_ABORTED  # the name spark/plan.py imports (issue 21's to rename)


PREFETCH_ROWS = 12  # put_kernel prefetches the home slot of the row this far ahead
# length varint, attributes, timestampDelta, offsetDelta, key length: a byte each at least
MIN_PARSED_RECORD = 5


def hashed_rows(record_count: np.ndarray, area_start: np.ndarray, area_end: np.ndarray, mode: np.ndarray) -> int:
    """Rows of ``hashed`` that a window's data batches can need: each batch's recordCount, at
    most the records its area can hold (a corrupt count fails the walk, not the allocation)."""
    fit = (area_end - area_start) // MIN_PARSED_RECORD + 1
    counts = np.minimum(np.maximum(record_count, 0), fit)
    return int(counts[mode == MAP_DATA].sum())


@kernel("u1[], u1[], b[], i8[], i8[], i4[], i8[], i1[], i8, u8, u8, i8[][] -> (i8, i8, i8, i8, i8)", nrt=False)
def hash_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, in_dbuf, area_start, area_end, record_count, base_offset, mode, start_offset, k0, k1, hashed,
):
    """Rows of ``hashed`` for the data batches' records. Returns (rows walked, records written,
    error code, error position, detail): the rows walked stop before the first batch that fails
    to parse, whose error the code describes."""
    capacity = hashed.shape[0]
    j = 0
    for r in range(area_start.shape[0]):
        if mode[r] != MAP_DATA:
            continue
        src = dbuf if in_dbuf[r] else buf
        p = area_start[r]
        e = area_end[r]
        base = base_offset[r]
        for i in range(record_count[r]):
            if p >= e or j >= capacity:
                return r, j, ERR_TOO_FEW_RECORDS, p, np.int64(i)
            err, detail, rec_end, delta, key_pos, key_len = record_key(src, p, e)
            if err != ERR_NONE:
                return r, j, err, p, detail
            offset = base + delta
            if key_len >= 0 and offset >= start_offset:
                h1, h2 = key_hash(src, key_pos, key_len, k0, k1)
                hashed[j, 0] = h1
                hashed[j, 1] = h2
                hashed[j, 2] = offset
            else:
                hashed[j, 2] = EMPTY
            j += 1
            p = rec_end
        if p != e:
            return r, j, ERR_EXTRA_BYTES, p, e - p
    return area_start.shape[0], j, ERR_NONE, np.int64(0), np.int64(0)


@kernel("i4[], i8[], i1[], i8, i8, i8, i8, i8[][], i8[][], i8, i8, i8, b, i8, u1[], i8 "
        "-> (i8, i8, i8, i8, i8, i8)", nrt=False)
def put_kernel(  # type: ignore[no-untyped-def]
    record_count, last_offset, mode, row0, rows, rec0, start_offset, hashed, table, entries, max_entries,
    grow_at, can_grow, latest, superseded, superseded_base,
):
    """Put the rows of ``hashed`` from ``rec0``, following batch rows [row0, rows). Returns
    (status, row, rec, entries, latest offset, records counted): for NEED_GROW, the row and
    rec to call again from."""
    slots = table.shape[0]
    n_hashed = hashed.shape[0]
    superseded_bits = superseded.shape[0] * 8
    rec = rec0
    counted = np.int64(0)
    for r in range(row0, rows):
        m = mode[r]
        if m == MAP_CONTROL:
            counted += 1
        elif m == MAP_ABORTED:
            counted += record_count[r]
        else:
            count = record_count[r]
            if can_grow and entries + count > grow_at:
                return NEED_GROW, r, rec, entries, latest, counted
            for _ in range(count):
                ahead = rec + PREFETCH_ROWS
                if ahead < n_hashed:  # rows not written yet hold garbage: a harmless hint
                    _prefetch_row(table, home_slot(hashed[ahead, 0], slots))
                offset = hashed[rec, 2]
                if offset != EMPTY:
                    if entries >= max_entries:
                        return FULL, r, rec, entries, latest, counted
                    replaced = map_put(table, hashed[rec, 0], hashed[rec, 1], offset)
                    if replaced == EMPTY:
                        entries += 1
                    elif replaced == TABLE_FULL:  # cannot happen: tables are sized for every key
                        return FULL, r, rec, entries, latest, counted
                    else:
                        d = replaced - superseded_base
                        if d >= 0 and d < superseded_bits:
                            superseded[d >> 3] |= np.uint8(1 << (d & 7))
                    latest = offset
                counted += 1
                rec += 1
        if last_offset[r] >= start_offset:
            latest = last_offset[r]
    return DONE, rows, rec, entries, latest, counted
