"""Validating batches before they are appended (Kafka's LogValidator, for magic 2, in place).

A request's bytes are checked as a whole before anything is written, so a bad request leaves
the log untouched:

- every batch complete, of magic 2, within max.message.bytes, with a valid CRC;
- records walked (decompressed first when a codec is set): their count equals recordCount;
  from clients also lastOffsetDelta + 1 == recordCount and offset deltas running 0, 1, 2, ...
  (so offsets can be assigned in place by patching baseOffset);
- from clients, CreateTime timestamps within [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms], and no control batches (markers come from the
  transaction coordinator);
- for compacted topics every data record has a key.

Kafka rebuilds a batch whose offset deltas are not consecutive; logkeeper rejects it (no
producer writes one). The per-batch loop is Python (a produce request holds one batch per
partition); the per-record loop is the compiled ``check_kernel``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from ..records import scan_kernels as _k
from ..records.batch import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    crc32c,
    ensure_crc,
)
from ..records.compression import codec_from_attributes, decompress
from ..records.scan import walk_error
from .log_config import LogConfig

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MIN_RECORD_SIZE = _k.MIN_RECORD_SIZE


class ValidatedBatch(NamedTuple):
    position: int
    header: BatchHeader
    max_timestamp: int  # from the records (CreateTime, clients); the header's otherwise


class ValidatedRequest(NamedTuple):
    batches: list[ValidatedBatch]
    num_records: int
    size: int
    max_timestamp: int
    has_transactional: bool
    has_producer_id: bool = False  # a batch of an idempotent or transactional producer


def validate_request(data: bytes | bytearray | memoryview, config: LogConfig, *, now_ms: int,
                     from_client: bool) -> ValidatedRequest:
    """Check every batch of ``data``; raise the specific error naming its position.

    For a client's CreateTime batch the max timestamp is taken from its records; Kafka then
    rewrites a header that disagrees (``ValidatedBatch.max_timestamp`` carries the value).
    """
    total = len(data)
    if total == 0:
        raise InvalidRecordError(0, "no record batch in the request")
    buf = np.frombuffer(data, dtype=np.uint8)
    check_ts = from_client and config.message_timestamp_type == "CreateTime"
    ts_low = max(_INT64_MIN, now_ms - config.message_timestamp_before_max_ms)
    ts_high = min(_INT64_MAX, now_ms + config.message_timestamp_after_max_ms)
    compact = "compact" in config.cleanup_policy
    max_bytes = config.max_message_bytes
    batches: list[ValidatedBatch] = []
    num_records = 0
    request_max_ts = -1
    transactional = False
    with_producer = False
    pos = 0
    while pos < total:
        header = BatchHeader.parse(data, pos)
        size = header.batch_length + LOG_OVERHEAD
        attributes = header.attributes
        count = header.record_count
        if size > max_bytes:
            raise RecordTooLargeError(
                f"batch at position {pos} is {size} bytes, above max.message.bytes {max_bytes}")
        if crc32c(memoryview(data)[pos + ATTRIBUTES_OFFSET:pos + size]) != header.crc:
            ensure_crc(data, header, pos)  # raises with both CRCs in the message
        if from_client:
            if attributes & CONTROL_FLAG:
                raise InvalidRecordError(pos, "clients may not append control batches")
            if count == 0 or header.last_offset_delta + 1 != count:
                raise InvalidRecordError(pos, (
                    f"lastOffsetDelta {header.last_offset_delta} does not match recordCount {count}"))
        codec = attributes & CODEC_MASK
        area_buf, area_start, area_end = buf, pos + HEADER_SIZE, pos + size
        if codec:
            raw = decompress(codec_from_attributes(attributes, pos), buf[area_start:area_end].data, pos)
            area_buf, area_start, area_end = np.frombuffer(raw, dtype=np.uint8), 0, len(raw)
        if count < 0 or count > (area_end - area_start) // _MIN_RECORD_SIZE:
            raise InvalidRecordError(pos, f"recordCount {count} does not fit the batch")
        create_time = not attributes & TIMESTAMP_TYPE_MASK
        err, err_pos, detail, records_max_ts = _k.check_kernel(
            area_buf, area_start, area_end, count, header.base_timestamp, from_client,
            check_ts and create_time, ts_low, ts_high, compact and not attributes & CONTROL_FLAG)
        if err:
            raise _check_error(int(err), pos, int(err_pos), int(detail), ts_low, ts_high, now_ms,
                               compressed=bool(codec))
        max_ts = int(records_max_ts) if from_client and create_time else header.max_timestamp
        batches.append(ValidatedBatch(pos, header, max_ts))
        if max_ts > request_max_ts:
            request_max_ts = max_ts
        transactional = transactional or bool(attributes & TRANSACTIONAL_FLAG)
        with_producer = with_producer or header.producer_id >= 0
        num_records += count
        pos += size
    return ValidatedRequest(batches, num_records, total, request_max_ts, transactional, with_producer)


def _check_error(code: int, batch_pos: int, err_pos: int, detail: int, ts_low: int, ts_high: int,
                 now_ms: int, *, compressed: bool) -> Exception:
    where = batch_pos if compressed else err_pos
    suffix = " (inside the compressed records of this batch)" if compressed else ""
    if code == _k.ERR_OFFSET_DELTA:
        return InvalidRecordError(where, f"offset delta {detail} out of sequence: deltas must run 0, 1, 2, ...{suffix}")
    if code == _k.ERR_TIMESTAMP:
        return InvalidTimestampError(
            f"record at position {where} has timestamp {detail}, outside [{ts_low}, {ts_high}] allowed "
            f"around append time {now_ms}{suffix}")
    if code == _k.ERR_NULL_KEY:
        return InvalidRecordError(where, f"compacted topic cannot accept a record without a key{suffix}")
    err: CorruptRecordError = walk_error(code, where, 0, detail)
    return err


def patch_base_offset(header_bytes: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """The 61 header bytes with a new base offset (outside the CRC'd range)."""
    fields = HEADER.unpack_from(header_bytes, 0)
    return HEADER.pack(base_offset, *fields[1:])


__all__ = ["CONTROL_FLAG", "ValidatedBatch", "ValidatedRequest", "patch_base_offset", "validate_request"]
