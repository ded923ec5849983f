"""Control records: their types, their key, and reading the type of a control batch.

A control record's key is ``version int16 (0), type int16`` (0 ABORT, 1 COMMIT; Kafka's
ControlRecordType), big-endian; a transaction marker's value is ``version int16 (0),
coordinatorEpoch int32``; the record's layout is builder.py's. Kafka reads only the first record
of a control batch. builder.py writes markers with ``control_key``; the cleaner reads their type
with ``control_record_type``, the log's producer state and the Spark plan read the whole marker
with ``end_txn_marker``.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from .batch_format import CODEC_MASK, HEADER_SIZE
from .compression import Codec, decompress
from .varint import MAX_VARLONG_BYTES, decode_varint

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")  # a marker's value: version int16 (0), coordinator epoch int32
UNPARSABLE = -1  # control_record_type of a key too short to hold a type (Kafka never discards it)


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


def control_key(control_type: ControlType) -> bytes:
    """The key of a control record of ``control_type`` (version 0)."""
    return _KEY.pack(0, int(control_type))


class EndTxnMarker(NamedTuple):
    """A COMMIT or ABORT marker as the log's producer state reads it: its type and the epoch of the
    transaction coordinator that wrote it (the value's int32 after its int16 version). Kafka keeps
    the last marker's epoch in the producer's entry, and so in its producer snapshots."""

    control_type: ControlType
    coordinator_epoch: int | None  # None when the value is too short to hold one


def _first_record(batch: bytes | bytearray | memoryview, attributes: int,
                  record_count: int) -> tuple[int, bytes | memoryview, int] | None:
    """The type in the first record's key of the control batch ``batch`` (UNPARSABLE when its key
    is too short to hold one), the record area (decompressed) and the position after that key;
    None when the batch holds no record."""
    if record_count < 1:
        return None
    area: bytes | memoryview = memoryview(batch)[HEADER_SIZE:]
    codec = attributes & CODEC_MASK
    if codec:
        area = decompress(Codec(codec), area)
    pos = 0
    _length, pos = decode_varint(area, pos)
    pos += 1  # attributes
    _ts, pos = decode_varint(area, pos, MAX_VARLONG_BYTES)
    _delta, pos = decode_varint(area, pos)
    key_len, pos = decode_varint(area, pos)
    if key_len < _KEY.size:
        return UNPARSABLE, area, pos
    _version, ctype = _KEY.unpack_from(area, pos)
    return int(ctype), area, pos + key_len


def control_record_type(batch: bytes | bytearray | memoryview, attributes: int, record_count: int) -> int | None:
    """The type in the key of the first record of the control batch ``batch`` (exactly one batch's
    bytes): None when it holds no record, UNPARSABLE when its key is too short to hold one."""
    first = _first_record(batch, attributes, record_count)
    return None if first is None else first[0]


def end_txn_marker(batch: bytes | bytearray | memoryview, attributes: int, record_count: int) -> EndTxnMarker | None:
    """The marker the control batch ``batch`` (exactly one batch's bytes) holds; None for a control
    batch of another type, or of no record."""
    first = _first_record(batch, attributes, record_count)
    if first is None or first[0] not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    ctype, area, pos = first
    value_len, pos = decode_varint(area, pos)
    epoch = _MARKER_VALUE.unpack_from(area, pos)[1] if value_len >= _MARKER_VALUE.size else None
    return EndTxnMarker(ControlType(ctype), epoch)
