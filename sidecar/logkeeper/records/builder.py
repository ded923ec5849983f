"""Building v2 record batches: records, control records and header-only batches.

Record layout (inside a batch, after the 61-byte header, compressed as one block when a codec
is set):

| field          | type    | notes                                       |
|----------------|---------|---------------------------------------------|
| length         | varint  | bytes of the fields below                   |
| attributes     | int8    | unused, 0                                   |
| timestampDelta | varlong | timestamp - batch baseTimestamp             |
| offsetDelta    | varint  | offset - batch baseOffset                   |
| keyLength      | varint  | -1 = null key                               |
| key            | bytes   |                                             |
| valueLength    | varint  | -1 = null value (a tombstone)               |
| value          | bytes   |                                             |
| headerCount    | varint  |                                             |
| headers        |         | keyLength varint, UTF-8 key, valueLength varint (-1 = null), value |

Control records (in batches with the control flag): key = version int16 (0) + type int16
(0 ABORT, 1 COMMIT; control.py); a transaction marker's value = version int16 (0) + coordinatorEpoch int32.

This builder loops over records in Python: it serves producers of test data, the HTTP JSON
produce path and tools. Paths that rewrite many records (the cleaner) copy or re-encode record
bytes with the compiled helpers instead.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from . import batch_format as bf
from .batch import HEADER, TimestampType, crc32c
from .compression import Codec, compress
from .control import ControlType, control_key
from .varint import encode_varint

Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One record as a reader sees it: absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, record: Record) -> None:
    body = bytearray(b"\x00")  # attributes
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _encode_bytes(record.key, body)
    _encode_bytes(record.value, body)
    encode_varint(len(record.headers), body)
    for hkey, hvalue in record.headers:
        _encode_bytes(hkey.encode("utf-8"), body)
        _encode_bytes(hvalue, body)
    encode_varint(len(body), out)
    out += body


def _encode_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: Codec = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int = bf.NO_TIMESTAMP,
    producer_id: int = bf.NO_PRODUCER_ID,
    producer_epoch: int = bf.NO_PRODUCER_EPOCH,
    base_sequence: int = bf.NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = bf.NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode ``records`` (non-empty, increasing offsets) as one batch.

    As Kafka's builder does: baseTimestamp is the first record's timestamp, or the delete
    horizon when one is given (then deltas are relative to it and may be negative);
    maxTimestamp is the largest record timestamp, or the append time under LogAppendTime.
    """
    if not records:
        raise ValueError("a batch needs at least one record; use build_empty_batch for none")
    if base_offset is None:
        base_offset = records[0].offset
    base_timestamp = delete_horizon_ms if delete_horizon_ms is not None else records[0].timestamp
    body = bytearray()
    for record in records:
        encode_record(body, record.offset - base_offset, record.timestamp - base_timestamp, record)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = log_append_time_ms
    else:
        max_timestamp = max(r.timestamp for r in records)
    payload = bytes(body) if codec == Codec.NONE else compress(codec, body)
    return _assemble(
        payload, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        attributes=_attributes(codec, timestamp_type, is_transactional, is_control, delete_horizon_ms is not None),
        last_offset_delta=records[-1].offset - base_offset,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, record_count=len(records),
    )


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    max_timestamp: int = bf.NO_TIMESTAMP,
    producer_id: int = bf.NO_PRODUCER_ID,
    producer_epoch: int = bf.NO_PRODUCER_EPOCH,
    base_sequence: int = bf.NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = bf.NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A header-only batch (recordCount 0, baseTimestamp -1) that keeps an offset range and a
    producer's sequence after compaction removed all of its records."""
    return _assemble(
        b"", base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        attributes=_attributes(Codec.NONE, timestamp_type, is_transactional, is_control, False),
        last_offset_delta=last_offset - base_offset,
        base_timestamp=bf.NO_TIMESTAMP, max_timestamp=max_timestamp, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, record_count=0,
    )


def _attributes(codec: Codec, timestamp_type: TimestampType, is_transactional: bool, is_control: bool,
                delete_horizon: bool) -> int:
    """A batch's attributes field (batch_format.py's bits)."""
    return (int(codec) | (bf.TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
            | (bf.TRANSACTIONAL_FLAG if is_transactional else 0) | (bf.CONTROL_FLAG if is_control else 0)
            | (bf.DELETE_HORIZON_FLAG if delete_horizon else 0))


def _assemble(
    payload: bytes, *, base_offset: int, partition_leader_epoch: int, attributes: int,
    last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int,
    producer_epoch: int, base_sequence: int, record_count: int,
) -> bytes:
    size = bf.HEADER_SIZE + len(payload)
    out = bytearray(size)
    HEADER.pack_into(
        out, 0, base_offset, size - bf.LOG_OVERHEAD, partition_leader_epoch, bf.MAGIC, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, record_count,
    )
    out[bf.HEADER_SIZE:] = payload
    struct.pack_into(">I", out, bf.CRC_OFFSET, crc32c(memoryview(out)[bf.ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_marker_batch(
    control_type: ControlType,
    *,
    offset: int,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = bf.NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a control batch of one record, transactional, sequence -1."""
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [Record(offset, timestamp, control_key(control_type), value)],
        producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True,
        is_control=True, partition_leader_epoch=partition_leader_epoch,
    )
