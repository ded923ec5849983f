"""Bounds on what HTTP clients can make the sidecar hold: connections, idle time, body reads.

- ``LimitedSite``: a TCP site whose connections are counted; past ``http.max.connections`` (on
  each listen address: a flood of the pod IP leaves loopback its own) a new connection is
  answered ``503 too_many_connections`` and closed before aiohttp sees it, so a connection flood
  costs a socket and a few hundred bytes each, not a request handler with its buffers (Kafka's
  max.connections, which stops accepting instead: HTTP clients get a reason).
- idle connections (and connections still sending their request line and headers, the slowloris
  case) are closed by aiohttp's keep-alive timer, set from ``http.connections.max.idle.ms``
  (sidecar_main.py passes it to the runner);
- ``read_body``: a request body read whole, bounded in size (413) and in time
  (``http.body.timeout.ms``: 408, and the connection is closed); a client that hangs up
  mid-body gets one log line and a 400 ``client_disconnected`` (which it will not read), never
  a 500 with a traceback.
- ``BodyBudget``: the bytes of all request bodies held at once, across connections, are bounded
  by ``http.queued.max.request.bytes`` (Kafka's queued.max.request.bytes): a body reserves its
  declared length before a byte of it is read, and waits (within its body timeout) while the
  budget is spent; its bytes stay reserved until its request is answered (``budget_middleware``).
  Without it, http.max.connections bodies of max.request.bytes each could be held at once.
  Reserving the whole declared length up front (not chunk by chunk) means no body holds part of
  the budget while it waits for the rest, so slow bodies cannot starve each other into a stall;
  a chunked body (no length) reserves as it reads.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from .errors import ApiError

log = logging.getLogger(__name__)

# An HTTP answer written straight to the socket of a connection over the limit (no parser, no
# handler: the request is never read).
_REFUSED_BODY = (b'{"error":"too_many_connections","detail":"the sidecar has http.max.connections '
                 b'connections open; retry later"}')
REFUSED_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
                    + str(len(_REFUSED_BODY)).encode() + b"\r\n\r\n" + _REFUSED_BODY)
# aiohttp stops reading a connection once this many bytes wait, unread, in its request's stream
# (twice this: its high-water mark). Its default (64 KiB) let a body that the handler does not
# read yet (waiting for the BodyBudget) hold several times more per connection than 32 KiB does
# (bench/results/design_figures.md: http limits, read buffer). The rest waits in the kernel.
READ_BUFSIZE = 32 * 1024
REFUSAL_LOG_INTERVAL_S = 10.0  # a flood is logged once per interval, with the count, not once per connection

# the codes whose connection is closed after the answer: its request body was not read to the end
CLOSING_CODES = frozenset({"request_timeout", "client_disconnected"})


class ConnectionLimit:
    """How many connections are open; ``refused`` counts the ones turned away since start."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0
        self._unlogged = 0
        self._logged_at = float("-inf")

    def note_refusal(self) -> None:
        self.refused += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning("HTTP: %d connection(s) refused with 503: %d open, http.max.connections is %d",
                        self._unlogged, self.open, self.limit)
            self._unlogged, self._logged_at = 0, now


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSED_RESPONSE)
        transport.close()  # after the buffered answer is written; whatever the client sends is dropped


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, wrapped so that its end releases its slot.

    Only forwards what a transport calls on its protocol; aiohttp keeps using the transport it
    is given in ``connection_made``.
    """

    def __init__(self, inner: asyncio.Protocol, limit: ConnectionLimit) -> None:
        self.inner = inner
        self.limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.limit.open -= 1
        self.inner.connection_lost(exc)


class LimitedSite(web.BaseSite):
    """``web.TCPSite`` with a bound on open connections (counted when accepted: exact, even when
    many connections are accepted in one turn of the loop)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limit: ConnectionLimit,
                 backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self.limit = limit

    @property
    def name(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    def _factory(self) -> Callable[[], asyncio.Protocol]:
        server = self._runner.server
        assert server is not None
        limit = self.limit

        def make() -> asyncio.Protocol:
            if limit.open >= limit.limit:
                limit.note_refusal()
                return _Refused()
            limit.open += 1
            return _Counted(server(), limit)
        return make

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._factory(), self._host, self._port, backlog=self._backlog,
                                                reuse_address=True)


