"""Compiled loops of the cleaning pass: which records stay, and the bytes of the cleaned batches.

``decide_kernel`` walks the records of a window of batches and marks each record kept or not,
by Kafka's rules (``Cleaner.shouldRetainRecord`` inside ``MemoryRecords.filterTo``), per batch
mode:

    mode  batch                                   records kept
    0     deleted whole (not even read)           -
    1     kept only as a header, or dropped       none (read and counted)
    2     control                                 all
    3     data                                    offset > latest offset of the map; else a
                                                  keyed record whose offset >= the map's offset
                                                  for its key and that is not an expired
                                                  tombstone (value null and now >= horizon);
                                                  unkeyed records are dropped and counted

The map's offset for a key (``found``) comes from the SipHash offset map (``exact`` false), or,
with ``exact`` true, from decisions made by exact key outside (cleaner/exact.py: the sorted
``kept`` and ``superseded`` offsets, walked with a cursor; no key is hashed). Everything else is
the same code for both. With the offset map, a record whose offset lies in the map's superseded
bitmap (``superseded`` from ``superseded_base``: the offsets the map was built from, see
offset_map.py) needs no lookup: found is the record's own offset unless its bit is set (a later
offset of its key was put). Any other record's key is hashed in phase 1 and probed in phase 2.

Before walking a batch it checks the batch's CRC (CRC-32C of bytes 21..size, against the stored
one), every batch of the window, deleted ones too: a mismatch stops the window with ``ERR_CRC``.
Checked here rather than in a pass of its own, the batch is then in the cache for its walk: one
pass is faster than two over the same bytes (bench/results/design_figures.md: filter kernels).

Both kernels take a window's batches as one typed view, ``rows``: a ``WINDOW_ROW`` record a
batch, its header fields, record area and mode filled in by filter.py, its outputs by the
kernels; and the keys' lookup as ``lookup`` (a one-row ``LOOKUP``: exact or not, the latest
offset, ``now``) with the offset map's views (offset_map.py) or the exact decisions' arrays.

Per batch it notes in its row records read, records kept, whether a kept record is a tombstone, the
largest and the first kept timestamp (a record's timestamp is baseTimestamp + delta, or the
batch's maxTimestamp under LogAppendTime, as Kafka's reader reports it).

``decide_kernel`` also notes where each record starts, so that ``assemble_kernel`` reads only the
kept records again (a round typically drops most of them). It writes every batch by its action:

    action  output
    0       nothing
    1       the original bytes (all records kept, nothing to stamp)
    2       a 61-byte header-only batch: recordCount 0, baseTimestamp -1, codec none, no delete
            horizon; offsets, producer fields, leader epoch, max timestamp kept (Kafka's
            ``DefaultRecordBatch.writeEmptyHeader``)
    3       the batch rebuilt from its kept records: header fields kept except recordCount,
            batchLength, attributes (0x40 set when it carries a delete horizon), baseTimestamp
            (the delete horizon, else the first kept record's timestamp) and maxTimestamp;
            each kept record re-encoded with a timestamp delta from the new baseTimestamp and
            attributes 0, its offset delta, key, value and headers unchanged. For a compressed
            batch the records are written uncompressed and the caller compresses them.

The CRC of written headers is left 0: the caller computes it (CRC-32C from byte 21). Errors are
reported as in records/scan_kernels.py (error code, position, batch row, detail).
"""

from __future__ import annotations

import numpy as np

from ..aot import kernel
from ..aot.signatures import record
from ..records import batch_format as bf
from ..records.crc_kernels import crc32c_any, crc32c_range
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
from .map_kernel import record_area
from .offset_map import map_get, map_hash, prefetch_home, superseded_bit

FILTER_DELETE = 0
FILTER_DISCARD = 1
FILTER_CONTROL = 2
FILTER_DATA = 3

ACTION_DROP = 0
ACTION_ORIGINAL = 1
ACTION_EMPTY = 2
ACTION_REBUILD = 3

ERR_CRC = 40  # a source batch's stored CRC differs from its bytes'; detail = the CRC computed
MAX_RECORD_GROWTH = 16  # bytes a re-encoded record may gain (length and timestamp varints)
# what a header-only batch keeps of its source's attributes: codec none, no delete horizon
_EMPTY_KEEPS = bf.TIMESTAMP_TYPE_MASK | bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG


