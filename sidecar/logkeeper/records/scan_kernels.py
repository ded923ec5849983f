"""Kernels behind :mod:`logkeeper.records.scan` (untyped; call them through scan.py).

Compiled loops (:func:`logkeeper.aot.kernel`: ahead of time, or numba's JIT), all ``nogil`` so that
cleaner threads can run them in parallel on different buffers:

- :func:`scan_kernel` hops over v2 batch headers (a counting pass, then a filling pass into
  exactly sized columns), reading every big-endian field by hand.
- :func:`walk_kernel` walks the records of many record areas (one per batch) into preallocated
  columns. It never raises: on bad bytes it stops and returns an error code (``ERR_*``), the
  absolute position, the area row and one detail number, and the typed wrapper raises.

Varints follow Kafka's ``ByteUtils.readVarint``/``readVarlong``: zigzag + LEB128, at most 5 bytes
for a varint and 10 for a varlong (a continuation bit on the last allowed byte is an error); the
high bits of the last byte overflow silently into the 32/64-bit value, as in Java.
"""

from __future__ import annotations

import numpy as np

from ..aot import kernel
from . import batch_format as bf

# Stop reasons (mirrored by scan.ScanStop).
STOP_END = 0
STOP_SHORT_TAIL = 1
STOP_BAD_MAGIC = 2
STOP_BAD_SIZE = 3
STOP_LIMIT = 4

# Record walk error codes.
ERR_NONE = 0
ERR_VARINT_PAST_END = 1  # a varint running past the end of the area
ERR_VARINT_TOO_LONG = 2  # more than 5 (varint) / 10 (varlong) bytes
ERR_LENGTH_PAST_END = 3  # a record / key / value / header length past the record or area end
ERR_NEGATIVE_LENGTH = 4  # a length < -1 (or < 0 where null is not allowed); detail = the length
ERR_SIZE_MISMATCH = 5  # fields use more or fewer bytes than the record's length; detail = length
ERR_TOO_FEW_RECORDS = 6  # the area ends before record_count records; detail = records read
ERR_EXTRA_BYTES = 7  # bytes left in the area after record_count records; detail = bytes left


@kernel()
def _be16(buf, p):  # type: ignore[no-untyped-def]
    return np.int16((np.int32(buf[p]) << 8) | np.int32(buf[p + 1]))


@kernel()
def _be32(buf, p):  # type: ignore[no-untyped-def]
    v = (
        (np.uint32(buf[p]) << np.uint32(24))
        | (np.uint32(buf[p + 1]) << np.uint32(16))
        | (np.uint32(buf[p + 2]) << np.uint32(8))
        | np.uint32(buf[p + 3])
    )
    return np.int32(v)


@kernel()
def _be64(buf, p):  # type: ignore[no-untyped-def]
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[p + k])
    return np.int64(v)


@kernel()
def _varint(buf, p, limit):  # type: ignore[no-untyped-def]
    """(value, next position, error code) of the zigzag varint at ``p``; bytes must stay < limit."""
    if p < limit:  # fast path: most lengths, deltas and counts fit one byte
        b0 = np.int64(buf[p])
        if b0 < 0x80:
            return (b0 >> 1) ^ -(b0 & 1), p + 1, ERR_NONE
    raw = np.int64(0)
    shift = 0
    while True:
        if p >= limit:
            return np.int64(0), p, ERR_VARINT_PAST_END
        b = np.int64(buf[p])
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return np.int64(0), p, ERR_VARINT_TOO_LONG
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), p, ERR_NONE


@kernel()
def _varlong(buf, p, limit):  # type: ignore[no-untyped-def]
    """(value, next position, error code) of the zigzag varlong at ``p``."""
    if p < limit:
        b0 = np.int64(buf[p])
        if b0 < 0x80:
            return (b0 >> 1) ^ -(b0 & 1), p + 1, ERR_NONE
    raw = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if p >= limit:
            return np.int64(0), p, ERR_VARINT_PAST_END
        b = np.uint64(buf[p])
        p += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            break
        shift += np.uint64(7)
        if shift > np.uint64(63):
            return np.int64(0), p, ERR_VARINT_TOO_LONG
    z = (raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))
    return np.int64(z), p, ERR_NONE


