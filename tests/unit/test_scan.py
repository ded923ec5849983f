"""Unit tests of logkeeper.records.scan against kafka-python's own builder and parser."""

from __future__ import annotations

import gzip
import mmap
import struct
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logkeeper.errors import BadVarintError, CrcMismatchError, InvalidRecordError, LengthPastEndError
from logkeeper.records.scan import (
    BatchTable,
    ScanStop,
    ensure_valid,
    first_crc_mismatch,
    headers_of,
    scan_batches,
    walk_batches,
    walk_records,
)

Rec = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


# ------------------------------------------------------------------------------------------
# builders
# ------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------
# batch scan
# ------------------------------------------------------------------------------------------
def test_scan_columns_match_kafka_python() -> None:
    data, batches = segment()
    table = scan_batches(as_array(data))
    assert table.stop_reason is ScanStop.END and table.stop_position == len(data)
    assert len(table) == table.count == len(batches)
    position = 0
    for row, raw in enumerate(batches):
        kb = DefaultRecordBatch(raw)
        assert table.position[row] == position
        assert table.size[row] == kb.size_in_bytes == len(raw)
        assert table.base_offset[row] == kb.base_offset
        assert table.partition_leader_epoch[row] == kb.leader_epoch
        assert table.magic[row] == kb.magic == 2
        assert table.crc[row] == kb.crc
        assert table.attributes[row] == kb.attributes
        assert table.last_offset_delta[row] == kb.last_offset_delta
        assert table.last_offset[row] == kb.last_offset
        assert table.base_timestamp[row] == kb.first_timestamp
        assert table.max_timestamp[row] == kb.max_timestamp
        assert table.producer_id[row] == kb.producer_id
        assert table.producer_epoch[row] == kb.producer_epoch
        assert table.base_sequence[row] == kb.base_sequence
        assert table.record_count[row] == kb.records_count
        assert bool(table.attributes[row] & 0x10) == kb.is_transactional
        assert bool(table.attributes[row] & 0x20) == kb.is_control_batch
        position += len(raw)
    dtypes = {
        "position": np.int64, "size": np.int32, "base_offset": np.int64,
        "partition_leader_epoch": np.int32, "magic": np.int8, "crc": np.uint32,
        "attributes": np.int16, "last_offset_delta": np.int32, "base_timestamp": np.int64,
        "max_timestamp": np.int64, "producer_id": np.int64, "producer_epoch": np.int16,
        "base_sequence": np.int32, "record_count": np.int32,
    }
    for name, dtype in dtypes.items():
        assert getattr(table, name).dtype == dtype, name


def test_scan_empty_and_subrange_and_limit() -> None:
    data, batches = segment()
    buf = as_array(data)
    empty = scan_batches(buf, 5, 5)
    assert len(empty) == 0 and empty.stop_reason is ScanStop.END and empty.stop_position == 5
    first = len(batches[0])
    mid = scan_batches(buf, first, first + len(batches[1]) + len(batches[2]))
    assert mid.position.tolist() == [first, first + len(batches[1])]
    assert mid.stop_reason is ScanStop.END
    limited = scan_batches(buf, max_batches=2)
    assert len(limited) == 2 and limited.stop_reason is ScanStop.LIMIT
    assert limited.stop_position == first + len(batches[1])
    exact = scan_batches(buf, max_batches=len(batches))
    assert exact.stop_reason is ScanStop.END
    with pytest.raises(ValueError):
        scan_batches(buf, 10, 5)
    with pytest.raises(ValueError):
        scan_batches(buf, 0, len(data) + 1)


def test_scan_short_tail_at_every_cut() -> None:
    data, batches = segment()
    last = len(data) - len(batches[-1])
    for cut in range(last + 1, len(data)):
        table = scan_batches(as_array(data[:cut]))
        assert table.stop_reason is ScanStop.SHORT_TAIL, cut
        assert table.stop_position == last
        assert len(table) == len(batches) - 1
    # a truncated tail inside a buffer: `end` bounds the scan, not the buffer
    table = scan_batches(as_array(data), 0, len(data) - 1)
    assert table.stop_reason is ScanStop.SHORT_TAIL and table.stop_position == last


def test_scan_bad_magic() -> None:
    data, batches = segment()
    buf = bytearray(data)
    second = len(batches[0])
    buf[second + 16] = 1
    table = scan_batches(as_array(buf))
    assert table.stop_reason is ScanStop.BAD_MAGIC
    assert table.stop_position == second and len(table) == 1


