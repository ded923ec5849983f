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
partition); each batch is checked by one compiled call, ``append_kernels.check_batch``
(header, CRC and records); a compressed batch's records are decompressed here and walked by
``check_kernel``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import aot
from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from ..records import append_kernels as _ak
from ..records import scan_kernels as _k
from ..records.batch import HEADER, BatchHeader, crc_mismatch
from ..records.batch_format import CONTROL_FLAG, HEADER_SIZE, MIN_RECORD_SIZE, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG
from ..records.compression import codec_from_attributes, decompress
from ..records.scan import walk_error
from .log_config import AppendRules, LogConfig

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# data is bytes (checked first): the guard's check of the kernel's argument, made once there
_check_plain = aot.unchecked(_ak.check_plain)


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
    max_bytes, before_ms, after_ms, create_time, compact = config.append_rules
    check_ts = from_client and create_time
    ts_low = max(_INT64_MIN, now_ms - before_ms)  # clamped: the settings may be Long.MAX
    ts_high = min(_INT64_MAX, now_ms + after_ms)
    batches: list[ValidatedBatch] = []
    num_records = 0
    request_max_ts = -1
    transactional = False
    with_producer = False
    pos = 0
    while pos < total:
        code, err_pos, detail, size, max_ts, _, _, _ = _ak.check_batch(
            buf, pos, max_bytes, from_client, check_ts, ts_low, ts_high, compact)
        if code == _ak.ERR_HEADER:
            raise _header_fault(data, pos)
        header = BatchHeader._make(HEADER.unpack_from(data, pos))
        if code == _ak.COMPRESSED:
            max_ts = _check_compressed(buf, pos, header, from_client, check_ts, ts_low, ts_high, compact, now_ms)
        elif code:
            raise _batch_fault(code, pos, header, err_pos, detail, max_bytes, ts_low, ts_high, now_ms)
        batches.append(ValidatedBatch(pos, header, max_ts))
        if max_ts > request_max_ts:
            request_max_ts = max_ts
        transactional = transactional or bool(header.attributes & TRANSACTIONAL_FLAG)
        with_producer = with_producer or header.producer_id >= 0
        num_records += header.record_count
        pos += size
    return ValidatedRequest(batches, num_records, total, request_max_ts, transactional, with_producer)


def check_plain_batch(data: bytes | bytearray | memoryview, rules: AppendRules,
                      now_ms: int) -> tuple[int, int] | None:
    """(recordCount, max timestamp) of a client's request that is one valid batch, uncompressed,
    CreateTime, not transactional, whose header max timestamp is its records' (the common produce
    request: appending it changes only its base offset, outside the CRC; its lastOffsetDelta is
    recordCount - 1, a client's rule). Its producer, if any, is idempotent: the caller checks its
    sequence (Log._append_plain). None for any other request, valid or not:
    ``validate_request`` checks those and names the fault; and None for data that is not
    ``bytes`` (what the protocol layer hands over), which the compiled check takes without a
    copy or a numpy view. Same compiled checks as ``validate_request``'s, in one call."""
    if type(data) is not bytes or not rules.create_time:
        return None
    plain: tuple[int, int] = _check_plain(data, rules.max_message_bytes, now_ms, rules.timestamp_before_max_ms,
                                          rules.timestamp_after_max_ms, rules.compact)
    return plain if plain[0] else None


def _check_compressed(buf: np.ndarray, pos: int, header: BatchHeader, from_client: bool, check_ts: bool,
                      ts_low: int, ts_high: int, compact: bool, now_ms: int) -> int:
    """The records of a compressed batch (header and CRC already good): decompressed and
    walked; returns the batch's max timestamp as ``check_batch`` does."""
    attributes = header.attributes
    raw = decompress(codec_from_attributes(attributes, pos), buf[pos + HEADER_SIZE:pos + header.size].data, pos)
    count = header.record_count
    if count < 0 or count > len(raw) // MIN_RECORD_SIZE:
        raise InvalidRecordError(pos, f"recordCount {count} does not fit the batch")
    create_time = not attributes & TIMESTAMP_TYPE_MASK
    err, err_pos, detail, records_max_ts = _k.check_kernel(
        np.frombuffer(raw, dtype=np.uint8), 0, len(raw), count, header.base_timestamp, from_client,
        check_ts and create_time, ts_low, ts_high, compact and not attributes & CONTROL_FLAG)
    if err:
        raise _check_error(int(err), pos, int(err_pos), int(detail), ts_low, ts_high, now_ms, compressed=True)
    return int(records_max_ts) if from_client and create_time else header.max_timestamp


def _header_fault(data: bytes | bytearray | memoryview, pos: int) -> CorruptRecordError:
    """The specific fault of a header ``check_batch`` refused, as ``BatchHeader.parse`` names it."""
    try:
        BatchHeader.parse(data, pos)
    except CorruptRecordError as e:
        return e
    raise AssertionError(f"check_batch refused the header at {pos} that BatchHeader.parse accepts")


def _batch_fault(code: int, pos: int, header: BatchHeader, err_pos: int, detail: int, max_bytes: int,
                 ts_low: int, ts_high: int, now_ms: int) -> Exception:
    if code == _ak.ERR_TOO_LARGE:
        return RecordTooLargeError(
            f"batch at position {pos} is {header.size} bytes, above max.message.bytes {max_bytes}")
    if code == _ak.ERR_CRC:
        return crc_mismatch(pos, header.crc, detail)
    if code == _ak.ERR_CONTROL:
        return InvalidRecordError(pos, "clients may not append control batches")
    if code == _ak.ERR_LAST_OFFSET_DELTA:
        return InvalidRecordError(pos, (
            f"lastOffsetDelta {header.last_offset_delta} does not match recordCount {header.record_count}"))
    if code == _ak.ERR_RECORD_COUNT:
        return InvalidRecordError(pos, f"recordCount {header.record_count} does not fit the batch")
    return _check_error(code, pos, err_pos, detail, ts_low, ts_high, now_ms, compressed=False)


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


__all__ = ["CONTROL_FLAG", "ValidatedBatch", "ValidatedRequest", "check_plain_batch", "validate_request"]
