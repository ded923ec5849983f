"""server/record_json.py: JSON produce bodies into a batch, fetched batches into JSON."""

from __future__ import annotations

import base64
import json

import pytest

from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from logkeeper.records.reader import read_records
from logkeeper.server.record_json import (
    MAX_RECORDS,
    RecordFormatError,
    UnrepresentableError,
    parse_produce_body,
    records_to_json,
)

NOW = 1_700_000_000_000


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_utf8_records_with_nulls_and_headers() -> None:
    parsed = parse_produce_body(body({"records": [
        {"key": "k1", "value": "héllo", "headers": [{"key": "h", "value": "x"}, {"key": "n", "value": None}]},
        {"key": None, "value": None, "timestamp": 5},
    ]}), NOW)
    assert parsed.codec == Codec.NONE
    recs = read_records(parsed.batch())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (0, NOW, b"k1", "héllo".encode(), (("h", b"x"), ("n", None))),
        (1, 5, None, None, ()),
    ]


def test_base64_and_compression() -> None:
    raw = bytes(range(256))
    parsed = parse_produce_body(body({"encoding": "base64", "compression": "zstd", "records": [
        {"key": base64.b64encode(b"\x00\xff").decode(), "value": base64.b64encode(raw).decode()}]}), NOW)
    assert parsed.codec == Codec.ZSTD
    (rec,) = read_records(parsed.batch())
    assert rec.key == b"\x00\xff" and rec.value == raw


@pytest.mark.parametrize(("doc", "message"), [
    ("not json", "not valid JSON"),
    ([], "body: must be an object"),
    ({}, "records: must be a non-empty array"),
    ({"records": []}, "records: must be a non-empty array"),
    ({"records": [{}], "extra": 1}, "unknown field 'extra'"),
    ({"records": [{"val": "x"}]}, "records[0]: unknown field 'val'"),
    ({"records": [1]}, "records[0]: must be an object"),
    ({"records": [{"key": 5}]}, "records[0].key: must be a string or null"),
    ({"records": [{"value": ["x"]}]}, "records[0].value: must be a string or null"),
    ({"records": [{"timestamp": -2}]}, "records[0].timestamp"),
    ({"records": [{"timestamp": 1.5}]}, "records[0].timestamp"),
    ({"records": [{"timestamp": True}]}, "records[0].timestamp"),
    ({"records": [{"timestamp": 1 << 63}]}, "records[0].timestamp"),
    ({"records": [{"headers": {"a": "b"}}]}, "records[0].headers: must be an array"),
    ({"records": [{"headers": [{"key": 1}]}]}, "records[0].headers[0].key: must be a string"),
    ({"records": [{"headers": [{"value": "x"}]}]}, "records[0].headers[0].key: must be a string"),
    ({"records": [{"value": "\ud800"}]}, "records[0].value: not encodable as UTF-8"),
    ({"encoding": "base64", "records": [{"value": "!!"}]}, "records[0].value: not valid base64"),
    ({"encoding": "base64", "records": [{"value": "é"}]}, "records[0].value: not valid base64"),
    ({"encoding": "latin-1", "records": [{}]}, "encoding: must be one of"),
    ({"compression": "brotli", "records": [{}]}, "compression: must be one of"),
])
def test_malformed_bodies_name_the_path(doc: object, message: str) -> None:
    raw = doc.encode() if isinstance(doc, str) else body(doc)
    with pytest.raises(RecordFormatError) as e:
        parse_produce_body(raw, NOW)
    assert message in str(e.value)


def test_record_count_is_bounded() -> None:
    with pytest.raises(RecordFormatError, match=f"at most {MAX_RECORDS}"):
        parse_produce_body(body({"records": [{}] * (MAX_RECORDS + 1)}), NOW)


def test_deeply_nested_json_is_a_clear_error() -> None:
    with pytest.raises(RecordFormatError):
        parse_produce_body(b"[" * 100_000 + b"]" * 100_000, NOW)


def test_fetched_records_skip_lower_offsets_and_control_batches() -> None:
    first = build_batch([Record(10, NOW, b"a", b"1"), Record(11, NOW, None, None, (("h", None),))],
                        producer_id=7, producer_epoch=0, is_transactional=True)
    data = first \
        + build_marker_batch(ControlType.COMMIT, offset=12, timestamp=NOW, producer_id=7, producer_epoch=0) \
        + build_batch([Record(13, NOW, b"\xff", b"v")])
    out = records_to_json(data, 11, "base64")
    assert [r["offset"] for r in out] == [11, 13]
    assert out[0] == {"offset": 11, "timestamp": NOW, "key": None, "value": None,
                      "headers": [{"key": "h", "value": None}]}
    assert out[1]["key"] == base64.b64encode(b"\xff").decode()
    assert records_to_json(first, 0, "utf-8")[0]["value"] == "1"
    with pytest.raises(UnrepresentableError, match="offset 13: its key is not valid UTF-8"):
        records_to_json(data, 0, "utf-8")
    assert records_to_json(b"", 0, "utf-8") == []