@pytest.mark.parametrize("batch_length", [48, 0, -1, -(2**31)])
def test_scan_bad_size(batch_length: int) -> None:
    data, batches = segment()
    buf = bytearray(data)
    second = len(batches[0])
    struct.pack_into(">i", buf, second + 8, batch_length)
    table = scan_batches(as_array(buf))
    assert table.stop_reason is ScanStop.BAD_SIZE
    assert table.stop_position == second and len(table) == 1


def test_scan_zero_filled_tail_is_bad_size() -> None:
    data, batches = segment()
    table = scan_batches(as_array(data + bytes(4096)))
    assert table.stop_reason is ScanStop.BAD_SIZE
    assert table.stop_position == len(data) and len(table) == len(batches)


def test_scan_huge_declared_size_is_short_tail() -> None:
    data, _ = segment()
    buf = bytearray(data)
    struct.pack_into(">i", buf, 8, 2**31 - 1)
    table = scan_batches(as_array(buf))
    assert table.stop_reason is ScanStop.SHORT_TAIL and table.stop_position == 0


def test_scan_and_walk_over_mmap(tmp_path: Path) -> None:
    data, batches = segment()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = np.frombuffer(mm, dtype=np.uint8)
        table = scan_batches(buf)
        assert len(table) == len(batches)
        assert first_crc_mismatch(buf, table) == -1
        records = walk_batches(buf, table)
        assert len(records) == int(table.record_count.sum())
        del buf, table, records


# ------------------------------------------------------------------------------------------
# CRC
# ------------------------------------------------------------------------------------------
def test_crc_mismatch_after_bit_flip() -> None:
    data, batches = segment()
    buf = as_array(data)
    table = scan_batches(buf)
    assert first_crc_mismatch(buf, table) == -1
    ensure_valid(buf, table)
    third = len(batches[0]) + len(batches[1])
    for flip_at in (third + 21, third + 70, third + len(batches[2]) - 1):
        bad = bytearray(data)
        bad[flip_at] ^= 0x04
        bad_buf = as_array(bad)
        bad_table = scan_batches(bad_buf)
        assert first_crc_mismatch(bad_buf, bad_table) == 2
        assert first_crc_mismatch(bad_buf, bad_table, from_row=3) == -1
        with pytest.raises(CrcMismatchError) as info:
            ensure_valid(bad_buf, bad_table, file="x.log")
        assert info.value.position == third and info.value.file == "x.log"
        assert "x.log" in str(info.value) and str(third) in str(info.value)


def test_crc_does_not_cover_offset_length_epoch() -> None:
    data, _ = segment()
    bad = bytearray(data)
    struct.pack_into(">q", bad, 0, 12345)
    struct.pack_into(">i", bad, 12, 99)
    buf = as_array(bad)
    assert first_crc_mismatch(buf, scan_batches(buf)) == -1


def test_crc_stored_field_flip() -> None:
    data, _ = segment()
    bad = bytearray(data)
    bad[17] ^= 0x80
    buf = as_array(bad)
    assert first_crc_mismatch(buf, scan_batches(buf)) == 0


# ------------------------------------------------------------------------------------------
# record walk
# ------------------------------------------------------------------------------------------
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


def test_walk_columns_match_kafka_python() -> None:
    data, _ = segment()
    buf = as_array(data)
    table = scan_batches(buf)
    records = walk_batches(buf, table)
    assert check_against_kafka_python(data, buf, table) == len(records) == 11
    dtypes = {
        "batch": np.int32, "offset": np.int64, "timestamp": np.int64, "key_pos": np.int64,
        "key_len": np.int32, "value_pos": np.int64, "value_len": np.int32,
        "headers_pos": np.int64, "header_count": np.int32, "record_pos": np.int64,
        "record_size": np.int32,
    }
    for name, dtype in dtypes.items():
        assert getattr(records, name).dtype == dtype, name
    # the control batch's single record: a COMMIT marker key
    last = len(records) - 1
    kp = int(records.key_pos[last])
    assert data[kp : kp + 4] == b"\x00\x00\x00\x01"