@kernel("u1[], i8, i8, i8 -> (i8[], i4[], i8[], i4[], i1[], u4[], i2[], i4[], i8[], i8[], i8[], i2[], i4[], "
        "i4[], i8, i8)")
def scan_kernel(buf, start, end, max_batches):  # type: ignore[no-untyped-def]
    """Batch header columns for the complete v2 batches in buf[start:end] + (stop, reason)."""
    # Pass 1: hop over the batches, counting them and finding where and why the scan stops.
    n = 0
    p = start
    reason = STOP_END
    while True:
        remaining = end - p
        if max_batches >= 0 and n >= max_batches:
            reason = STOP_END if remaining == 0 else STOP_LIMIT
            break
        if remaining == 0:
            reason = STOP_END
            break
        if remaining < bf.HEADER_SIZE_UP_TO_MAGIC:
            reason = STOP_SHORT_TAIL
            break
        batch_length = np.int64(_be32(buf, p + bf.LENGTH_OFFSET))
        if batch_length < bf.MIN_BATCH_LENGTH:
            reason = STOP_BAD_SIZE
            break
        if bf.LOG_OVERHEAD + batch_length > remaining:
            reason = STOP_SHORT_TAIL
            break
        if buf[p + bf.MAGIC_OFFSET] != bf.MAGIC:
            reason = STOP_BAD_MAGIC
            break
        n += 1
        p += bf.LOG_OVERHEAD + batch_length
    stop = p

    position = np.empty(n, np.int64)
    size = np.empty(n, np.int32)
    base_offset = np.empty(n, np.int64)
    leader_epoch = np.empty(n, np.int32)
    magic = np.empty(n, np.int8)
    crc = np.empty(n, np.uint32)
    attributes = np.empty(n, np.int16)
    last_offset_delta = np.empty(n, np.int32)
    base_timestamp = np.empty(n, np.int64)
    max_timestamp = np.empty(n, np.int64)
    producer_id = np.empty(n, np.int64)
    producer_epoch = np.empty(n, np.int16)
    base_sequence = np.empty(n, np.int32)
    record_count = np.empty(n, np.int32)

    # Pass 2: fill the columns.
    p = start
    for i in range(n):
        s = bf.LOG_OVERHEAD + np.int64(_be32(buf, p + bf.LENGTH_OFFSET))
        position[i] = p
        size[i] = s
        base_offset[i] = _be64(buf, p)
        leader_epoch[i] = _be32(buf, p + bf.PARTITION_LEADER_EPOCH_OFFSET)
        magic[i] = np.int8(buf[p + bf.MAGIC_OFFSET])
        crc[i] = np.uint32(_be32(buf, p + bf.CRC_OFFSET))
        attributes[i] = _be16(buf, p + bf.ATTRIBUTES_OFFSET)
        last_offset_delta[i] = _be32(buf, p + bf.LAST_OFFSET_DELTA_OFFSET)
        base_timestamp[i] = _be64(buf, p + bf.BASE_TIMESTAMP_OFFSET)
        max_timestamp[i] = _be64(buf, p + bf.MAX_TIMESTAMP_OFFSET)
        producer_id[i] = _be64(buf, p + bf.PRODUCER_ID_OFFSET)
        producer_epoch[i] = _be16(buf, p + bf.PRODUCER_EPOCH_OFFSET)
        base_sequence[i] = _be32(buf, p + bf.BASE_SEQUENCE_OFFSET)
        record_count[i] = _be32(buf, p + bf.RECORDS_COUNT_OFFSET)
        p += s
    return (
        position, size, base_offset, leader_epoch, magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count,
        stop, reason,
    )


