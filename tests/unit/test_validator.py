"""Validation of appended requests (``log/validator.py``): every check, its error and position.

Two layers:

* one case per rule, pinning the error class and the message (with the position it names), in
  a request whose bad batch is not the first, so positions are checked for real;
* a differential property test: random requests (codecs, producers, transactions, control
  batches) with one random fault — a bit flip, a cut, a header field overwritten with the CRC
  fixed so that later checks are reached — validated by ``validate_request`` and by
  ``reference_validate`` below, a plain Python reading of the same rules (header parsed by
  ``BatchHeader.parse``, CRC by the ``crc32c`` package, records by ``check_kernel``). Both must
  raise the same error with the same message, or return the same result.
"""

from __future__ import annotations

import gzip
import re
import struct
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeeper.errors import (
    BadMagicError,
    BadVarintError,
    CorruptRecordError,
    CrcMismatchError,
    InvalidRecordError,
    InvalidTimestampError,
    LengthPastEndError,
    RecordTooLargeError,
    ShortBatchError,
    UnknownCodecError,
)
from logkeeper.log.log_config import LogConfig
from logkeeper.log.validator import ValidatedBatch, ValidatedRequest, _check_error, validate_request
from logkeeper.records import scan_kernels as _k
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec, codec_from_attributes, decompress
from logkeeper.records.varint import encode_varint
from tests.helpers import NOW_MS, batch

CONFIG = LogConfig.from_props({})
FIRST = batch(2)
P = len(FIRST)  # where the second batch of a two-batch request starts


def fix_crc(raw: bytearray, pos: int = 0) -> None:
    size = 12 + struct.unpack_from(">i", raw, pos + 8)[0]
    struct.pack_into(">I", raw, pos + 17, crc32c.crc32c(bytes(raw[pos + 21:pos + size])))


def second(raw: bytes | bytearray, *, crc: bool = True) -> bytes:
    """A request of a good batch followed by ``raw`` (its CRC recomputed unless ``crc=False``)."""
    out = bytearray(FIRST + raw)
    if crc and len(raw) >= 61:
        fix_crc(out, P)
    return bytes(out)


def patched(raw: bytes, fmt: str, offset: int, value: int) -> bytearray:
    out = bytearray(raw)
    struct.pack_into(fmt, out, offset, value)
    return out


def records_batch(*records: bytes, count: int | None = None) -> bytes:
    """A batch whose records area is exactly the given encoded records."""
    body = b"".join(records)
    n = len(records) if count is None else count
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, 0, n - 1, NOW_MS, NOW_MS, -1, -1, -1, n)
    out = bytearray(header + body)
    fix_crc(out)
    return bytes(out)


def record(body: bytes) -> bytes:
    out = bytearray()
    encode_varint(len(body), out)
    return bytes(out) + body


def validate(data: bytes, props: dict[str, Any] | None = None, *, from_client: bool = True) -> ValidatedRequest:
    config = LogConfig.from_props(props or {})
    return validate_request(data, config, now_ms=NOW_MS, from_client=from_client)


GOOD_RECORD = record(b"\x00\x00\x02\x02k\x02v\x00")  # attributes, ts 0, delta 1, key "k", value "v"