def test_walk_writable_buffer_same_result() -> None:
    data, _ = segment()
    ro = as_array(data)
    rw = np.array(ro)
    a = walk_batches(ro, scan_batches(ro))
    b = walk_batches(rw, scan_batches(rw))
    for name in ("offset", "timestamp", "key_pos", "value_len", "record_size"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_walk_empty_header_only_batch() -> None:
    # a batch whose records were all compacted away: recordCount 0, no record bytes
    one = bytearray(build_batch([(0, 5, b"k", b"v", [])], base_offset=40))
    del one[61:]
    struct.pack_into(">i", one, 8, 61 - 12)
    struct.pack_into(">i", one, 57, 0)
    reseal(one)
    buf = as_array(one)
    table = scan_batches(buf)
    assert len(table) == 1 and table.record_count[0] == 0
    assert len(walk_batches(buf, table)) == 0


def test_walk_batches_rejects_compressed() -> None:
    raw = build_batch([(i, 10, b"k", b"a" * 200, []) for i in range(10)], codec=1)
    buf = as_array(raw)
    table = scan_batches(buf)
    assert table.attributes[0] & 7 == 1
    with pytest.raises(ValueError, match="decompress"):
        walk_batches(buf, table)


def test_walk_records_on_decompressed_scratch_buffers() -> None:
    recs: list[Rec] = [(i, 10 + i, b"k%d" % i, b"a" * 200, [("h", b"%d" % i)]) for i in range(10)]
    raws = [build_batch(recs, base_offset=b * 100, codec=1) for b in range(3)]
    data = b"".join(raws)
    table = scan_batches(as_array(data))
    scratch = b""
    starts, ends = [], []
    for b in range(len(table)):
        p, s = int(table.position[b]), int(table.size[b])
        plain = gzip.decompress(data[p + 61 : p + s])
        starts.append(len(scratch))
        scratch += plain
        ends.append(len(scratch))
    sbuf = as_array(scratch)
    records = walk_records(sbuf, starts, ends, table.record_count, table.base_offset, table.base_timestamp)
    assert records.offset.tolist() == [b * 100 + i for b in range(3) for i in range(10)]
    assert records.batch.tolist() == [b for b in range(3) for _ in range(10)]
    kp, kl = int(records.key_pos[13]), int(records.key_len[13])
    assert scratch[kp : kp + kl] == b"k3"
    assert headers_of(scratch, int(records.headers_pos[13]), 1) == [("h", b"3")]


def test_walk_extreme_varints() -> None:
    # int32 extremes for deltas/lengths in range, int64 extremes for the timestamp delta
    area = raw_record(body(ts=-(2**63), off=2**31 - 1)) + raw_record(body(ts=2**63 - 1, off=-(2**31)))
    records = walk_area(area, 2, pad=9)
    wrap = 2**63 - 1 + 1000 - 2**64  # base + delta wraps around int64, as in Java
    assert records.timestamp.tolist() == [1000 - 2**63, wrap]
    assert records.offset.tolist() == [100 + 2**31 - 1, 100 - 2**31]
    assert records.record_pos.tolist() == [9, 9 + len(raw_record(body(ts=-(2**63), off=2**31 - 1)))]


def test_bad_varint_too_long() -> None:
    area = raw_record(body()) + b"\xff" * 6 + b"\x00" * 10
    with pytest.raises(BadVarintError) as info:
        walk_area(area, 2, pad=5)
    assert info.value.position == 5 + len(raw_record(body()))
    # a varlong may take 10 bytes, not 11
    bad_ts = b"\x00" + b"\xff" * 10 + b"\x01" + zz(0) + zz(-1) + zz(-1) + zz(0)
    with pytest.raises(BadVarintError) as info:
        walk_area(raw_record(bad_ts), 1)
    assert info.value.position == 2


def test_bad_varint_past_area_end() -> None:
    area = raw_record(body(value=b"x" * 20)) + b"\x80\x80"
    with pytest.raises(BadVarintError) as info:
        walk_area(area, 2, pad=3)
    assert info.value.position == 3 + len(raw_record(body(value=b"x" * 20)))


def test_length_past_end() -> None:
    rec = body(key=b"abc")
    with pytest.raises(LengthPastEndError) as info:  # record length past the area end
        walk_area(zz(len(rec) + 5) + rec, 1, pad=7)
    assert info.value.position == 7
    # key length past the record end (record length consistent with the area)
    rec2 = b"\x00" + zz(0) + zz(0) + zz(50) + b"abc" + zz(-1) + zz(0)
    with pytest.raises(LengthPastEndError) as info:
        walk_area(raw_record(rec2), 1)
    assert info.value.position == 1 + 3
    # header value length past the record end
    rec3 = b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(1) + b"h" + zz(9) + b"x"
    with pytest.raises(LengthPastEndError):
        walk_area(raw_record(rec3), 1)


def test_record_count_mismatch() -> None:
    area = raw_record(body(value=b"x" * 30)) * 3
    with pytest.raises(InvalidRecordError, match="fewer"):
        walk_area(area, 4)
    with pytest.raises(InvalidRecordError, match="more records"):
        walk_area(area, 2)
    with pytest.raises(InvalidRecordError, match="impossible"):  # absurd count from a corrupt header
        walk_area(area, 2**31 - 1)
    with pytest.raises(InvalidRecordError, match="impossible"):
        walk_area(area, -1)
    assert len(walk_area(area, 3)) == 3


def test_record_count_mismatch_in_a_batch() -> None:
    raw = bytearray(build_batch(SAMPLE[:3]))
    struct.pack_into(">i", raw, 57, 2)
    reseal(raw)
    buf = as_array(raw)
    with pytest.raises(InvalidRecordError) as info:
        walk_batches(buf, scan_batches(buf))
    first_two = sum(int(x) for x in walk_area(bytes(raw[61:]), 3).record_size[:2])
    assert info.value.position == 61 + first_two


def test_declared_length_mismatch() -> None:
    rec = body(key=b"ab", value=b"cd" * 10)
    with pytest.raises(InvalidRecordError, match="declared length"):  # length too large
        walk_area(zz(len(rec) + 1) + rec + b"\x00", 1)
    with pytest.raises(InvalidRecordError, match="declared length"):  # length too small
        walk_area(zz(len(rec) - 1) + rec, 1)  # header count outside the record
    with pytest.raises(LengthPastEndError):  # the value then runs past the record end
        walk_area(zz(len(rec) - 3) + rec, 1)


@pytest.mark.parametrize(
    "rec",
    [
        b"\x00" + zz(0) + zz(0) + zz(-2) + zz(-1) + zz(0),  # key length -2
        b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-7) + zz(0),  # value length -7
        b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(-1),  # header count -1
        b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(-1),  # null header key
    ],
)
def test_negative_lengths(rec: bytes) -> None:
    with pytest.raises(InvalidRecordError, match="negative"):
        walk_area(raw_record(rec), 1)
    with pytest.raises(InvalidRecordError, match="negative"):
        walk_area(zz(-3) + rec, 1)


