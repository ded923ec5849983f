"""Control records: their types, their key, and reading the type of a control batch.

A control record's key is ``version int16 (0), type int16`` (0 ABORT, 1 COMMIT; Kafka's
ControlRecordType), big-endian; the record's layout is builder.py's. Kafka reads only the first
record of a control batch. builder.py writes markers with ``control_key``; the log (producer
state), the cleaner and the Spark plan read them with ``control_record_type``.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from .batch_format import CODEC_MASK, HEADER_SIZE
from .compression import Codec, decompress
from .varint import MAX_VARLONG_BYTES, decode_varint

_KEY = struct.Struct(">hh")
UNPARSABLE = -1  # control_record_type of a key too short to hold a type (Kafka never discards it)


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


def control_key(control_type: ControlType) -> bytes:
    """The key of a control record of ``control_type`` (version 0)."""
    return _KEY.pack(0, int(control_type))


def control_record_type(batch: bytes | bytearray | memoryview, attributes: int, record_count: int) -> int | None:
    """The type in the key of the first record of the control batch ``batch`` (exactly one batch's
    bytes): None when it holds no record, UNPARSABLE when its key is too short to hold one."""
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
        return UNPARSABLE
    _version, ctype = _KEY.unpack_from(area, pos)
    return int(ctype)
