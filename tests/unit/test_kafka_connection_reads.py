"""protocol/connection.py's reads: where the socket's bytes go (the listener's tests in
tests/interop run the whole connection against a real sidecar)."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

from logkeeper.protocol.connection import DIRECT_READ, READ_AHEAD, SPILL_PAUSE, Endpoint, KafkaConnection


def connection() -> KafkaConnection:
    listener: Any = SimpleNamespace(settings=SimpleNamespace(kafka_sasl_enabled_mechanisms=["PLAIN"]))
    conn = KafkaConnection(listener, Endpoint("PLAINTEXT", None, None))
    conn.transport = SimpleNamespace(pause_reading=lambda: None, resume_reading=lambda: None)
    return conn


def deliver(conn: KafkaConnection, data: bytes) -> int:
    """What a transport does with ``data`` arrived on the socket: one read into get_buffer's buffer."""
    buf = conn.get_buffer(-1)
    n = min(len(buf), len(data))
    buf[:n] = data[:n]
    conn.buffer_updated(n)
    return n


def test_a_small_request_and_its_size_arrive_in_one_read() -> None:
    """Regression: the 4-byte size was read alone, then the body: two reads (and two passes of the
    event loop) for every small request, a fetch or a heartbeat."""
    conn = connection()
    body = b"r" * 100
    following = struct.pack(">i", 50) + b"n" * 10  # a pipelined next request's first bytes
    assert deliver(conn, struct.pack(">i", len(body)) + body + following) == 4 + len(body) + len(following)
    assert bytes(conn._head) == struct.pack(">i", 100)  # the size, as before
    frame = memoryview(bytearray(len(body)))
    conn._target(frame)
    assert conn._filled == len(body) and bytes(frame) == body  # the body is there: no second read
    conn._target(memoryview(conn._head))
    assert bytes(conn._head) == struct.pack(">i", 50) and bytes(conn._spill) == b"n" * 10


def test_a_big_frame_is_read_into_its_own_buffer() -> None:
    """The rest of a frame of DIRECT_READ bytes or more goes straight into the frame's buffer."""
    conn = connection()
    frame = memoryview(bytearray(3 * DIRECT_READ))
    conn._target(frame)
    assert conn.get_buffer(-1).obj is frame.obj  # type: ignore[attr-defined]
    deliver(conn, b"a" * (2 * DIRECT_READ + 10))
    assert conn._filled == 2 * DIRECT_READ + 10
    rest = b"b" * (DIRECT_READ - 10) + b"next"  # less than DIRECT_READ left: read with what follows
    assert deliver(conn, rest) == len(rest)
    assert conn._filled == len(frame) and bytes(frame[-3:]) == b"bbb" and bytes(conn._spill) == b"next"


def test_a_pipelined_requests_rest_and_the_next_ones_start_arrive_in_one_read() -> None:
    """Regression: the rest of a 16 KiB request (the Java producer's default batch) was read
    straight into its frame and nothing past it, so the next request's size took a read of its
    own: two reads and two passes of the event loop a request for a producer that pipelines."""
    conn = connection()
    frame = memoryview(bytearray(16 * 1024))
    conn._target(frame)
    deliver(conn, b"a" * 4000)
    following = struct.pack(">i", 16 * 1024) + b"n" * (2 * SPILL_PAUSE)  # the next request, pipelined
    taken = deliver(conn, b"b" * (len(frame) - 4000) + following)
    assert conn._filled == len(frame) and bytes(frame[-1:]) == b"b"
    assert taken == len(frame) - 4000 + READ_AHEAD  # the next one's size and first bytes came too
    assert len(conn._spill) < SPILL_PAUSE  # and one read alone does not mute the connection
    conn._target(memoryview(conn._head))
    assert bytes(conn._head) == struct.pack(">i", 16 * 1024)
