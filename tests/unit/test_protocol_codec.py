"""The Kafka protocol codec: primitives, schema-driven messages across versions, malformed input."""

from __future__ import annotations

import struct

import pytest

from logkeeper.protocol import messages as m
from logkeeper.protocol.framing import parse_request_header, response_frame
from logkeeper.protocol.offsets_store import (
    CommittedOffset,
    decode_record,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from logkeeper.protocol.primitives import MalformedError, Reader, Writer
from logkeeper.protocol.schema import parse_message
from tests.kafka_wire import request_frame


def roundtrip(msg: object, value: dict[str, object], version: int) -> tuple[bytes, dict[str, object]]:
    w = Writer()
    msg.encode(w, value, version)  # type: ignore[attr-defined]
    data = bytes(w.buf)
    return data, msg.decode(Reader(data), version)  # type: ignore[attr-defined]


def test_every_schema_round_trips_its_defaults_in_every_version() -> None:
    for spec in m.APIS.values():
        for v in range(spec.schema_min, spec.schema_max + 1):
            for msg in (spec.request, spec.response):
                _, decoded = roundtrip(msg, msg.defaults(), v)
                assert set(decoded) == {f.name for f in msg.fields}


def test_classic_and_compact_encodings_of_strings_arrays_and_bytes() -> None:
    body = {"group_id": "g", "session_timeout_ms": 10, "rebalance_timeout_ms": 20, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x01"}]}
    classic, decoded = roundtrip(m.JOIN_GROUP_REQUEST, body, 5)
    assert classic.startswith(b"\x00\x01g" + struct.pack(">ii", 10, 20) + b"\x00\x00" + b"\xff\xff")
    assert decoded["protocols"] == [{"name": "range", "metadata": b"\x01"}] and decoded["group_instance_id"] is None
    compact, decoded6 = roundtrip(m.JOIN_GROUP_REQUEST, body, 6)
    assert compact.startswith(b"\x02g" + struct.pack(">ii", 10, 20) + b"\x01" + b"\x00")
    # one protocol: array length 1 + 1, compact name, compact metadata, the entry's tags; the message's tags
    assert compact.endswith(b"\x02" + b"\x06range" + b"\x02\x01" + b"\x00" + b"\x00")
    assert decoded6 == {**decoded, "reason": None}


def test_fields_outside_their_versions_are_not_written_and_decode_to_defaults() -> None:
    data, decoded = roundtrip(m.FETCH_REQUEST, {"max_wait_ms": 5, "min_bytes": 1, "topics": []}, 2)
    assert len(data) == 4 + 4 + 4 + 4  # replica id, max wait, min bytes, empty topics
    assert decoded["max_bytes"] == 0x7FFFFFFF and decoded["session_epoch"] == -1 and decoded["isolation_level"] == 0


def test_tagged_fields_are_written_only_when_not_default_and_unknown_tags_are_skipped() -> None:
    msg = parse_message("""
    T flex=0+
      a int32
      b int64 tag=3 default=-1
    """)
    plain, decoded = roundtrip(msg, {"a": 1}, 0)
    assert plain == struct.pack(">i", 1) + b"\x00" and decoded == {"a": 1, "b": -1}
    tagged, decoded = roundtrip(msg, {"a": 1, "b": 7}, 0)
    assert tagged == struct.pack(">i", 1) + b"\x01\x03\x08" + struct.pack(">q", 7) and decoded["b"] == 7
    unknown = struct.pack(">i", 1) + b"\x01\x09\x02ab"
    assert msg.decode(Reader(unknown), 0) == {"a": 1, "b": -1}


@pytest.mark.parametrize("data, why", [
    (b"\x00", "needed"),                                  # truncated int16
    (b"\xff\xfe", "string length -2"),                    # negative length other than -1
    (b"\x00\x02\xff\xfe", "not UTF-8"),                   # bad UTF-8
])
def test_malformed_strings(data: bytes, why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        Reader(data).string()


def test_malformed_varints_arrays_and_nulls() -> None:
    with pytest.raises(MalformedError, match="longer than 5 bytes"):
        Reader(b"\xff" * 6).uvarint()
    with pytest.raises(MalformedError, match="longer than the frame"):
        Reader(struct.pack(">i", 1000) + b"\x00").array_length(False)
    with pytest.raises(MalformedError, match="null where none is allowed"):
        m.JOIN_GROUP_REQUEST.decode(Reader(b"\xff\xff"), 0)  # group_id null


def test_uvarints_at_a_readers_bounds() -> None:
    """uvarint's one-byte fast path keeps to the reader's end, not the buffer's."""
    r = Reader(b"\x05\x96\x01\x7f", end=3)
    assert (r.uvarint(), r.uvarint(), r.pos) == (5, 150, 3)
    with pytest.raises(MalformedError, match="needed"):
        r.uvarint()  # the 0x7f past ``end`` is not read
    with pytest.raises(MalformedError, match="needed"):
        Reader(memoryview(b"\x80")).uvarint()  # cut inside a varint


def test_request_header_and_response_frame() -> None:
    frame = request_frame(m.FETCH, 12, {"topics": []}, correlation_id=42, client_id="me")
    header, spec, reader = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (1, 12, 42, "me")
    assert spec.name == "Fetch" and spec.request.decode(reader, 12)["topics"] == []
    with pytest.raises(MalformedError, match="unknown API key 77"):
        parse_request_header(struct.pack(">hhi", 77, 0, 1) + b"\xff\xff")
    with pytest.raises(MalformedError, match="outside the versions"):
        parse_request_header(struct.pack(">hhi", m.FETCH, 40, 1) + b"\xff\xff")
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []}
    for version, header_version in ((12, 1), (11, 0)):
        w = Writer()
        m.FETCH_RESPONSE.encode(w, body, version)
        tagged = b"\x00" if header_version else b""
        assert response_frame(7, header_version, m.FETCH_RESPONSE, body, version) == \
            struct.pack(">ii", 4 + len(tagged) + len(w.buf), 7) + tagged + w.buf
    assert m.APIS[m.API_VERSIONS].response_header_version(3) == 0  # always v0


def test_offset_commit_records_use_kafkas_layout() -> None:
    key = encode_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)
    value = encode_value(CommittedOffset(10, -1, "m", 99))
    assert value == b"\x00\x03" + struct.pack(">qi", 10, -1) + b"\x00\x01m" + struct.pack(">q", 99)
    assert decode_record(key, value) == (("g", "t", 3), CommittedOffset(10, -1, "m", 99))
    assert decode_record(key, None) == (("g", "t", 3), None)
    assert decode_record(b"\x00\x02\x00\x01g", b"") is None  # group metadata: skipped


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Java's famous Integer.MIN_VALUE hash
    assert partition_for("polygenelubricants", 7) == 0  # Kafka's Utils.abs masks the sign bit
