"""Frames and headers of Kafka requests and responses.

Every message on the connection is a frame: ``size int32`` (bytes after itself) + header + body.

Request header (v1; v2 in an API's flexible versions)::

    api_key         int16
    api_version     int16
    correlation_id  int32
    client_id       string, nullable, always the classic int16-length form
    tagged fields   (v2 only)

Response header (v0; v1 in flexible versions, except ApiVersions which always uses v0)::

    correlation_id  int32
    tagged fields   (v1 only)

A frame shorter than the fixed 8 header bytes or larger than ``kafka.socket.request.max.bytes``, an
unknown API key, a version outside the schemas, or a body that does not decode is malformed:
the listener closes that connection and nothing of the request is acted upon.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..log.file_records import RecordsSlice
from .messages import APIS, ApiSpec
from .primitives import MalformedError, Reader, Writer
from .schema import Message

FRAME_SIZE = struct.Struct(">i")
RESPONSE_HEAD = struct.Struct(">ii")  # frame size, correlation id
RESPONSE_HEAD_FLEXIBLE = struct.Struct(">iiB")  # and an empty tagged-fields section
_FIXED = struct.Struct(">hhi")
MIN_REQUEST_SIZE = _FIXED.size


class RequestHeader(NamedTuple):  # made for every request: a frozen dataclass's __init__ showed in profiles
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, version, correlation id) of a request frame body, before anything is validated."""
    if len(frame) < MIN_REQUEST_SIZE:
        raise MalformedError(f"request of {len(frame)} bytes is shorter than a request header")
    key, version, correlation_id = _FIXED.unpack_from(frame, 0)
    return int(key), int(version), int(correlation_id)


def parse_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, ApiSpec, Reader]:
    """The header, the API's spec and a reader at the body. MalformedError for an unknown key, a
    version the schemas do not cover, or a bad header."""
    key, version, correlation_id = peek_header(frame)
    spec = APIS.get(key)
    if spec is None:
        raise MalformedError(f"unknown API key {key}")
    if not spec.schema_min <= version <= spec.schema_max:
        raise MalformedError(f"{spec.name} version {version} is outside the versions known here "
                             f"({spec.schema_min}-{spec.schema_max})")
    reader = Reader(frame, MIN_REQUEST_SIZE)
    client_id = reader.string()
    if spec.request_header_version(version) >= 2:
        reader.skip_tagged_fields()
    return RequestHeader(key, version, correlation_id, client_id), spec, reader


@dataclass(frozen=True)
class SplicedFrame:
    """A response frame whose records stay in their files: ``head`` is the frame without them, and
    each hole is (the position in ``head`` where a slice's bytes go, the slice); the frame's size
    counts them. The connection writes the pieces of ``head`` and sends each slice with sendfile."""

    head: bytearray
    holes: list[tuple[int, RecordsSlice]]


def answer_frame(correlation_id: int, header_version: int, message: Message, body: dict[str, Any],
                 version: int) -> bytearray | SplicedFrame:
    """``response_frame``, except that records given as RecordsSlice (a fetch's, zero_copy) are
    not copied in: a SplicedFrame then."""
    w = _encode(correlation_id, header_version, message, body, version)
    if not w.holes:
        return w.buf
    return SplicedFrame(w.buf, w.holes)


def response_frame(correlation_id: int, header_version: int, message: Message, body: dict[str, Any],
                   version: int) -> bytearray:
    """The whole response frame (size, header, body), encoded in place into one buffer.

    A fetch answer carries up to fetch.max.bytes of records: encoding the body on its own and then
    joining it behind the size and header copied those records twice more, on the event loop's
    thread. Here the size is patched in once the body is written (bench/ab_kafka_consume.py measures such changes)."""
    w = _encode(correlation_id, header_version, message, body, version)
    if w.holes:
        raise ValueError(f"{message.name}: records to send from their files in a plain response frame")
    return w.buf


def _encode(correlation_id: int, header_version: int, message: Message, body: dict[str, Any], version: int) -> Writer:
    w = Writer()
    w.buf += RESPONSE_HEAD_FLEXIBLE.pack(0, correlation_id, 0) if header_version >= 1 else \
        RESPONSE_HEAD.pack(0, correlation_id)
    message.encode(w, body, version)
    FRAME_SIZE.pack_into(w.buf, 0, len(w.buf) - FRAME_SIZE.size + sum(piece.size for _, piece in w.holes))
    return w
