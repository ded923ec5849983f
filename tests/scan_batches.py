"""Record batches for the scan and walk tests (tests/unit/test_scan.py, test_walk_records.py):
built by kafka-python's own builder, and kafka-python's parser as the reference of a walk."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import numpy as np
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logkeeper.records.scan import BatchTable, headers_of, walk_batches, walk_records

Rec = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def build_batch(
    records: list[Rec],
    base_offset: int = 0,
    leader_epoch: int = 0,
    codec: int = 0,
    transactional: bool = False,
    control: bool = False,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """A v2 batch from kafka-python's builder; base offset/epoch patched (not CRC-covered)."""
    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(2, codec, int(transactional), pid, epoch, seq, 1 << 30)
    for offset_delta, ts, key, value, headers in records:
        assert builder.append(offset_delta, ts, key, value, headers) is not None
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    if control:
        (attrs,) = struct.unpack_from(">h", buf, 21)
        struct.pack_into(">h", buf, 21, attrs | 0x20)
        reseal(buf)
    return bytes(buf)


def reseal(buf: bytearray, position: int = 0) -> None:
    """Recompute the CRC of the batch at ``position``."""
    (length,) = struct.unpack_from(">i", buf, position + 8)
    crc = crc32c.crc32c(bytes(buf[position + 21 : position + 12 + length]))
    struct.pack_into(">I", buf, position + 17, crc)


def as_array(data: bytes | bytearray) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(bytes(data), dtype=np.uint8)


def zz(value: int) -> bytes:
    """Zigzag + LEB128 encoding (64-bit zigzag, same bytes as 32-bit for int32 values)."""
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def raw_record(body: bytes) -> bytes:
    return zz(len(body)) + body


def body(ts: int = 0, off: int = 0, key: bytes | None = b"k", value: bytes | None = b"v") -> bytes:
    out = b"\x00" + zz(ts) + zz(off)
    out += zz(-1) if key is None else zz(len(key)) + key
    out += zz(-1) if value is None else zz(len(value)) + value
    return out + zz(0)


def walk_area(area: bytes, count: int, pad: int = 0) -> Any:
    """Walk one record area placed at byte ``pad`` of a buffer."""
    buf = as_array(b"\xee" * pad + area + b"\xee" * 3)
    return walk_records(buf, [pad], [pad + len(area)], [count], [100], [1000])


SAMPLE: list[Rec] = [
    (0, 1_700_000_000_000, b"key-0", b"value-0", []),
    (1, 1_700_000_000_005, None, b"no key", [("trace", b"abc")]),
    (2, 1_699_999_999_990, b"tomb", None, [("a", None), ("bb", b""), ("\u00e9t\u00e9", b"\x00\xff")]),
    (3, 1_700_000_000_001, b"", b"", []),
    (5, 1_700_000_100_000, b"k" * 300, b"v" * 5000, []),
]


def segment() -> tuple[bytes, list[bytes]]:
    batches = [
        build_batch(SAMPLE, base_offset=0, leader_epoch=3),
        build_batch(SAMPLE[:2], base_offset=6, leader_epoch=3, producer=(77, 2, 10)),
        build_batch(SAMPLE[2:], base_offset=8, leader_epoch=4, producer=(78, 0, 0), transactional=True),
        build_batch(
            [(0, 1_700_000_200_000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07", [])],
            base_offset=14, leader_epoch=4, producer=(78, 0, -1), transactional=True, control=True,
        ),
    ]
    return b"".join(batches), batches


def check_against_kafka_python(data: bytes, buf: Any, table: BatchTable) -> int:
    records = walk_batches(buf, table)
    view = bytes(data)
    row = 0
    for b in range(len(table)):
        start, size = int(table.position[b]), int(table.size[b])
        kb = DefaultRecordBatch(view[start : start + size])
        expected_pos = start + 61
        for rec in kb:
            assert records.batch[row] == b
            assert records.offset[row] == rec.offset
            assert records.timestamp[row] == rec.timestamp
            kl, kp = int(records.key_len[row]), int(records.key_pos[row])
            vl, vp = int(records.value_len[row]), int(records.value_pos[row])
            assert (None if kl < 0 else view[kp : kp + kl]) == rec.key
            assert (None if vl < 0 else view[vp : vp + vl]) == rec.value
            assert (kp == -1) == (kl == -1) and (vp == -1) == (vl == -1)
            assert records.header_count[row] == len(rec.headers)
            assert headers_of(buf, int(records.headers_pos[row]), int(records.header_count[row])) == [
                (k, None if v is None else bytes(v)) for k, v in rec.headers
            ]
            assert records.record_pos[row] == expected_pos
            length = rec.size_in_bytes  # kafka-python: bytes after the length varint
            assert records.record_size[row] == length + len(zz(length))
            expected_pos += int(records.record_size[row])
            row += 1
        assert expected_pos == start + size
    assert row == len(records)
    return row