# A batch of a window, as both kernels see it: its header fields (batch table columns), where its
# records are (``in_dbuf``, ``area_start``/``area_end``), the cleaning pass's mode and the decide
# kernel's outputs, then the assemble kernel's inputs (``action`` and the rebuilt header's fields)
# and outputs (where the batch went in ``out``). filter.py fills the inputs column by column.
WINDOW_ROW = record("window_row", [
    # the batch header
    ("position", "<i8"), ("size", "<i8"), ("crc", "<u4"), ("record_count", "<i8"), ("base_offset", "<i8"),
    ("last_offset_delta", "<i4"), ("base_ts", "<i8"), ("max_ts", "<i8"), ("leader_epoch", "<i4"),
    ("attributes", "<i8"), ("producer_id", "<i8"), ("producer_epoch", "<i2"), ("base_sequence", "<i4"),
    # the records and how they are read
    ("in_dbuf", "?"), ("area_start", "<i8"), ("area_end", "<i8"), ("mode", "i1"), ("log_append_time", "?"),
    ("horizon", "<i8"), ("keep_base", "<i8"),
    # decide_kernel's outputs
    ("n_read", "<i8"), ("n_kept", "<i8"), ("n_invalid", "<i8"), ("has_tombstone", "?"), ("kept_max_ts", "<i8"),
    ("first_kept_ts", "<i8"),
    # assemble_kernel's inputs and outputs
    ("action", "i1"), ("new_attributes", "<i8"), ("new_base_ts", "<i8"), ("new_max_ts", "<i8"), ("out_pos", "<i8"),
    ("out_size", "<i8"),
])

# How a window's keyed records are looked up: by the offset map, or (exact) by decisions made by
# exact key elsewhere (cleaner/exact.py); records above ``latest`` are kept without a lookup.
LOOKUP = record("lookup", [("exact", "?"), ("latest", "<i8"), ("first_dirty", "<i8"), ("now", "<i8")])


