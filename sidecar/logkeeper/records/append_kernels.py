"""The compiled check of one batch of an append request: header, CRC and records in one call.

Why one call: parsing the header in Python, a call of the ``crc32c`` package and the record walk
as three steps cost about as much again as the ``write`` of the batch itself
(bench/results/design_figures.md: append kernels). Here the header is read, the CRC computed
(``crc_kernels.crc32c_any``: three chains of the CRC instruction) and the records walked
(``scan_kernels.check_records``, the loop of ``check_kernel``) in one ``nogil`` call, which
answers with a code and the few numbers the caller needs.

``check_plain`` is the same check of the common produce request (one uncompressed CreateTime
batch of no producer), taken as ``bytes`` and with the few checks of its shape that Python made
before: the whole check before the write is one call. Both kernels inline ``_check_batch`` and
the record walk (``scan_kernels.check_records``) and are compiled without reference counting
(``aot``'s ``nrt=False``).

The checks run in the order ``validator.py`` always had (Kafka's LogValidator's), so the first
fault found is the one reported: the header (as ``BatchHeader.parse`` checks it), max.message.bytes, the CRC; from
clients no control batch and ``lastOffsetDelta + 1 == recordCount > 0``; then, for a batch
without a codec, ``recordCount`` against the bytes and the records. A batch with a codec stops
after the CRC (``COMPRESSED``): the caller decompresses it and walks the records with
``check_kernel``.
"""

from __future__ import annotations

import numpy as np

from ..aot import kernel
from . import batch_format as bf
from . import crc_kernels as _crc
from . import scan_kernels as _k
from .scan_kernels import _be16, _be32, _be64

# Codes beyond check_kernel's (ERR_* of scan_kernels, all below 30).
ERR_HEADER = 30  # short, of a foreign magic, or a length below the header or past the end
ERR_TOO_LARGE = 31  # above max.message.bytes
ERR_CRC = 32  # detail = the CRC computed
ERR_CONTROL = 33  # a control batch from a client
ERR_LAST_OFFSET_DELTA = 34  # from a client: lastOffsetDelta + 1 != recordCount, or no record
ERR_RECORD_COUNT = 35  # recordCount negative or more than the bytes can hold
COMPRESSED = 36  # not a fault: header and CRC are good, the records are for the caller to check


@kernel("u1[], i8, i8, b, b, i8, i8, b -> (i8, i8, i8, i8, i8, i8, i8, i8)", nrt=False)
def check_batch(buf, pos, max_bytes, from_client, check_ts, ts_low, ts_high, compact):  # type: ignore[no-untyped-def]
    """Check the batch at ``pos`` of ``buf`` (the request); returns (code, err_pos, detail,
    size, max_timestamp, last_offset_delta, record_count, header_max_timestamp), all int64.

    ``code`` is 0 or a code above; for a record fault, check_kernel's code with the record's
    position and detail. ``size`` is the batch's (valid from ``ERR_TOO_LARGE`` on), the last
    three are header fields (valid from ``ERR_CRC`` on). ``max_timestamp`` is the records'
    largest for a client's CreateTime batch, the header's otherwise (valid when ``code`` is 0
    or ``COMPRESSED``).
    """
    return _check_batch(buf, pos, max_bytes, from_client, check_ts, ts_low, ts_high, compact)


