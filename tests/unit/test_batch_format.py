"""records/batch_format.py is the one definition of the v2 batch layout (issue 22)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from logkeeper.records import batch_format as bf
from logkeeper.records.batch import HEADER, BatchHeader

PACKAGE = Path(bf.__file__).resolve().parent.parent


def test_the_field_positions_are_the_struct_layout() -> None:
    fields = [
        "BASE_OFFSET", "LENGTH", "PARTITION_LEADER_EPOCH", "MAGIC", "CRC", "ATTRIBUTES", "LAST_OFFSET_DELTA",
        "BASE_TIMESTAMP", "MAX_TIMESTAMP", "PRODUCER_ID", "PRODUCER_EPOCH", "BASE_SEQUENCE", "RECORDS_COUNT",
    ]
    assert len(fields) == len(BatchHeader._fields)
    position = 0
    for name, code in zip(fields, bf.HEADER_FORMAT[1:], strict=True):
        assert getattr(bf, name + "_OFFSET") == position, name
        position += struct.calcsize(">" + code)
    assert position == bf.RECORDS_OFFSET == bf.HEADER_SIZE == HEADER.size == 61
    assert bf.MIN_BATCH_LENGTH == bf.HEADER_SIZE - bf.LOG_OVERHEAD


def test_the_attribute_bits_are_distinct() -> None:
    bits = [bf.CODEC_MASK, bf.TIMESTAMP_TYPE_MASK, bf.TRANSACTIONAL_FLAG, bf.CONTROL_FLAG, bf.DELETE_HORIZON_FLAG]
    combined = 0
    for b in bits:
        assert combined & b == 0
        combined |= b
    assert combined == 0x7F


def test_no_other_module_defines_the_layout_again() -> None:
    """A constant named like a header size or an attribute bit, assigned a literal, outside
    batch_format.py (spark/extract.py's CONTROL is issue 21's, listed until it imports ours)."""
    pattern = re.compile(
        r"^_?(HEADER_SIZE|[A-Z_]*CODEC_MASK|[A-Z_]*TIMESTAMP_TYPE[A-Z_]*|TRANSACTIONAL[A-Z_]*|CONTROL(_FLAG)?|"
        r"DELETE_HORIZON[A-Z_]*|LOG_APPEND_TIME|HEADER_UP_TO_MAGIC|MIN_RECORD_SIZE) *= *(0x[0-9a-fA-F]+|\d+)\b",
        re.M)
    allowed = {"records/batch_format.py", "spark/extract.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in allowed:
            found += [f"{rel}: {m.group(0)}" for m in pattern.finditer(path.read_text())]
    assert found == []