ERROR_CASES: list[tuple[str, bytes, dict[str, Any], type[Exception], str]] = [
    ("empty request", b"", {}, InvalidRecordError, "invalid record at position 0: no record batch in the request"),
    ("fewer than 17 bytes", FIRST + FIRST[:16], {}, ShortBatchError,
     f"short batch at position {P}: 16 bytes left, a batch header needs 61"),
    ("bad magic", second(patched(FIRST, ">b", 16, 1), crc=False), {}, BadMagicError,
     f"bad magic at position {P}: magic 1, expected 2"),
    ("17 to 60 bytes", FIRST + FIRST[:40], {}, ShortBatchError,
     f"short batch at position {P}: 40 bytes left, a batch header needs 61"),
    ("batch length below the header", second(patched(FIRST, ">i", 8, 48), crc=False), {}, ShortBatchError,
     f"short batch at position {P}: batch length 48 is below the header size"),
    ("batch past the end", FIRST + FIRST[:-1], {}, LengthPastEndError,
     f"length past end at position {P}: batch of {P} bytes, {P - 1} bytes left"),
    ("max.message.bytes", FIRST + batch(30), {"max.message.bytes": 200}, RecordTooLargeError,
     f"batch at position {P} is {len(batch(30))} bytes, above max.message.bytes 200"),
    ("crc", FIRST + bytes(patched(FIRST, ">b", 70, 7)), {}, CrcMismatchError,
     rf"CRC mismatch at position {P}: stored crc 0x[0-9a-f]{{8}}, computed 0x[0-9a-f]{{8}}"),
    ("control batch from a client",
     FIRST + build_marker_batch(ControlType.COMMIT, offset=0, timestamp=NOW_MS, producer_id=1, producer_epoch=0),
     {}, InvalidRecordError, f"invalid record at position {P}: clients may not append control batches"),
    ("lastOffsetDelta", second(patched(FIRST, ">i", 23, 5)), {}, InvalidRecordError,
     f"invalid record at position {P}: lastOffsetDelta 5 does not match recordCount 2"),
    ("no records", second(patched(patched(FIRST, ">i", 57, 0), ">i", 23, -1)), {}, InvalidRecordError,
     f"invalid record at position {P}: lastOffsetDelta -1 does not match recordCount 0"),
    ("recordCount larger than the batch can hold", second(patched(patched(FIRST, ">i", 57, 1000), ">i", 23, 999)),
     {}, InvalidRecordError, f"invalid record at position {P}: recordCount 1000 does not fit the batch"),
    ("unknown codec", second(patched(FIRST, ">h", 21, 5)), {}, UnknownCodecError,
     f"unknown codec at position {P}: compression codec id 5 in batch attributes 0x0005"),
    ("varint too long", second(records_batch(b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 10)), {}, BadVarintError,
     f"bad varint at position {P + 61}"),
    ("record length past the end", second(records_batch(record(b"\x00\x00\x00\x02k\x02v\x00"),
                                                        b"\x40" + b"\x00" * 8, count=2)), {},
     LengthPastEndError, f"length past end at position {P + 61 + 9}: length 32 runs past the record end"),
    ("offset deltas out of sequence", second(records_batch(record(b"\x00\x00\x02\x02k\x02v\x00"),
                                                          record(b"\x00\x00\x00\x02k\x02v\x00"))), {},
     InvalidRecordError, f"invalid record at position {P + 61}: offset delta 1 out of sequence"),
    ("timestamp too far ahead", FIRST + batch(1, ts=NOW_MS + 3_600_001), {}, InvalidTimestampError,
     f"record at position {P + 61} has timestamp {NOW_MS + 3_600_001}, outside"),
    ("timestamp too old", FIRST + batch(1, ts=NOW_MS - 11), {"message.timestamp.before.max.ms": 10},
     InvalidTimestampError, f"record at position {P + 61} has timestamp {NOW_MS - 11}, outside"),
    ("null key in a compacted topic", FIRST + build_batch([Record(0, NOW_MS, None, b"v")]),
     {"cleanup.policy": "compact"}, InvalidRecordError,
     f"invalid record at position {P + 61}: compacted topic cannot accept a record without a key"),
    ("more records than counted", second(records_batch(record(b"\x00\x00\x00\x02k\x02v\x00"), GOOD_RECORD,
                                                      count=1)), {},
     InvalidRecordError, f"invalid record at position {P + 61 + 9}: 9 bytes left after recordCount records"),
    ("compressed records out of sequence",
     FIRST + build_batch([Record(0, NOW_MS, b"k", b"v"), Record(2, NOW_MS, b"k", b"v")], codec=Codec.GZIP),
     {}, InvalidRecordError, f"invalid record at position {P}: lastOffsetDelta 2 does not match recordCount 2"),
]