@kernel(inline=True)
def _check_batch(buf, pos, max_bytes, from_client, check_ts, ts_low, ts_high, compact):  # type: ignore[no-untyped-def]
    """``check_batch``'s body, inlined into both kernels that check a batch; ``buf`` is a uint8
    array or bytes."""
    z = np.int64(0)
    remaining = len(buf) - pos
    if remaining < bf.HEADER_SIZE_UP_TO_MAGIC or buf[pos + bf.MAGIC_OFFSET] != bf.MAGIC or remaining < bf.HEADER_SIZE:
        return ERR_HEADER, pos, z, z, z, z, z, z
    size = bf.LOG_OVERHEAD + np.int64(_be32(buf, pos + bf.LENGTH_OFFSET))
    if size < bf.HEADER_SIZE or size > remaining:
        return ERR_HEADER, pos, z, z, z, z, z, z
    if size > max_bytes:
        return ERR_TOO_LARGE, pos, z, size, z, z, z, z
    computed = np.int64(_crc.crc32c_any(buf, pos + bf.ATTRIBUTES_OFFSET, pos + size))
    last_delta = np.int64(_be32(buf, pos + bf.LAST_OFFSET_DELTA_OFFSET))
    count = np.int64(_be32(buf, pos + bf.RECORDS_COUNT_OFFSET))
    header_max_ts = _be64(buf, pos + bf.MAX_TIMESTAMP_OFFSET)
    if computed != np.int64(np.uint32(_be32(buf, pos + bf.CRC_OFFSET))):
        return ERR_CRC, pos, computed, size, z, last_delta, count, header_max_ts
    attributes = np.int64(_be16(buf, pos + bf.ATTRIBUTES_OFFSET))
    code = 0
    if from_client and attributes & bf.CONTROL_FLAG:
        code = ERR_CONTROL
    elif from_client and (count == 0 or last_delta + 1 != count):
        code = ERR_LAST_OFFSET_DELTA
    elif attributes & bf.CODEC_MASK:
        code = COMPRESSED
    elif count < 0 or count > (size - bf.HEADER_SIZE) // bf.MIN_RECORD_SIZE:
        code = ERR_RECORD_COUNT
    if code:
        return code, pos, z, size, header_max_ts, last_delta, count, header_max_ts
    create_time = not attributes & bf.TIMESTAMP_TYPE_MASK
    err, err_pos, detail, records_max_ts = _k.check_records(
        buf, pos + bf.HEADER_SIZE, pos + size, count, _be64(buf, pos + bf.BASE_TIMESTAMP_OFFSET), from_client,
        check_ts and create_time, ts_low, ts_high, compact and not attributes & bf.CONTROL_FLAG)
    max_ts = records_max_ts if from_client and create_time else header_max_ts
    return np.int64(err), err_pos, detail, size, max_ts, last_delta, count, header_max_ts


_NOT_PLAIN = bf.CODEC_MASK | bf.TIMESTAMP_TYPE_MASK | bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG
_INT64_MIN = np.int64(-(1 << 63))
_INT64_MAX = np.int64((1 << 63) - 1)


@kernel("bytes, i8, i8, i8, i8, b -> (i8, i8)", nrt=False)
def check_plain(data, max_bytes, now_ms, before_max_ms, after_max_ms, compact):  # type: ignore[no-untyped-def]
    """(recordCount, max timestamp) of a client's request ``data`` that is one valid batch,
    uncompressed, CreateTime, not transactional (of no producer, or of an idempotent one: the
    caller checks its sequence), whose header max timestamp is its records'; (0, 0)
    for any other request, valid or not (``validator.validate_request`` checks those and names
    the fault). The checks are ``check_batch``'s, on a client's batch, with the CreateTime
    window [now - before, now + after] clamped to int64 as ``validate_request`` clamps it.

    One call for what the Python around ``check_batch`` did (the header's shape, the window):
    the common produce request is appended with no other Python before the write.
    """
    z = np.int64(0)
    n = len(data)
    if n < bf.HEADER_SIZE or before_max_ms < 0 or after_max_ms < 0:  # negative limits: the general path's arithmetic
        return z, z
    attributes = np.int64(_be16(data, bf.ATTRIBUTES_OFFSET))
    if bf.LOG_OVERHEAD + np.int64(_be32(data, bf.LENGTH_OFFSET)) != n or attributes & _NOT_PLAIN:
        return z, z
    ts_low = _INT64_MIN if now_ms < _INT64_MIN + before_max_ms else now_ms - before_max_ms
    ts_high = _INT64_MAX if now_ms > _INT64_MAX - after_max_ms else now_ms + after_max_ms
    code, _p, _d, _s, max_ts, _ld, count, header_max_ts = _check_batch(
        data, 0, max_bytes, True, True, ts_low, ts_high, compact)
    if code or max_ts != header_max_ts:
        return z, z
    return count, max_ts
