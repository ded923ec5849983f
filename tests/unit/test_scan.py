"""Unit tests of logkeeper.records.scan's batch scan and CRC checks against kafka-python's own builder and
parser, and a property test through the record walk (the walk's own: test_walk_records.py)."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from logkeeper.errors import CrcMismatchError
from logkeeper.records.scan import ScanStop, ensure_valid, first_crc_mismatch, headers_of, scan_batches, walk_batches
from tests.scan_batches import Rec, as_array, build_batch, check_against_kafka_python, segment


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