class BodyBudget:
    """Bytes of request bodies held at once (all connections); one event loop, no lock needed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._freed = asyncio.Event()

    async def reserve(self, n: int) -> int:
        """Wait until ``n`` bytes fit (a body larger than the whole budget waits for all of it:
        it is then alone, never refused); the amount reserved."""
        n = min(n, self.limit)
        while self.used + n > self.limit:
            self._freed.clear()
            await self._freed.wait()
        self.used += n
        self.peak = max(self.peak, self.used)
        return n

    def release(self, n: int) -> None:
        if n:
            self.used -= n
            self._freed.set()


RESERVED: web.RequestKey[list[int]] = web.RequestKey("logkeeper_body_reserved", list)  # amounts to release


def budget_middleware(budget: BodyBudget) -> Middleware:
    """Releases what the request's body reserved once it is answered (the body is no longer held)."""
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        amounts: list[int] = []
        request[RESERVED] = amounts
        try:
            return await handler(request)
        finally:
            budget.release(sum(amounts))
    return middleware


async def read_body(request: web.Request, max_bytes: int, timeout_s: float, setting: str,
                    budget: BodyBudget | None = None) -> bytes:
    """The whole body, at most ``max_bytes`` (413 beyond, named by ``setting``), within
    ``timeout_s`` (408; waiting for the budget counts). A hang-up mid-body is a 400
    ``client_disconnected`` with one log line."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise ApiError(413, "payload_too_large", f"the request body is larger than {setting} ({max_bytes} bytes)")
    reserved = request.get(RESERVED) if budget is not None else None
    chunks: list[bytes] = []
    got = held = 0
    try:
        async with asyncio.timeout(timeout_s):
            if budget is not None and reserved is not None and declared:
                held = await budget.reserve(declared)
                reserved.append(held)
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                got += len(chunk)
                if got > max_bytes:
                    raise ApiError(413, "payload_too_large",
                                   f"the request body is larger than {setting} ({max_bytes} bytes)")
                if budget is not None and reserved is not None and declared is None and got > held:
                    # chunked (no declared length): reserve as it comes
                    more = await budget.reserve(got - held)
                    reserved.append(more)
                    held += more
                chunks.append(chunk)
    except BaseException:
        # Drop what was read before anything keeps this frame: aiohttp stores the hang-up's
        # exception in the request's stream, and its traceback holds this frame, chunks
        # included, until a full garbage collection: the RSS grew flood after flood
        # (bench/results/design_figures.md: http limits, hung-up bodies).
        chunks.clear()
        if budget is not None and reserved is not None:
            budget.release(sum(reserved))  # nothing of the body is held any more
            reserved.clear()
        raise _body_error(request, got, declared, timeout_s) from None
    return b"".join(chunks)


def _body_error(request: web.Request, got: int, declared: int | None, timeout_s: float) -> BaseException:
    """The answer to a body read that failed (the exception being handled)."""
    exc = sys.exc_info()[1]
    assert exc is not None
    if isinstance(exc, (TimeoutError, ConnectionError, HttpProcessingError)):
        # replaced by the answer below; aiohttp keeps a hang-up's exception in the request's
        # stream: without its traceback, stream, request and frames are freed when the connection
        # is, not at the next full garbage collection (bench/results/design_figures.md: http
        # limits, tracebacks)
        exc.__traceback__ = None
    if isinstance(exc, TimeoutError):
        log.warning("%s %s: the body did not arrive within http.body.timeout.ms (%d of %s bytes in %.1f s): "
                    "answered 408, connection closed", request.method, request.path, got, _of(declared), timeout_s)
        return ApiError(408, "request_timeout", f"the request body did not arrive within http.body.timeout.ms "
                                                f"({round(timeout_s * 1000)} ms)")
    if isinstance(exc, ConnectionError):
        log.warning("%s %s: the client hung up after %d of %s body bytes: answered 400 (nothing was done)",
                    request.method, request.path, got, _of(declared))
        return ApiError(400, "client_disconnected", "the connection was closed before the body was complete")
    if isinstance(exc, HttpProcessingError):  # a malformed chunked encoding, a body shorter than its length
        return ApiError(400, "bad_request", f"the request body is malformed: {exc.message or exc}")
    return exc  # ApiError (413), cancellation: as they are


def _of(declared: Any) -> str:
    return str(declared) if declared is not None else "?"
