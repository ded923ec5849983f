"""Unit tests of logkeeper.records.scan's record walk against kafka-python's own builder and parser
(the batch scan's: test_scan.py)."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from logkeeper.errors import BadVarintError, InvalidRecordError, LengthPastEndError
from logkeeper.records.scan import headers_of, scan_batches, walk_batches, walk_records
from tests.scan_batches import (
    SAMPLE,
    Rec,
    as_array,
    body,
    build_batch,
    check_against_kafka_python,
    raw_record,
    reseal,
    segment,
    walk_area,
    zz,
)


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


