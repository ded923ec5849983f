"""Records as JSON on the HTTP API: a produce body into one record batch, fetched batches into JSON.

Produce body (``application/json``)::

    {"encoding": "utf-8",          optional: "utf-8" (default) or "base64": how the keys, values
                                   and header values below are written
     "compression": "none",        optional: none, gzip, snappy, lz4 or zstd (the batch's codec)
     "records": [                  1 .. MAX_RECORDS records, in order
       {"key": "user-1",           string or null (null: no key)
        "value": "balance=7",      string or null (null: a tombstone)
        "headers": [{"key": "trace", "value": "abc"}],   optional; header keys are UTF-8 text,
                                   values strings or null
        "timestamp": 1700000000000}]}                    optional, ms; default: now

Fields not listed are errors (a typo must not pass silently); every error names its JSON path
(``records[3].value: ...``). The records become one batch (magic 2, base offset 0, no producer
id), which the log validates and offsets as any client's.

Fetched records (``records`` of a JSON fetch response): ``offset``, ``timestamp``, ``key``,
``value`` and ``headers`` as above, in the encoding the request asked for; records below the
requested offset (in the first batch) and control batches are left out; a JSON fetch reads at
most JSON_FETCH_MAX_BYTES of batches. With ``utf-8``, bytes
that are not valid UTF-8 are an error naming the offset (fetch them with ``base64``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records.builder import Record, build_batch
from ..records.compression import Codec
from ..records.reader import iter_batches

MAX_RECORDS = 50_000
JSON_FETCH_MAX_BYTES = 4 * 1024 * 1024  # a JSON fetch reads at most this much (at least one batch): each
# record becomes Python objects ~10x its size, so a 50 MiB batch fetch as JSON would cost ~0.5 GB
ENCODINGS = ("utf-8", "base64")
COMPRESSIONS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4,
                "zstd": Codec.ZSTD}
BODY_FIELDS = ("encoding", "compression", "records")
RECORD_FIELDS = ("key", "value", "headers", "timestamp")
HEADER_FIELDS = ("key", "value")
INT64_MAX = (1 << 63) - 1


class RecordFormatError(ValueError):
    """A JSON produce body or fetch request that cannot be honoured; the message names the path."""


class UnrepresentableError(RecordFormatError):
    """Fetched bytes that the requested encoding cannot carry (not UTF-8 under encoding=utf-8)."""


@dataclass(frozen=True)
class ProduceBody:
    records: list[Record]
    codec: Codec

    def batch(self) -> bytes:
        return build_batch(self.records, codec=self.codec)


def _decoder(encoding: str) -> Callable[[str, str], bytes]:
    if encoding == "base64":
        def from_base64(text: str, where: str) -> bytes:
            try:
                return base64.b64decode(text.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                raise RecordFormatError(f"{where}: not valid base64") from None
        return from_base64

    def from_utf8(text: str, where: str) -> bytes:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordFormatError(f"{where}: not encodable as UTF-8 (a lone surrogate)") from None
    return from_utf8


def _bytes_or_null(value: Any, where: str, decode: Callable[[str, str], bytes]) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RecordFormatError(f"{where}: must be a string or null, got {type(value).__name__}")
    return decode(value, where)


def _check_fields(obj: Any, allowed: Sequence[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise RecordFormatError(f"{where}: must be an object")
    for key in obj:
        if key not in allowed:
            raise RecordFormatError(f"{where}: unknown field {key!r} (allowed: {', '.join(allowed)})")
    return obj


def _choice(body: dict[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    value = body.get(name, default)
    if value not in allowed:
        raise RecordFormatError(f"{name}: must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def parse_produce_body(raw: bytes, now_ms: int) -> ProduceBody:
    """Parse and check a JSON produce body (RecordFormatError names the first problem)."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise RecordFormatError(f"the body is not valid JSON: {e}") from None
    body = _check_fields(doc, BODY_FIELDS, "body")
    decode = _decoder(_choice(body, "encoding", ENCODINGS, "utf-8"))
    codec = COMPRESSIONS[_choice(body, "compression", tuple(COMPRESSIONS), "none")]
    items = body.get("records")
    if not isinstance(items, list) or not items:
        raise RecordFormatError("records: must be a non-empty array of records")
    if len(items) > MAX_RECORDS:
        raise RecordFormatError(f"records: at most {MAX_RECORDS} records a request, got {len(items)}")
    records = []
    for i, item in enumerate(items):
        where = f"records[{i}]"
        rec = _check_fields(item, RECORD_FIELDS, where)
        ts = rec.get("timestamp", now_ms)
        if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= INT64_MAX:
            raise RecordFormatError(f"{where}.timestamp: must be an integer of milliseconds >= 0, got {ts!r}")
        headers = rec.get("headers", [])
        if not isinstance(headers, list):
            raise RecordFormatError(f"{where}.headers: must be an array of {{key, value}} objects")
        parsed_headers = []
        for j, h in enumerate(headers):
            hwhere = f"{where}.headers[{j}]"
            header = _check_fields(h, HEADER_FIELDS, hwhere)
            hkey = header.get("key")
            if not isinstance(hkey, str):
                raise RecordFormatError(f"{hwhere}.key: must be a string")
            try:
                hkey.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordFormatError(f"{hwhere}.key: not encodable as UTF-8") from None
            parsed_headers.append((hkey, _bytes_or_null(header.get("value"), f"{hwhere}.value", decode)))
        records.append(Record(i, ts, _bytes_or_null(rec.get("key"), f"{where}.key", decode),
                              _bytes_or_null(rec.get("value"), f"{where}.value", decode), tuple(parsed_headers)))
    return ProduceBody(records, codec)


def _encoder(encoding: str) -> Callable[[bytes, str], str]:
    if encoding == "base64":
        return lambda data, _where: base64.b64encode(data).decode("ascii")

    def to_utf8(data: bytes, where: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnrepresentableError(f"{where} is not valid UTF-8: fetch with encoding=base64") from None
    return to_utf8


def records_to_json(data: bytes, from_offset: int, encoding: str) -> list[dict[str, Any]]:
    """The data records of whole batches ``data`` at or above ``from_offset``, as JSON objects."""
    if encoding not in ENCODINGS:
        raise RecordFormatError(f"encoding: must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    encode = _encoder(encoding)
    out: list[dict[str, Any]] = []
    if not data:
        return out
    for batch in iter_batches(np.frombuffer(data, dtype=np.uint8), check_crc=False, strict=False):
        if batch.header.is_control:
            continue
        for r in batch.records:
            if r.offset < from_offset:
                continue
            where = f"the record at offset {r.offset}"
            out.append({
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": None if r.key is None else encode(r.key, f"{where}: its key"),
                "value": None if r.value is None else encode(r.value, f"{where}: its value"),
                "headers": [{"key": k, "value": None if v is None else encode(v, f"{where}: header {k!r}")}
                            for k, v in r.headers],
            })
    return out