@kernel("u1[], u1[], window_row[], lookup[], b[], i8[], i8[][], map_state[], u1[], i8[], i8[] -> (i8, i8, i8, i8)")
def decide_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, rows, lookup, keep, rec_pos, table, state, superseded_bits, kept_offsets, superseded_offsets,
):
    """Mark each record of the window's batches kept or not (``keep``, from each row's
    ``keep_base``), noting where it starts (``rec_pos``) and each row's figures. The map is
    (table, state, superseded_bits); with ``exact`` the two offset arrays answer instead.
    Returns (error code, position, row, detail)."""
    look = lookup[0]
    exact, latest, now, first_dirty = look.exact, look.latest, look.now, look.first_dirty
    n = rows.shape[0]
    # cursors into the exact decisions: records come in offset order within a window
    kc = np.searchsorted(kept_offsets, rows[0].base_offset) if exact and n else 0
    sc = np.searchsorted(superseded_offsets, rows[0].base_offset) if exact and n else 0
    n_kept_offsets = kept_offsets.shape[0]
    n_superseded = superseded_offsets.shape[0]
    scratch = 1
    for r in range(n):
        scratch = max(scratch, rows[r].record_count)
    offsets = np.empty(scratch, np.int64)
    stamps = np.empty(scratch, np.int64)
    key_lens = np.empty(scratch, np.int64)
    value_lens = np.empty(scratch, np.int64)
    h1s = np.empty(scratch, np.int64)
    h2s = np.empty(scratch, np.int64)
    for r in range(n):
        row = rows[r]
        row.n_read = 0
        row.n_kept = 0
        row.has_tombstone = False
        row.kept_max_ts = -1
        row.first_kept_ts = -1
        row.n_invalid = 0
        # the batch's CRC first, every batch: its bytes are then in the cache for the walk
        computed = crc32c_any(buf, row.position + 21, row.position + row.size)
        if computed != row.crc:
            return ERR_CRC, row.position, r, np.int64(computed)
        m = row.mode
        if m == FILTER_DELETE:
            continue
        src, p, e = record_area(row, buf, dbuf)
        base = row.base_offset
        lat = row.log_append_time
        batch_max_ts = row.max_ts
        batch_base_ts = row.base_ts
        h = row.horizon
        k = row.keep_base
        count = row.record_count
        # phase 1: parse the batch, hash the keys that need a lookup
        for j in range(count):
            if p >= e:
                return ERR_TOO_FEW_RECORDS, p, r, np.int64(j)
            rec_pos[k + j] = p
            length, q, err = _varint(src, p, e)
            if err != ERR_NONE:
                return err, p, r, np.int64(0)
            rec_end = q + length
            if length < 0 or rec_end > e:
                return ERR_LENGTH_PAST_END, p, r, length
            ts_delta, q, err = _varlong(src, q + 1, rec_end)
            if err != ERR_NONE:
                return err, p, r, np.int64(0)
            delta, q, err = _varint(src, q, rec_end)
            if err != ERR_NONE:
                return err, p, r, np.int64(0)
            key_len, q, err = _varint(src, q, rec_end)
            if err != ERR_NONE:
                return err, p, r, np.int64(0)
            if key_len < -1 or q + key_len > rec_end:
                return ERR_NEGATIVE_LENGTH if key_len < -1 else ERR_SIZE_MISMATCH, p, r, key_len
            key_pos = q
            value_len, q, err = _varint(src, q + max(key_len, 0), rec_end)
            if err != ERR_NONE:
                return err, p, r, np.int64(0)
            if value_len < -1 or q + value_len > rec_end:
                return ERR_NEGATIVE_LENGTH if value_len < -1 else ERR_SIZE_MISMATCH, p, r, value_len
            offset = base + delta
            offsets[j] = offset
            stamps[j] = batch_max_ts if lat else batch_base_ts + ts_delta
            key_lens[j] = key_len
            value_lens[j] = value_len
            if (not exact and m == FILTER_DATA and offset <= latest and key_len >= 0
                    and superseded_bit(superseded_bits, state, offset) < 0):
                h1s[j], h2s[j] = map_hash(state, src, key_pos, key_len)
                prefetch_home(table, h1s[j])  # probed in phase 2
            p = rec_end
        if p != e:
            return ERR_EXTRA_BYTES, p, r, e - p
        # phase 2: the lookups and the decisions, in offset order (the batch's figures in locals:
        # stores into the rows on every record would go to memory each time)
        nk = 0
        invalid = 0
        tombstone = False
        kmax = np.int64(-1)
        kfirst = np.int64(-1)
        for j in range(count):
            kept = False
            if m == FILTER_CONTROL:
                kept = True
            elif m == FILTER_DATA:
                if offsets[j] > latest:
                    kept = True
                elif key_lens[j] < 0:
                    invalid += 1
                else:
                    o = offsets[j]
                    if not exact:
                        later = superseded_bit(superseded_bits, state, o)
                        found = o + later if later >= 0 else map_get(table, h1s[j], h2s[j])
                    elif o >= first_dirty:
                        while kc < n_kept_offsets and kept_offsets[kc] < o:
                            kc += 1
                        found = o if kc < n_kept_offsets and kept_offsets[kc] == o else o + 1
                    else:
                        while sc < n_superseded and superseded_offsets[sc] < o:
                            sc += 1
                        found = o + 1 if sc < n_superseded and superseded_offsets[sc] == o else np.int64(-1)
                    kept = o >= found and (value_lens[j] >= 0 or h < 0 or now < h)
            keep[k + j] = kept
            if kept:
                ts = stamps[j]
                if nk == 0:
                    kfirst = ts
                if ts > kmax:
                    kmax = ts
                nk += 1
                if value_lens[j] < 0:
                    tombstone = True
        row.n_read = count
        row.n_kept = nk
        row.n_invalid = invalid
        row.has_tombstone = tombstone
        row.kept_max_ts = kmax
        row.first_kept_ts = kfirst
    return ERR_NONE, np.int64(0), np.int64(-1), np.int64(0)


@kernel(inline=True)
def _put_be(out, p, v, nbytes):  # type: ignore[no-untyped-def]
    x = np.uint64(v)
    for i in range(nbytes):
        out[p + nbytes - 1 - i] = np.uint8(x & np.uint64(0xFF))
        x >>= np.uint64(8)


@kernel(inline=True)
def _put_uvarint(out, p, z):  # type: ignore[no-untyped-def]
    while z >= np.uint64(0x80):
        out[p] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(z)
    return p + 1


@kernel(inline=True)
def _put_varint(out, p, v):  # type: ignore[no-untyped-def]
    """Kafka's writeVarint: zigzag over 32 bits, then LEB128."""
    v32 = np.int64(np.int32(v))
    z = np.uint64(((v32 << 1) ^ (v32 >> 31)) & 0xFFFFFFFF)
    return _put_uvarint(out, p, z)


@kernel(inline=True)
def _uvarint_size(z):  # type: ignore[no-untyped-def]
    n = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        n += 1
    return n