@pytest.mark.parametrize(("data", "props", "error", "message"), [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_each_rule_raises_its_error_naming_the_position(data: bytes, props: dict[str, Any],
                                                        error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        validate(data, props)
    assert type(info.value) is error
    assert re.match(re.escape(message) if "[" not in message else message, str(info.value)), str(info.value)


def test_compressed_records_errors_name_the_batch() -> None:
    body = bytearray()
    for i in (0, 2):  # lastOffsetDelta 1 with two records, but deltas 0, 2
        encode_varint(len(b"\x00\x00" + bytes([i * 2]) + b"\x02k\x02v\x00"), body)
        body += b"\x00\x00" + bytes([i * 2]) + b"\x02k\x02v\x00"
    good = bytearray(build_batch([Record(0, NOW_MS, b"k", b"v"), Record(1, NOW_MS, b"k", b"v")], codec=Codec.GZIP))
    packed = gzip.compress(bytes(body))
    raw = bytearray(good[:61] + packed)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    fix_crc(raw)
    with pytest.raises(InvalidRecordError, match=rf"^invalid record at position {P}: offset delta 2 out of "
                                                 r"sequence.*\(inside the compressed records of this batch\)$"):
        validate(FIRST + bytes(raw))


def test_batches_from_a_leader_or_a_copy_keep_their_rules() -> None:
    """Not from a client: control batches pass, deltas are not checked, timestamps are the
    header's and not bounded."""
    marker = build_marker_batch(ControlType.ABORT, offset=5, timestamp=1, producer_id=3, producer_epoch=0)
    old = batch(2, start=7, ts=1)
    req = validate(marker + old, from_client=False)
    assert [b.position for b in req.batches] == [0, len(marker)]
    assert [b.max_timestamp for b in req.batches] == [1, 2]
    assert req.num_records == 3 and req.size == len(marker) + len(old) and req.max_timestamp == 2
    assert req.has_transactional and req.has_producer_id


def test_result_fields_for_a_mixed_request() -> None:
    stale_max = patched(batch(3, ts=NOW_MS), ">q", 35, NOW_MS - 100)  # header max below the records'
    fix_crc(stale_max)
    parts = [batch(2, codec=Codec.LZ4), bytes(stale_max),
             build_batch([Record(0, NOW_MS + 9, b"k", b"v")], producer_id=4, producer_epoch=1, base_sequence=0,
                         is_transactional=True)]
    req = validate(b"".join(parts))
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert req == ValidatedRequest(
        [ValidatedBatch(p, BatchHeader.parse(b"".join(parts), p), ts)
         for p, ts in zip(positions, [NOW_MS + 1, NOW_MS + 2, NOW_MS + 9])],
        6, sum(map(len, parts)), NOW_MS + 9, True, True)
    log_append = validate(parts[0], {"message.timestamp.type": "LogAppendTime"})
    assert log_append.batches[0].max_timestamp == NOW_MS + 1  # the header's; the Log sets the append time


# ------------------------------------------------------------------------------------------
# Differential property test
# ------------------------------------------------------------------------------------------
def reference_validate(data: bytes, config: LogConfig, *, now_ms: int, from_client: bool) -> ValidatedRequest:
    """The rules of ``validate_request`` in plain Python, one check after the other."""
    if not data:
        raise InvalidRecordError(0, "no record batch in the request")
    check_ts = from_client and config.message_timestamp_type == "CreateTime"
    ts_low = max(-(1 << 63), now_ms - config.message_timestamp_before_max_ms)
    ts_high = min((1 << 63) - 1, now_ms + config.message_timestamp_after_max_ms)
    batches, num_records, request_max, txn, producer, pos = [], 0, -1, False, False, 0
    while pos < len(data):
        h = BatchHeader.parse(data, pos)
        if h.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch at position {pos} is {h.size} bytes, above max.message.bytes {config.max_message_bytes}")
        computed = crc32c.crc32c(data[pos + 21:pos + h.size])
        if computed != h.crc:
            raise CrcMismatchError(pos, f"stored crc {h.crc:#010x}, computed {computed:#010x}")
        if from_client and h.is_control:
            raise InvalidRecordError(pos, "clients may not append control batches")
        if from_client and (h.record_count == 0 or h.last_offset_delta + 1 != h.record_count):
            raise InvalidRecordError(pos, (
                f"lastOffsetDelta {h.last_offset_delta} does not match recordCount {h.record_count}"))
        area = np.frombuffer(data, np.uint8)
        start, end = pos + 61, pos + h.size
        if h.attributes & 7:
            raw = decompress(codec_from_attributes(h.attributes, pos), data[start:end], pos)
            area, start, end = np.frombuffer(raw, np.uint8), 0, len(raw)
        if h.record_count < 0 or h.record_count > (end - start) // 7:
            raise InvalidRecordError(pos, f"recordCount {h.record_count} does not fit the batch")
        create_time = not h.attributes & 8
        err, err_pos, detail, records_max = _k.check_kernel(
            area, start, end, h.record_count, h.base_timestamp, from_client, check_ts and create_time, ts_low,
            ts_high, config.compact and not h.is_control)
        if err:
            raise _check_error(int(err), pos, int(err_pos), int(detail), ts_low, ts_high, now_ms,
                               compressed=bool(h.attributes & 7))
        max_ts = int(records_max) if from_client and create_time else h.max_timestamp
        batches.append(ValidatedBatch(pos, h, max_ts))
        request_max = max(request_max, max_ts)
        txn = txn or h.is_transactional
        producer = producer or h.producer_id >= 0
        num_records += h.record_count
        pos += h.size
    return ValidatedRequest(batches, num_records, len(data), request_max, txn, producer)


def outcome(fn: Any, data: bytes, config: LogConfig, from_client: bool) -> tuple[str, Any]:
    try:
        return "ok", fn(data, config, now_ms=NOW_MS, from_client=from_client)
    except (CorruptRecordError, RecordTooLargeError, InvalidTimestampError) as e:
        return type(e).__name__, str(e)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["plain", "plain", "codec", "producer", "marker"]))
        n = draw(st.integers(1, 12))
        recs = [Record(i, NOW_MS + draw(st.integers(-5, 5)),
                       draw(st.one_of(st.none(), st.binary(max_size=6))), draw(st.binary(max_size=40)),
                       (("h", b"x"),) if draw(st.booleans()) else ()) for i in range(n)]
        if kind == "marker":
            parts.append(build_marker_batch(ControlType.COMMIT, offset=0, timestamp=NOW_MS, producer_id=9,
                                            producer_epoch=0))
        elif kind == "producer":
            parts.append(build_batch(recs, producer_id=9, producer_epoch=0, base_sequence=0,
                                     is_transactional=draw(st.booleans())))
        else:
            codec = draw(st.sampled_from(list(Codec))) if kind == "codec" else Codec.NONE
            parts.append(build_batch(recs, codec=codec))
    return b"".join(parts)


FIELDS = [(">i", 8), (">b", 16), (">h", 21), (">i", 23), (">q", 27), (">q", 35), (">i", 57)]


@st.composite
def faulty(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(requests()))
    fault = draw(st.sampled_from(["none", "flip", "cut", "field", "field", "record"]))
    if fault == "flip":
        i = draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << draw(st.integers(0, 7))
    elif fault == "cut":
        del raw[draw(st.integers(0, len(raw) - 1)):]
    else:
        starts, pos = [], 0
        while pos < len(raw):
            starts.append(pos)
            pos += 12 + struct.unpack_from(">i", raw, pos + 8)[0]
        at = draw(st.sampled_from(starts))
        if fault == "field":
            fmt, off = draw(st.sampled_from(FIELDS))
            bits = struct.calcsize(fmt) * 8
            value = draw(st.one_of(st.integers(-2, 2 * bits), st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)))
            struct.pack_into(fmt, raw, at + off, value)
        else:
            end = at + 12 + struct.unpack_from(">i", raw, at + 8)[0]
            if end > at + 61:
                raw[draw(st.integers(at + 61, end - 1))] = draw(st.integers(0, 255))
        size = 12 + struct.unpack_from(">i", raw, at + 8)[0]
        if raw[at + 16] == 2 and 61 <= size <= len(raw) - at:
            fix_crc(raw, at)
    return bytes(raw)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(faulty(), st.booleans(), st.sampled_from([{}, {"cleanup.policy": "compact"}, {"max.message.bytes": 400},
                                                 {"message.timestamp.type": "LogAppendTime"},
                                                 {"message.timestamp.after.max.ms": 3}]))
def test_validation_agrees_with_the_plain_reading_of_the_rules(data: bytes, from_client: bool,
                                                               props: dict[str, Any]) -> None:
    config = LogConfig.from_props(props)
    assert outcome(validate_request, data, config, from_client) == outcome(reference_validate, data, config,
                                                                          from_client)