@kernel(inline=True)
def record_key(buf, p, e):  # type: ignore[no-untyped-def]
    """The head of the record at ``p`` (area end ``e``) as the walks that only want keys read it:
    its length, attributes, timestampDelta, offsetDelta and key; the rest is skipped by the length.
    Returns (err, detail, rec_end, off_delta, key_pos, key_len); an error is at ``p``. Shared by
    the cleaner's map walk and the Spark job's key extraction, so both read keys the same way."""
    z = np.int64(0)
    length, q, err = _varint(buf, p, e)
    if err != ERR_NONE:
        return err, z, z, z, z, z
    rec_end = q + length
    if length < 0 or rec_end > e:
        return ERR_LENGTH_PAST_END, length, z, z, z, z
    _ts, q, err = _varlong(buf, q + 1, rec_end)
    if err != ERR_NONE:
        return err, z, z, z, z, z
    delta, q, err = _varint(buf, q, rec_end)
    if err != ERR_NONE:
        return err, z, z, z, z, z
    key_len, q, err = _varint(buf, q, rec_end)
    if err != ERR_NONE:
        return err, z, z, z, z, z
    if key_len < -1:
        return ERR_NEGATIVE_LENGTH, key_len, z, z, z, z
    if q + key_len > rec_end:
        return ERR_SIZE_MISMATCH, length, z, z, z, z
    return ERR_NONE, z, rec_end, delta, q, key_len


@kernel(inline=True)
def _bytes_field(buf, q, e, rec_end, min_length):  # type: ignore[no-untyped-def]
    """The length-prefixed bytes at ``q`` of a record ending at ``rec_end`` (its key, its value, a
    header's key or value): a zigzag varint length, -1 for null, then that many bytes, all inside
    the record. ``min_length`` is -1, or 0 where null is not allowed (a header key).

    Returns (err, detail, position, length, next position); position -1 for null; an error is at
    ``q`` (detail: the length, for a bad one).
    """
    z = np.int64(0)
    length, r, err = _varint(buf, q, e)
    if err != ERR_NONE:
        return err, z, z, z, z
    if length < min_length:
        return ERR_NEGATIVE_LENGTH, length, z, z, z
    if length < 0:
        return ERR_NONE, z, np.int64(-1), length, r
    if r + length > rec_end:
        return ERR_LENGTH_PAST_END, length, z, z, z
    return ERR_NONE, z, r, length, r + length


@kernel()
def parse_record(buf, p, e):  # type: ignore[no-untyped-def]
    """Parse the record at ``p`` inside the area ending at ``e``.

    Returns (err, err_pos, detail, rec_end, ts_delta, off_delta, key_pos, key_len, value_pos,
    value_len, headers_pos, header_count); on error only the first three are meaningful.
    Shared by the walk (columns) and the append check (no columns), so both read records the
    same way.
    """
    z = np.int64(0)
    rec = p
    length, q, err = _varint(buf, p, e)
    if err != ERR_NONE:
        return err, p, z, z, z, z, z, z, z, z, z, z
    if length < 0:
        return ERR_NEGATIVE_LENGTH, rec, length, z, z, z, z, z, z, z, z, z
    rec_end = q + length
    if rec_end > e:
        return ERR_LENGTH_PAST_END, rec, length, z, z, z, z, z, z, z, z, z
    # attributes (int8, unused in v2) then the deltas.
    q += 1
    ts_delta, q2, err = _varlong(buf, q, e)
    if err != ERR_NONE:
        return err, q, z, z, z, z, z, z, z, z, z, z
    off_delta, q, err = _varint(buf, q2, e)
    if err != ERR_NONE:
        return err, q2, z, z, z, z, z, z, z, z, z, z
    if q > rec_end:
        return ERR_SIZE_MISMATCH, rec, length, z, z, z, z, z, z, z, z, z
    # key and value
    err, detail, kp, kl, q2 = _bytes_field(buf, q, e, rec_end, -1)
    if err != ERR_NONE:
        return err, q, detail, z, z, z, z, z, z, z, z, z
    err, detail, vp, vl, q = _bytes_field(buf, q2, e, rec_end, -1)
    if err != ERR_NONE:
        return err, q2, detail, z, z, z, z, z, z, z, z, z
    # headers
    hc, q2, err = _varint(buf, q, e)
    if err != ERR_NONE:
        return err, q, z, z, z, z, z, z, z, z, z, z
    if hc < 0:
        return ERR_NEGATIVE_LENGTH, q, hc, z, z, z, z, z, z, z, z, z
    hp = q2
    for _h in range(hc):
        err, detail, _hkp, _hkl, q = _bytes_field(buf, q2, e, rec_end, 0)  # a header key is a non-null string
        if err != ERR_NONE:
            return err, q2, detail, z, z, z, z, z, z, z, z, z
        err, detail, _hvp, _hvl, q2 = _bytes_field(buf, q, e, rec_end, -1)
        if err != ERR_NONE:
            return err, q, detail, z, z, z, z, z, z, z, z, z
    if q2 != rec_end:
        return ERR_SIZE_MISMATCH, rec, length, z, z, z, z, z, z, z, z, z
    return ERR_NONE, z, z, rec_end, ts_delta, off_delta, kp, kl, vp, vl, hp, hc


