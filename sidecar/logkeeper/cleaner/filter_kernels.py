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

Per batch it returns records read, records kept, whether a kept record is a tombstone, the
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

from ..aot import intrinsic, kernel
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
from .offset_map import home_slot, map_get
from .siphash import key_hash

FILTER_DELETE = 0
FILTER_DISCARD = 1
FILTER_CONTROL = 2
FILTER_DATA = 3

ACTION_DROP = 0
ACTION_ORIGINAL = 1
ACTION_EMPTY = 2
ACTION_REBUILD = 3

_prefetch_row = intrinsic("prefetch_row")

ERR_CRC = 40  # a source batch's stored CRC differs from its bytes'; detail = the CRC computed
MAX_RECORD_GROWTH = 16  # bytes a re-encoded record may gain (length and timestamp varints)
# what a header-only batch keeps of its source's attributes: codec none, no delete horizon
_EMPTY_KEEPS = bf.TIMESTAMP_TYPE_MASK | bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG


@kernel("u1[], u1[], b[], i8[], i8[], i4[], i8[], i8[], i8[], b[], i8[], i1[], i8[], b[], i8[], i8[][], u8, "
        "u8, i8, i8, i8[], i8[], b[], i8[], i8[], i8[], b, i8[], i8[], i8, u1[], i8, i8[], i4[], u4[] "
        "-> (i8, i8, i8, i8)")
def decide_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, in_dbuf, area_start, area_end, record_count, base_offset, base_ts, max_ts,
    log_append_time, horizon, mode, keep_base, keep, rec_pos,
    table, k0, k1, latest, now,
    n_read, n_kept, has_tombstone, kept_max_ts, first_kept_ts, n_invalid,
    exact, kept_offsets, superseded_offsets, first_dirty, superseded_bits, superseded_base,
    position, size, crc,
):
    bitmap_end = superseded_base + superseded_bits.shape[0] * 8
    # cursors into the exact decisions: records come in offset order within a window
    kc = np.searchsorted(kept_offsets, base_offset[0]) if exact and base_offset.shape[0] else 0
    sc = np.searchsorted(superseded_offsets, base_offset[0]) if exact and base_offset.shape[0] else 0
    n_kept_offsets = kept_offsets.shape[0]
    n_superseded = superseded_offsets.shape[0]
    scratch = 1
    for r in range(area_start.shape[0]):
        scratch = max(scratch, record_count[r])
    offsets = np.empty(scratch, np.int64)
    stamps = np.empty(scratch, np.int64)
    key_lens = np.empty(scratch, np.int64)
    value_lens = np.empty(scratch, np.int64)
    h1s = np.empty(scratch, np.int64)
    h2s = np.empty(scratch, np.int64)
    for r in range(area_start.shape[0]):
        n_read[r] = 0
        n_kept[r] = 0
        has_tombstone[r] = False
        kept_max_ts[r] = -1
        first_kept_ts[r] = -1
        n_invalid[r] = 0
        # the batch's CRC first, every batch: its bytes are then in the cache for the walk
        computed = crc32c_any(buf, position[r] + 21, position[r] + size[r])
        if computed != crc[r]:
            return ERR_CRC, position[r], r, np.int64(computed)
        m = mode[r]
        if m == FILTER_DELETE:
            continue
        src = dbuf if in_dbuf[r] else buf
        p = area_start[r]
        e = area_end[r]
        base = base_offset[r]
        lat = log_append_time[r]
        batch_max_ts = max_ts[r]
        batch_base_ts = base_ts[r]
        h = horizon[r]
        k = keep_base[r]
        count = record_count[r]
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
            if not exact and m == FILTER_DATA and offset <= latest and key_len >= 0 and not (
                    superseded_base <= offset < bitmap_end):
                h1s[j], h2s[j] = key_hash(src, key_pos, key_len, k0, k1)
                _prefetch_row(table, home_slot(h1s[j], table.shape[0]))  # probed in phase 2
            p = rec_end
        if p != e:
            return ERR_EXTRA_BYTES, p, r, e - p
        # phase 2: the lookups and the decisions, in offset order (the batch's figures in locals:
        # stores into the output arrays on every record would go to memory each time)
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
                        if superseded_base <= o < bitmap_end:
                            d = o - superseded_base
                            found = o + 1 if (superseded_bits[d >> 3] >> (d & 7)) & 1 else o
                        else:
                            found = map_get(table, h1s[j], h2s[j])
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
        n_read[r] = count
        n_kept[r] = nk
        n_invalid[r] = invalid
        has_tombstone[r] = tombstone
        kept_max_ts[r] = kmax
        first_kept_ts[r] = kfirst
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
def _put_varlong(out, p, v):  # type: ignore[no-untyped-def]
    z = (np.uint64(v) << np.uint64(1)) ^ np.uint64(np.int64(v) >> 63)
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