@kernel()
def _write_header(  # type: ignore[no-untyped-def]
    out, p, base_offset, batch_length, leader_epoch, attributes, last_offset_delta, base_ts,
    max_ts, producer_id, producer_epoch, base_sequence, count,
):
    _put_be(out, p, base_offset, 8)
    _put_be(out, p + bf.LENGTH_OFFSET, batch_length, 4)
    _put_be(out, p + bf.PARTITION_LEADER_EPOCH_OFFSET, leader_epoch, 4)
    out[p + bf.MAGIC_OFFSET] = bf.MAGIC
    _put_be(out, p + bf.CRC_OFFSET, 0, 4)
    _put_be(out, p + bf.ATTRIBUTES_OFFSET, attributes, 2)
    _put_be(out, p + bf.LAST_OFFSET_DELTA_OFFSET, last_offset_delta, 4)
    _put_be(out, p + bf.BASE_TIMESTAMP_OFFSET, base_ts, 8)
    _put_be(out, p + bf.MAX_TIMESTAMP_OFFSET, max_ts, 8)
    _put_be(out, p + bf.PRODUCER_ID_OFFSET, producer_id, 8)
    _put_be(out, p + bf.PRODUCER_EPOCH_OFFSET, producer_epoch, 2)
    _put_be(out, p + bf.BASE_SEQUENCE_OFFSET, base_sequence, 4)
    _put_be(out, p + bf.RECORDS_COUNT_OFFSET, count, 4)


@kernel("u1[], u1[], window_row[], b[], i8[], u1[] -> i8")
def assemble_kernel(buf, dbuf, rows, keep, rec_pos, out):  # type: ignore[no-untyped-def]
    """Write every batch's output into ``out`` by its ``action`` (its ``out_pos`` and
    ``out_size`` noted in its row); returns the bytes written."""
    w = np.int64(0)
    for r in range(rows.shape[0]):
        row = rows[r]
        a = row.action
        row.out_pos = w
        if a == ACTION_DROP:
            row.out_size = 0
            continue
        if a == ACTION_ORIGINAL:
            s = row.size
            p0 = row.position
            out[w:w + s] = buf[p0:p0 + s]
            row.out_size = s
            w += s
            continue
        if a == ACTION_EMPTY:
            _write_header(out, w, row.base_offset, bf.MIN_BATCH_LENGTH, row.leader_epoch,
                          row.attributes & _EMPTY_KEEPS, row.last_offset_delta, -1, row.max_ts,
                          row.producer_id, row.producer_epoch, row.base_sequence, 0)
            row.out_size = bf.HEADER_SIZE
            w += bf.HEADER_SIZE
            continue
        # rebuild from the kept records
        src, _, _ = record_area(row, buf, dbuf)
        q0 = w + bf.HEADER_SIZE
        o = q0
        lat = row.log_append_time
        max_ts = row.max_ts
        base_ts = row.base_ts
        new_base = row.new_base_ts
        k = row.keep_base
        for j in range(row.record_count):
            # only the kept records are read again, from where decide_kernel found them
            if keep[k + j]:
                p = rec_pos[k + j]
                length, q, _err = _varint(src, p, p + 5)
                rec_end = q + length
                ts_delta, q2, _err = _varlong(src, q + 1, rec_end)
                delta, q3, _err = _varint(src, q2, rec_end)
                ts = max_ts if lat else base_ts + ts_delta
                new_delta = ts - new_base
                zd = (np.uint64(new_delta) << np.uint64(1)) ^ np.uint64(np.int64(new_delta) >> 63)
                d32 = np.int64(np.int32(delta))
                zo = np.uint64(((d32 << 1) ^ (d32 >> 31)) & 0xFFFFFFFF)
                rest = rec_end - q3
                body = 1 + _uvarint_size(zd) + _uvarint_size(zo) + rest
                o = _put_varint(out, o, body)
                out[o] = 0
                o = _put_uvarint(out, o + 1, zd)
                o = _put_uvarint(out, o, zo)
                out[o:o + rest] = src[q3:rec_end]
                o += rest
        total = o - w
        _write_header(out, w, row.base_offset, total - bf.LOG_OVERHEAD, row.leader_epoch, row.new_attributes,
                      row.last_offset_delta, new_base, row.new_max_ts, row.producer_id,
                      row.producer_epoch, row.base_sequence, row.n_kept)
        row.out_size = total
        w = o
    return w


@kernel("u1[], window_row[], i8[] -> none")
def fill_crcs(out, rows, which):  # type: ignore[no-untyped-def]
    """Write the CRC-32C of the batches ``which`` (row numbers) of ``out`` (needs the CPU's CRC
    instruction)."""
    for i in range(which.shape[0]):
        row = rows[which[i]]
        p = row.out_pos
        _put_be(out, p + bf.CRC_OFFSET, crc32c_range(out, p + bf.ATTRIBUTES_OFFSET, p + row.out_size), 4)