@kernel(inline=True)
def _uvarint_fast(buf, p, max_bytes):  # type: ignore[no-untyped-def]
    """Zigzag varint at ``p`` with no bounds check (the caller keeps ``p + max_bytes`` inside
    ``buf``); returns (value, next position), next position -1 when longer than ``max_bytes``."""
    b = np.int64(buf[p])
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    raw = np.uint64(b & 0x7F)
    shift = np.uint64(7)
    for k in range(1, max_bytes):
        b = np.int64(buf[p + k])
        raw |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:
                raw &= np.uint64(0xFFFFFFFF)
            z = (raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))
            if max_bytes == 10:
                return np.int64(z), p + k + 1
            return np.int64(np.int32(np.uint32(z & np.uint64(0xFFFFFFFF)))), p + k + 1
        shift += np.uint64(7)
    return np.int64(0), np.int64(-1)


@kernel(inline=True)
def _nullable_bytes_fast(buf, q, rec_end):  # type: ignore[no-untyped-def]
    """A key or value as ``parse_record_fast`` reads it (``_bytes_field`` of a nullable field,
    ``q`` at most ``rec_end``, ``rec_end + 10`` inside ``buf``): (ok, position, length, next
    position), position -1 for null; not ok for anything ``parse_record`` has to look at."""
    length, r = _uvarint_fast(buf, q, 5)
    if r < 0 or length < -1 or r > rec_end:
        return False, r, length, r
    if length < 0:
        return True, np.int64(-1), length, r
    if r + length > rec_end:
        return False, r, length, r
    return True, r, length, r + length


@kernel(inline=True)
def parse_record_fast(buf, p, e):  # type: ignore[no-untyped-def]
    """``parse_record`` for a well-formed record well inside ``buf``: fewer branches, no bounds
    check per byte. Any anomaly defers to the checked ``parse_record`` (same results, same
    errors), so this is only a faster road to the same answer."""
    n = len(buf)  # not buf.shape: buf may be bytes (append_kernels.check_plain)
    length, q = _uvarint_fast(buf, p, 5)
    rec_end = q + length
    if q < 0 or length < 0 or rec_end > e or rec_end + 10 > n:
        return parse_record(buf, p, e)
    q += 1
    ts_delta, q = _uvarint_fast(buf, q, 10)
    if q < 0 or q > rec_end:
        return parse_record(buf, p, e)
    off_delta, q = _uvarint_fast(buf, q, 5)
    if q < 0 or q > rec_end:
        return parse_record(buf, p, e)
    ok, kp, kl, q = _nullable_bytes_fast(buf, q, rec_end)
    if not ok:
        return parse_record(buf, p, e)
    ok, vp, vl, q = _nullable_bytes_fast(buf, q, rec_end)
    if not ok:
        return parse_record(buf, p, e)
    hc, q = _uvarint_fast(buf, q, 5)
    if q < 0 or hc < 0 or q > rec_end:
        return parse_record(buf, p, e)
    hp = q
    # The headers' fields are read here, not by _nullable_bytes_fast: with it in this loop too,
    # numba's code for the whole walk ran slower, for records with and without headers alike.
    for _h in range(hc):
        hkl, q = _uvarint_fast(buf, q, 5)
        if q < 0 or hkl < 0 or q + hkl > rec_end:
            return parse_record(buf, p, e)
        q += hkl
        hvl, q = _uvarint_fast(buf, q, 5)
        if q < 0 or hvl < -1 or q > rec_end:
            return parse_record(buf, p, e)
        if hvl > 0:
            q += hvl
            if q > rec_end:
                return parse_record(buf, p, e)
    if q != rec_end:
        return parse_record(buf, p, e)
    z = np.int64(0)
    return ERR_NONE, z, z, rec_end, ts_delta, off_delta, kp, kl, vp, vl, hp, hc


@kernel("u1[], i8[], i8[], i4[], i8[], i8[], i4[], i8[], i8[], i8[], i4[], i8[], i4[], i8[], i4[], i8[], "
        "i4[] -> (i8, i8, i8, i8, i8)")