def test_walk_records_argument_checks() -> None:
    buf = as_array(raw_record(body()))
    with pytest.raises(ValueError):
        walk_records(buf, [0], [100], [1], [0], [0])
    with pytest.raises(ValueError):
        walk_records(buf, [0, 1], [1], [1], [0], [0])
    with pytest.raises(ValueError):
        walk_records(np.zeros((2, 2), np.uint8), [0], [1], [1], [0], [0])


# ------------------------------------------------------------------------------------------
# property: kafka-python build -> our walk
# ------------------------------------------------------------------------------------------
blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=12), blobs), max_size=4)
record_lists = st.lists(
    st.tuples(st.integers(0, 2**40), blobs, blobs, headers), min_size=1, max_size=30
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(record_lists, min_size=1, max_size=5),
    st.integers(0, 2**50),
    st.integers(1, 1000),
)
def test_property_round_trip(batches: list[list[Any]], base: int, offset_gap: int) -> None:
    raws = []
    expected = []
    next_offset = base
    for recs in batches:
        built: list[Rec] = []
        for i, (ts, key, value, hdrs) in enumerate(recs):
            delta = i * offset_gap
            built.append((delta, ts, key, value, hdrs))
            expected.append((next_offset + delta, ts, key, value, hdrs))
        raws.append(build_batch(built, base_offset=next_offset))
        next_offset += (len(recs) - 1) * offset_gap + 1
    data = b"".join(raws)
    buf = as_array(data)
    table = scan_batches(buf)
    assert table.stop_reason is ScanStop.END and len(table) == len(raws)
    assert first_crc_mismatch(buf, table) == -1
    records = walk_batches(buf, table)
    assert len(records) == len(expected)
    for row, (offset, ts, key, value, hdrs) in enumerate(expected):
        assert records.offset[row] == offset
        assert records.timestamp[row] == ts
        kp, kl = int(records.key_pos[row]), int(records.key_len[row])
        vp, vl = int(records.value_pos[row]), int(records.value_len[row])
        assert (None if kl < 0 else data[kp : kp + kl]) == key
        assert (None if vl < 0 else data[vp : vp + vl]) == value
        assert headers_of(buf, int(records.headers_pos[row]), int(records.header_count[row])) == hdrs
    check_against_kafka_python(data, buf, table)
