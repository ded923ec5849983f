"""A raw Kafka protocol client for tests: requests encoded with logkeeper's own schemas."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from logkeeper.protocol.messages import APIS, FETCH, PRODUCE
from logkeeper.protocol.primitives import Reader, Writer
from logkeeper.records.builder import Record, build_batch
from logkeeper.server.process import SidecarProcess


def request_frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int = 1,
                  client_id: str = "test") -> bytes:
    spec = APIS[api_key]
    w = Writer()
    w.int16(api_key)
    w.int16(version)
    w.int32(correlation_id)
    w.string(client_id)
    if spec.request_header_version(version) >= 2:
        w.uvarint(0)
    spec.request.encode(w, body, version)
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def fetch_body(topic: str, max_bytes: int, *, offset: int = 0, min_bytes: int = 1) -> dict[str, Any]:
    """A Fetch (v11) of partition 0 of ``topic`` from ``offset``: ``max_bytes`` for the request and
    the partition, answered at once (max_wait_ms 0), sessionless."""
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": max_bytes}]}]}


def fetch_frame(topic: str, max_bytes: int, correlation_id: int = 1) -> bytes:
    """``fetch_body``'s request frame, to send raw (a client that does not read its answer)."""
    return request_frame(FETCH, 11, fetch_body(topic, max_bytes), correlation_id)


def fetched_records(frame: bytes, correlation_id: int = 1) -> bytes:
    """The records of the first partition of a ``fetch_frame`` answer."""
    records: bytes = decode_response(FETCH, 11, frame, correlation_id)["responses"][0]["partitions"][0]["records"]
    return records


def fill_partition(bootstrap: str, topic: str, batches: int) -> None:
    """Append ``batches`` batches of 500 records of 1,000 bytes (500,000 bytes of values each) to
    partition 0 of ``topic``."""
    now = int(time.time() * 1000)
    produce_batches(bootstrap, topic, (build_batch([Record(j, now, None, bytes([i % 256]) * 1000) for j in range(500)])
                                       for i in range(batches)))


def produce_batches(bootstrap: str, topic: str, batches: Iterable[bytes]) -> None:
    """Append each batch as it is to partition 0 of ``topic`` (Produce v8, acks 1), one request a
    batch: the batches are the caller's, not a client's linger's; a refused produce fails, naming
    its answer."""
    wire = WireClient(bootstrap)
    try:
        for batch in batches:
            answer = wire.call(PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 10_000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            if answer["responses"][0]["partition_responses"][0]["error_code"] != 0:
                raise AssertionError(f"produce to {topic}-0 refused: {answer}")
    finally:
        wire.close()


class WireClient:
    def __init__(self, bootstrap: str, timeout_s: float = 10.0, *, rcvbuf: int | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        """``rcvbuf``: SO_RCVBUF set before connecting (the window is agreed at the handshake),
        to keep the server's answers waiting in its send buffer. ``tls``: over TLS, with this context."""
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            if rcvbuf is not None:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout_s)
            self.sock.connect((host, int(port)))
            if tls is not None:
                self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        except BaseException:
            self.sock.close()
            raise
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """One response frame's body; None when the server closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        return self._read(struct.unpack(">i", head)[0])

    def _read(self, n: int) -> bytes | None:
        out = bytearray(n)  # filled in place: a big frame is not copied once per chunk
        view, got = memoryview(out), 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except ConnectionResetError:
                return None
            if k == 0:
                return None
            got += k
        return bytes(out)

    def is_closed_by_server(self) -> bool:
        return self.read_frame() is None

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        self.send_raw(request_frame(api_key, version, body, self.correlation))
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError(f"the server closed the connection on API {api_key} v{version}")
        return decode_response(api_key, version, frame, self.correlation)


def decode_response(api_key: int, version: int, frame: bytes, correlation_id: int) -> dict[str, Any]:
    spec = APIS[api_key]
    r = Reader(frame)
    got = r.int32()
    if got != correlation_id:
        raise AssertionError(f"correlation id {got}, expected {correlation_id}")
    if spec.response_header_version(version) >= 1:
        r.skip_tagged_fields()
    return spec.response.decode(r, version)


def scrape(sidecar: SidecarProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The sidecar's /metrics: (name, sorted labels) -> value."""
    status, _headers, body = sidecar.client.request("GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def event_count(sidecar: SidecarProcess, event: str) -> float:
    """One of the Kafka listener's event counters (listener_metrics.EVENTS) on /metrics."""
    return scrape(sidecar).get((f"logkeeper_kafka_{event}_total", ()), 0.0)