def walk_kernel(  # type: ignore[no-untyped-def]
    buf, area_start, area_end, record_count, base_offset, base_timestamp,
    batch, offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos, header_count,
    record_pos, record_size,
):
    """Fill the record columns (preallocated by the caller, sum(record_count) rows) for every
    record of every area; returns (error code, position, area row, detail, rows written).

    The columns are allocated by numpy in the wrapper rather than here: numpy's allocator asks
    for transparent huge pages on large arrays, which saves page faults
    (bench/results/design_figures.md: scan kernels).
    """
    err = ERR_NONE
    err_pos = np.int64(0)
    err_area = np.int64(-1)
    detail = np.int64(0)
    k = 0
    for i in range(area_start.shape[0]):
        p = area_start[i]
        e = area_end[i]
        n = record_count[i]
        for j in range(n):
            if p >= e:
                err, err_pos, detail = ERR_TOO_FEW_RECORDS, p, np.int64(j)
                break
            (err, err_pos, detail, rec_end, ts_delta, off_delta, kp, kl, vp, vl, hp,
             hc) = parse_record_fast(buf, p, e)
            if err != ERR_NONE:
                break
            batch[k] = i
            offset[k] = base_offset[i] + off_delta
            timestamp[k] = base_timestamp[i] + ts_delta
            key_pos[k] = kp
            key_len[k] = kl
            value_pos[k] = vp
            value_len[k] = vl
            headers_pos[k] = hp
            header_count[k] = hc
            record_pos[k] = p
            record_size[k] = rec_end - p
            k += 1
            p = rec_end
        if err == ERR_NONE and p != e:
            err, err_pos, detail = ERR_EXTRA_BYTES, p, e - p
        if err != ERR_NONE:
            err_area = np.int64(i)
            break
    return err, err_pos, err_area, detail, k


# Append check errors beyond the walk's (ERR_*): rule violations of a client's records.
ERR_OFFSET_DELTA = 20  # offset deltas must run 0, 1, 2, ...; detail = the delta found
ERR_TIMESTAMP = 21  # a CreateTime timestamp outside [ts_low, ts_high]; detail = the timestamp
ERR_NULL_KEY = 22  # a record without a key in a compacted topic


@kernel("u1[], i8, i8, i8, i8, b, b, i8, i8, b -> (i8, i8, i8, i8)", nrt=False)
def check_kernel(buf, p, e, n, base_timestamp, check_offsets, check_ts, ts_low, ts_high,  # type: ignore[no-untyped-def]
                 need_keys):
    """Walk one record area without writing columns, checking an append's rules.

    Returns (err, err_pos, detail, max_timestamp).
    """
    return check_records(buf, p, e, n, base_timestamp, check_offsets, check_ts, ts_low, ts_high, need_keys)


@kernel(inline=True)
def check_records(buf, p, e, n, base_timestamp, check_offsets, check_ts, ts_low, ts_high,  # type: ignore[no-untyped-def]
                  need_keys):
    """``check_kernel``'s loop, inlined into the kernels that call it (append_kernels), so that
    it is compiled with their flags (no reference counting: ``aot``'s ``nrt=False``)."""
    max_ts = np.int64(-1)
    for j in range(n):
        if p >= e:
            return ERR_TOO_FEW_RECORDS, p, np.int64(j), max_ts
        (err, err_pos, detail, rec_end, ts_delta, off_delta, _kp, kl, _vp, _vl, _hp,
         _hc) = parse_record_fast(buf, p, e)
        if err != ERR_NONE:
            return err, err_pos, detail, max_ts
        if check_offsets and off_delta != j:
            return ERR_OFFSET_DELTA, p, off_delta, max_ts
        ts = base_timestamp + ts_delta
        if check_ts and (ts < ts_low or ts > ts_high):
            return ERR_TIMESTAMP, p, ts, max_ts
        if need_keys and kl < 0:
            return ERR_NULL_KEY, p, np.int64(0), max_ts
        if ts > max_ts:
            max_ts = ts
        p = rec_end
    if p != e:
        return ERR_EXTRA_BYTES, p, e - p, max_ts
    return ERR_NONE, np.int64(0), np.int64(0), max_ts
