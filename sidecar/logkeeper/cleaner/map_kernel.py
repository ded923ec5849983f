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

Both take a window's batches as one typed view, ``rows`` (a ``MAP_ROW`` record a batch:
``rows_of`` builds it), and the map as its views (offset_map.py: table, state, superseded). Each
batch row has a record area (``area_start``, ``area_end``), in the segment's mapped bytes or,
for a compressed batch (``in_dbuf``), in ``dbuf`` (its decompressed records), and a mode:

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
that row. The state row's ``entries`` and ``latest`` are kept up to date by ``put_kernel``.

Record layout and varints: see records/scan.py. Only length, attributes, timestampDelta,
offsetDelta and the key are parsed (scan_kernels.record_key); the rest of a record is skipped by
its length. A record so
parsed takes at least ``MIN_PARSED_RECORD`` bytes, which bounds the rows a window needs
(``hashed_rows``) whatever its batches claim.

A put that replaces a key's offset sets the replaced offset's bit in ``superseded`` (see
offset_map.py), for the cleaning pass. ``hashed`` rows are ``(h1, h2, offset)``, a slot's
layout: what ``map_put`` stores.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..aot import kernel
from ..aot.signatures import record
from ..records.scan_kernels import ERR_EXTRA_BYTES, ERR_NONE, ERR_TOO_FEW_RECORDS, record_key
from .offset_map import EMPTY, TABLE_FULL, map_hash, map_put, mark_superseded, prefetch_home
from .segment_view import RecordAreas

# A batch of a window as both kernels read it.
MAP_ROW = record("map_row", [("in_dbuf", "?"), ("mode", "i1"), ("record_count", "<i8"), ("area_start", "<i8"),
                             ("area_end", "<i8"), ("base_offset", "<i8"), ("last_offset", "<i8")])

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


@kernel(inline=True)
def record_area(row, buf, dbuf):  # type: ignore[no-untyped-def]
    """Where the records of a batch row (any row type with ``in_dbuf``, ``area_start`` and
    ``area_end``) lie: (the bytes, start, end)."""
    return (dbuf if row.in_dbuf else buf), row.area_start, row.area_end


def rows_of(areas: RecordAreas, record_count: npt.NDArray[np.integer], base_offset: npt.NDArray[np.int64],
            last_offset: npt.NDArray[np.int64], mode: npt.NDArray[np.int8]) -> npt.NDArray[np.void]:
    """The ``MAP_ROW`` view of a window's batches (columns of its batch table, sliced alike)."""
    rows = np.empty(mode.shape[0], dtype=MAP_ROW)
    rows["in_dbuf"] = areas.in_dbuf
    rows["mode"] = mode
    rows["record_count"] = record_count
    rows["area_start"] = areas.start
    rows["area_end"] = areas.end
    rows["base_offset"] = base_offset
    rows["last_offset"] = last_offset
    return rows


def hashed_rows(rows: npt.NDArray[np.void]) -> int:
    """Rows of ``hashed`` that a window's data batches can need: each batch's recordCount, at
    most the records its area can hold (a corrupt count fails the walk, not the allocation)."""
    fit = (rows["area_end"] - rows["area_start"]) // MIN_PARSED_RECORD + 1
    counts = np.minimum(np.maximum(rows["record_count"], 0), fit)
    return int(counts[rows["mode"] == MAP_DATA].sum())


@kernel("u1[], u1[], map_row[], i8, map_state[], i8[][] -> (i8, i8, i8, i8, i8)", nrt=False)
def hash_kernel(buf, dbuf, rows, start_offset, state, hashed):  # type: ignore[no-untyped-def]
    """Rows of ``hashed`` for the data batches' records (keys hashed the map's way, under the
    secret in ``state``). Returns (rows walked, records written, error code, error position,
    detail): the rows walked stop before the first batch that fails to parse, whose error the
    code describes."""
    capacity = hashed.shape[0]
    j = 0
    for r in range(rows.shape[0]):
        row = rows[r]
        if row.mode != MAP_DATA:
            continue
        src, p, e = record_area(row, buf, dbuf)
        base = row.base_offset
        for i in range(row.record_count):
            if p >= e or j >= capacity:
                return r, j, ERR_TOO_FEW_RECORDS, p, np.int64(i)
            err, detail, rec_end, delta, key_pos, key_len = record_key(src, p, e)
            if err != ERR_NONE:
                return r, j, err, p, detail
            offset = base + delta
            if key_len >= 0 and offset >= start_offset:
                h1, h2 = map_hash(state, src, key_pos, key_len)
                hashed[j, 0] = h1
                hashed[j, 1] = h2
                hashed[j, 2] = offset
            else:
                hashed[j, 2] = EMPTY
            j += 1
            p = rec_end
        if p != e:
            return r, j, ERR_EXTRA_BYTES, p, e - p
    return rows.shape[0], j, ERR_NONE, np.int64(0), np.int64(0)


@kernel("map_row[], i8, i8, i8, i8, i8[][], i8[][], map_state[], u1[] -> (i8, i8, i8, i8)", nrt=False)
def put_kernel(rows, row0, n_rows, rec0, start_offset, hashed, table, state, superseded):  # type: ignore[no-untyped-def]
    """Put the rows of ``hashed`` from ``rec0``, following batch rows [row0, n_rows), into the
    map (table, state, superseded). Returns (status, row, rec, records counted): for NEED_GROW,
    the row and rec to call again from."""
    s = state[0]
    entries, latest, max_entries, grow_at = s.entries, s.latest, s.max_entries, s.grow_at
    n_hashed = hashed.shape[0]
    rec = rec0
    counted = np.int64(0)
    status = DONE
    r = row0
    while r < n_rows:
        row = rows[r]
        m = row.mode
        if m == MAP_CONTROL:
            counted += 1
        elif m == MAP_ABORTED:
            counted += row.record_count
        else:
            count = row.record_count
            if entries + count > grow_at:
                status = NEED_GROW
                break
            for _ in range(count):
                ahead = rec + PREFETCH_ROWS
                if ahead < n_hashed:  # rows not written yet hold garbage: a harmless hint
                    prefetch_home(table, hashed[ahead, 0])
                offset = hashed[rec, 2]
                if offset != EMPTY:
                    if entries >= max_entries:
                        status = FULL
                        break
                    replaced = map_put(table, hashed[rec, 0], hashed[rec, 1], offset)
                    if replaced == EMPTY:
                        entries += 1
                    elif replaced == TABLE_FULL:  # cannot happen: tables are sized for every key
                        status = FULL
                        break
                    else:
                        mark_superseded(superseded, state, replaced)
                    latest = offset
                counted += 1
                rec += 1
            if status != DONE:
                break
        if row.last_offset >= start_offset:
            latest = row.last_offset
        r += 1
    s.entries = entries
    s.latest = latest
    return status, r, rec, counted