@kernel("u1[], u1[], b[], u1[], i1[], i8[], i8[], i4[], i8[], i8[], i8[], b[], i8[], b[], i8[], i4[], i8[], "
        "i4[], i8[], i2[], i4[], i8[], i8[], i8[], i8[], i8[], i8[] -> i8")
def assemble_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, in_dbuf, out, action, position, size, record_count, base_offset,
    base_ts, max_ts, log_append_time, keep_base, keep, rec_pos,
    leader_epoch, attributes, last_offset_delta, producer_id, producer_epoch, base_sequence,
    new_attributes, new_base_ts, new_max_ts, n_kept, out_pos, out_size,
):
    """Write every batch's output into ``out``; returns the bytes written."""
    w = np.int64(0)
    for r in range(action.shape[0]):
        a = action[r]
        out_pos[r] = w
        if a == ACTION_DROP:
            out_size[r] = 0
            continue
        if a == ACTION_ORIGINAL:
            s = size[r]
            p0 = position[r]
            out[w:w + s] = buf[p0:p0 + s]
            out_size[r] = s
            w += s
            continue
        if a == ACTION_EMPTY:
            _write_header(out, w, base_offset[r], bf.MIN_BATCH_LENGTH, leader_epoch[r],
                          attributes[r] & _EMPTY_KEEPS, last_offset_delta[r], -1, max_ts[r],
                          producer_id[r], producer_epoch[r], base_sequence[r], 0)
            out_size[r] = bf.HEADER_SIZE
            w += bf.HEADER_SIZE
            continue
        # rebuild from the kept records
        src = dbuf if in_dbuf[r] else buf
        q0 = w + bf.HEADER_SIZE
        o = q0
        lat = log_append_time[r]
        new_base = new_base_ts[r]
        k = keep_base[r]
        for j in range(record_count[r]):
            # only the kept records are read again, from where decide_kernel found them
            if keep[k + j]:
                p = rec_pos[k + j]
                length, q, _err = _varint(src, p, p + 5)
                rec_end = q + length
                ts_delta, q2, _err = _varlong(src, q + 1, rec_end)
                delta, q3, _err = _varint(src, q2, rec_end)
                ts = max_ts[r] if lat else base_ts[r] + ts_delta
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
        _write_header(out, w, base_offset[r], total - bf.LOG_OVERHEAD, leader_epoch[r], new_attributes[r],
                      last_offset_delta[r], new_base, new_max_ts[r], producer_id[r],
                      producer_epoch[r], base_sequence[r], n_kept[r])
        out_size[r] = total
        w = o
    return w


@kernel("u1[], i8[], i8[], i8[] -> none")
def fill_crcs(out, out_pos, out_size, rows):  # type: ignore[no-untyped-def]
    """Write the CRC-32C of each listed batch of ``out`` (needs the CPU's CRC instruction)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        p = out_pos[r]
        _put_be(out, p + bf.CRC_OFFSET, crc32c_range(out, p + bf.ATTRIBUTES_OFFSET, p + out_size[r]), 4)
