"""One client connection of the Kafka listener: reading frames with bounded memory, TLS, SASL.

Why a buffered protocol and not asyncio streams: ``StreamReader.readexactly(size)`` keeps
reading the socket until ``size`` bytes are buffered, whatever the size, and then copies them;
a client that sent a 100 MiB frame header and 60 MiB of its body held 60 MiB of the sidecar's
heap for as long as it liked (4 such connections added 241 MiB RSS, and glibc kept most of it
after they closed). Here the socket's bytes go straight into the buffer they belong to:

1. the 4-byte size is read (with what follows it, up to 4 KiB: a small request then takes one
   read, see 3.); a size below the 8 header bytes or above
   ``kafka.socket.request.max.bytes`` (512 KiB before SASL authentication, Kafka's
   sasl.server.max.receive.size) closes the connection, nothing allocated;
2. the size is taken from the listener's memory pool (memory_pool.py,
   ``kafka.queued.max.request.bytes``); while it does not fit the socket is not read
   (backpressure: the client waits in TCP);
3. the frame's buffer is taken from the listener's FrameCache (memory_pool.py: an anonymous mmap
   for big frames, whose pages exist only as bytes arrive, reused for the next frames) and filled
   from the socket (a smaller rest with the next request's start: one read a pipelined 16 KiB
   request, not two); bytes past it (a pipelined next request, or one sent while the answer is
   written) are read ahead into a spill of at most 8 KiB, then the socket is paused (the connection
   is muted while its request is handled, as Kafka does, so requests are answered in order).
   Pausing only then spares two epoll_ctl calls a request to a client that waits for its answers;
4. the request is handled, the frame's bytes go back to the pool, the response is written
   (waiting while the transport's buffer is full: a client that does not read its answers goes
   idle, holding no pool memory), and the next size is read. A fetch answer's records on a
   plaintext connection (framing.SplicedFrame) go from the page cache to the socket with
   sendfile, each slice through a descriptor of its own, as Kafka's broker sends them: an answer
   its client does not read holds no memory. A slice whose file was closed or cut before it was
   sent closes the connection (the frame's size promised its bytes); the client fetches again.

So a connection costs its objects (their measured size: bench/results/kafka_flood.md) and at
most 8 KiB of read-ahead; the frames of all connections together never exceed the pool.

TLS: the TCP connection is accepted (and counted against ``kafka.max.connections``) first, then
upgraded with ``loop.start_tls``, so a flood of handshakes cannot pass the connection limit; a
handshake gets ``TLS_HANDSHAKE_TIMEOUT_S``.

SASL (SASL_PLAINTEXT, SASL_SSL): until authenticated, only ApiVersions, SaslHandshake (v1) and
SaslAuthenticate are served, anything else closes the connection (Kafka does the same); the
exchange (sasl_exchange.py) must end within ``AUTH_TIMEOUT_S`` of the connection. A failed
authentication is answered SASL_AUTHENTICATION_FAILED after a delay (Kafka's
connection.failed.authentication.delay.ms) and the connection is closed. Sessions do not expire
(session_lifetime_ms 0: no re-authentication). Tokens and passwords are never logged.

Idle: a connection with no complete request and no response for ``kafka.connections.max.idle.ms``
is closed by the listener's sweeper; a request being handled or waiting for pool memory is not
idle, but a frame that arrives too slowly is (so a trickling client cannot hold pool memory).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import IO, Any, Protocol, cast

from ..server.config import SidecarSettings
from . import messages as m
from .context import BrokerContext, CloseConnection, Connection
from .framing import FRAME_SIZE, MIN_REQUEST_SIZE, SplicedFrame, peek_header
from .listener_metrics import ListenerFigures
from .memory_pool import FrameCache, MemoryPool
from .primitives import MalformedError
from .sasl import UsersFile
from .sasl_exchange import SaslState, sasl_step
from .tls import ServerTls

log = logging.getLogger(__name__)

SASL_MAX_RECEIVE_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size
AUTH_TIMEOUT_S = 10.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
TLS_WRITE_CHUNK = 256 * 1024  # an answer is written over TLS this much at a time (_write_tls)
SPILL_PAUSE = 4 * 1024  # bytes read ahead of the current buffer before the socket is paused
READ_AHEAD = SPILL_PAUSE - 4  # a read's bytes past its target: under SPILL_PAUSE, it never mutes alone
# A frame's rest this big is read straight into its buffer (a 1 MiB produce: no copy); a smaller
# one through the scratch buffer, with up to READ_AHEAD of the next request.
DIRECT_READ = 64 * 1024
# One scratch buffer for every connection's reads: a transport calls get_buffer, fills the
# buffer and calls buffer_updated in one go on the loop's thread, and buffer_updated copies it out
# at once, so no connection needs its own (one each made a flood of connections cost far more
# memory: bench/results/design_figures.md: connection, scratch buffer).
_SCRATCH = memoryview(bytearray(DIRECT_READ + READ_AHEAD))
_EMPTY = memoryview(b"")  # the target between a finished frame and the next size: bytes read then spill
SPILL_MAX = 1024 * 1024  # a transport that delivers this much past a pause is broken: close
SASL_KEYS = (m.SASL_HANDSHAKE, m.SASL_AUTHENTICATE)


@dataclass(frozen=True)
class Endpoint:
    """What one kafka.listen address serves: its security protocol, TLS context and advertised address."""

    protocol: str
    tls: ServerTls | None  # SSL and SASL_SSL: the certificate, loaded again when it changes
    advertised: tuple[str, int] | None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


Answer = bytes | bytearray | SplicedFrame


class _Descriptor:
    """What ``loop.sendfile`` uses of a file: its descriptor (RecordsSlice.open's, of its own)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class ConnectionHost(Protocol):
    """What a connection uses of its listener (listener.py's KafkaListener, which makes the
    connections): a protocol, so that this module does not import the listener back."""

    settings: SidecarSettings
    memory: MemoryPool
    responses: MemoryPool
    frames: FrameCache
    figures: ListenerFigures
    stopping: bool
    ctx: BrokerContext | None

    def admit(self, conn: KafkaConnection) -> bool: ...

    def forget(self, conn: KafkaConnection) -> None: ...

    def users_or_fail(self) -> UsersFile: ...

    async def handle_frame(self, conn: KafkaConnection, frame: bytes | memoryview) -> Answer | None: ...


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, listener: ConnectionHost, endpoint: Endpoint) -> None:
        self.listener = listener
        self.endpoint = endpoint
        self.transport: Any = None
        self.peer_host = "?"
        self.local: tuple[str, int] = ("127.0.0.1", 0)
        self.sasl = SaslState(listener.settings.kafka_sasl_enabled_mechanisms) if endpoint.sasl else None
        self.last_active = time.monotonic()
        self.busy = False  # a request in hand or waiting for pool memory: never idle
        self.task: asyncio.Task[None] | None = None
        self._head = bytearray(4)
        self._view: memoryview = memoryview(self._head)
        self._filled = 0
        self._spill = bytearray()
        self._direct = False  # get_buffer gave the current buffer itself, not _SCRATCH
        self._reading_ready = endpoint.tls is None  # False until start_tls hands over its transport
        self._waiter: asyncio.Future[None] | None = None  # _fill's wait for bytes or the end (_wake)
        self._closed = False
        self._eof = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._held = 0  # bytes of the listener's response pool the answer being made holds
        self._sending: asyncio.Future[int] | None = None  # a slice's sendfile, cancelled by close()
        self._described: Connection | None = None  # what described() gave last

    # ------------------------------------------------------------------ protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("127.0.0.1", 0)
        self.peer_host, self.local = str(peer[0]), (str(local[0]), int(local[1]))
        if not self.listener.admit(self):
            self._closed = True
            transport.close()  # nothing was read or allocated
            return
        self.transport.pause_reading()  # _fill reads when a buffer is ready
        self.task = asyncio.ensure_future(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        left = len(self._view) - self._filled
        self._direct = left >= DIRECT_READ
        if self._direct:  # a big rest of a frame: straight into its buffer
            return self._view[self._filled:]
        # A smaller rest (a frame's size, a small request, a big one's end) comes through the scratch
        # buffer with what follows: one read and one pass of the event loop for a small request, not
        # two (its size, then its body), and a pipelined one's rest with the next one's start.
        return _SCRATCH[:left + READ_AHEAD]

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            self._filled += nbytes
        else:
            taken = min(nbytes, len(self._view) - self._filled)
            if taken:
                self._view[self._filled:self._filled + taken] = _SCRATCH[:taken]
                self._filled += taken
            self._spill += _SCRATCH[taken:nbytes]
            if len(self._spill) > SPILL_MAX:
                self._abort("more than 1 MiB past a frame while muted")
                return
            if len(self._spill) >= SPILL_PAUSE:
                self._pause()  # muted: a pipelining client waits in TCP until its turn
        self._wake()

    def eof_received(self) -> bool:
        # the client may have half-closed after its last request: it still gets its answer, then the
        # connection closes (TLS has no half-close: asyncio closes it whatever we answer)
        self._eof = True
        self._wake()
        return self.endpoint.tls is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self.listener.forget(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ------------------------------------------------------------------ reading
    def _pause(self) -> None:
        if self._reading_ready and self.transport is not None and not self._closed:
            self.transport.pause_reading()

    def _target(self, view: memoryview) -> None:
        """The next bytes of the socket go to ``view``; bytes spilled earlier come first."""
        self._view, self._filled = view, 0
        if self._spill:
            n = min(len(self._spill), len(view))
            with memoryview(self._spill) as spilled:  # released before the del below
                view[:n] = spilled[:n]
            del self._spill[:n]
            self._filled = n

    async def _fill(self) -> bool:
        """Wait until the target is full; False when the connection ended first."""
        while self._filled < len(self._view):
            if self._closed or self._eof:
                return False
            # a bare future, not an asyncio.Event, whose bookkeeping showed in a profile of small produces
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            if self._reading_ready:
                self.transport.resume_reading()
            await waiter
        return True

    def _wake(self) -> None:  # bytes arrived, or the connection ended: _fill looks again
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _abort(self, why: str) -> None:
        log.warning("kafka: closing the connection from %s: %s", self.peer_host, why)
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wake()
            if self._sending is not None:
                # closing the transport drops the sendfile's wait for the socket: it would never end
                self._sending.cancel()
            if self.transport is not None:
                self.transport.close()

    # ------------------------------------------------------------------ writing
    def hold_answer_bytes(self, size: int) -> None:
        """``size`` bytes of the response pool, taken for the answer being made, go back once it
        is written (or the connection fails): until then the answer's bytes are in memory."""
        self._held += size

    def _release_held(self) -> None:
        held, self._held = self._held, 0
        if held:
            self.listener.responses.release(held)

    async def write(self, data: bytes | bytearray) -> None:
        self.transport.write(data)
        await self._drain()

    async def _drain(self) -> None:
        """Wait while the transport holds more than its high-water mark of unsent bytes."""
        if self._write_paused and not self._closed:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    # ------------------------------------------------------------------ the connection's life
    async def _run(self) -> None:
        try:
            if self.endpoint.tls is not None and not await self._start_tls():
                return
            while await self._next_request():
                pass
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("kafka: closing the connection from %s: request failed", self.peer_host)
        finally:
            self.close()
            # asyncio's TLS layer does not call connection_lost when the handshake fails: forget here too
            self.listener.forget(self)

    async def _start_tls(self) -> bool:
        loop = asyncio.get_running_loop()
        if self.endpoint.tls is None:
            return True
        context = self.endpoint.tls.context()
        try:
            transport = await loop.start_tls(self.transport, self, context, server_side=True,
                                             ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as e:
            log.info("kafka: TLS handshake with %s failed: %s", self.peer_host, e)
            # the handshake's future keeps this exception, whose traceback keeps start_tls' frame, which
            # keeps the future and the TLS layer (a 256 KiB buffer): a cycle only the full collector
            # frees, so a flood of failed handshakes piled up hundreds of MiB; cut it here
            e.__traceback__ = None
            return False
        if transport is None or self._closed:
            return False
        self.transport, self._reading_ready = transport, True
        if len(self._spill) >= SPILL_PAUSE:
            transport.pause_reading()
        return True

    async def _next_request(self) -> bool:
        """Read, handle and answer one request; False when the connection is to close."""
        try:
            return await self._serve_request()
        finally:
            self._release_held()  # the answer is written, or will never be

    async def _serve_request(self) -> bool:
        listener = self.listener
        if not await self._fill():
            return False
        size = FRAME_SIZE.unpack(self._head)[0]
        authenticated = self.sasl is None or self.sasl.authenticated
        limit = listener.settings.kafka_socket_request_max_bytes
        if not authenticated:
            limit = min(limit, SASL_MAX_RECEIVE_BYTES)
        if size < MIN_REQUEST_SIZE or size > limit:
            listener.figures.event("oversized", size > limit)
            self._abort(f"frame of {size} bytes (allowed {MIN_REQUEST_SIZE}-{limit})")
            return False
        pool = listener.memory
        self.busy = True
        try:
            if not pool.try_acquire(size):
                listener.figures.event("pool_waits")
                await pool.acquire(size)
        finally:
            self.busy = False
        response: Answer | None = None
        closing: CloseConnection | None = None
        view: memoryview | None = None
        try:
            view = listener.frames.frame(size)
            self._target(view)
            if not await self._fill():
                if not listener.stopping:
                    log.warning("kafka: connection from %s closed inside a frame", self.peer_host)
                return False
            self.busy = True
            try:
                response = await self._handle(view)
            except CloseConnection as e:
                closing = e
            except MalformedError as e:
                self._log_malformed(view, e)
                return False
        finally:
            # the frame's memory goes back before the answer is written: a client that does not read
            # its answers holds no pool memory, and is not busy (it goes idle and is closed)
            self.busy = False
            if view is not None:
                self._view = _EMPTY  # the socket's next bytes spill until the next frame is targeted
                listener.frames.release(view)
            pool.release(size)
        if closing is not None:
            if closing.response is not None:
                await self.write(closing.response)
            log.log(closing.level, "kafka: closing the connection from %s: %s", self.peer_host, closing)
            return False
        if isinstance(response, SplicedFrame):
            if not await self._send_spliced(response):
                return False
        elif response is not None and self.endpoint.tls is not None:
            await self._write_tls(memoryview(response))
        elif response is not None:
            # A view: asyncio (3.11) copies what the socket did not take into its own buffer, and
            # slicing the frame itself would copy it once more. The frame is dropped before the
            # wait, so an answer its client is slow to read is in memory once, not twice. Each
            # answer goes at once (why not several together: design_figures.md, connection).
            self.transport.write(memoryview(response))
            del response
            await self._drain()
        self.last_active = time.monotonic()
        self._target(memoryview(self._head))
        return not self._closed

    async def _write_tls(self, answer: memoryview) -> None:
        """Write an answer over TLS a chunk at a time. asyncio's TLS layer encrypts all it is given
        and hands it to the socket's transport, which keeps what the socket does not take: one
        write of a 40 MiB answer to a client that does not read put all of it there and never
        paused the writes, so the answer counted as written and its response pool bytes went back
        (another fetch then read 4 MiB more while 16 MiB still waited; test_kafka_limits). A
        chunk at a time, the writes pause once a chunk waits, and the pool is held until then."""
        for start in range(0, len(answer), TLS_WRITE_CHUNK):
            self.transport.write(answer[start:start + TLS_WRITE_CHUNK])
            await self._drain()
            if self._closed:
                return

    async def _send_spliced(self, frame: SplicedFrame) -> bool:
        """Write ``frame``: its own bytes, and each slice from its file with sendfile (asyncio's
        waits for the transport's buffer to empty first, so the bytes go out in order). False
        when the connection is to close."""
        loop = asyncio.get_running_loop()
        head, start = memoryview(frame.head), 0
        for at, piece in frame.holes:
            if at > start:
                self.transport.write(head[start:at])
                start = at
            try:
                fd = piece.open()
            except OSError as e:
                self._abort(f"a fetch answer's segment {piece.records.path} went before it was sent: {e}")
                return False
            try:
                source = cast(IO[bytes], _Descriptor(fd))
                self._sending = asyncio.ensure_future(
                    loop.sendfile(self.transport, source, piece.position, piece.size, fallback=False))
                sent = await self._sending
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed and task is not None and not task.cancelling():
                    return False  # close() stopped the send
                raise
            except RuntimeError:  # the transport closed meanwhile
                return False
            finally:
                self._sending = None
                os.close(fd)
            if sent != piece.size:
                self._abort(f"{piece.records.path}: {piece.size - sent} bytes at {piece.position + sent} were cut "
                            f"before they were sent")
                return False
        if start < len(head):
            self.transport.write(head[start:])
        await self._drain()
        return True

    def _log_malformed(self, frame: memoryview, err: MalformedError) -> None:
        key = peek_header(frame)[0] if len(frame) >= MIN_REQUEST_SIZE else -1
        if key in SASL_KEYS or (self.sasl is not None and not self.sasl.authenticated):
            # the frame may carry a password: its bytes are not logged
            log.warning("kafka: closing the connection from %s: malformed request: %s", self.peer_host, err)
        else:
            log.warning("kafka: closing the connection from %s: malformed request: %s (frame starts %s)",
                        self.peer_host, err, bytes(frame[:96]).hex())

    async def _handle(self, frame: memoryview) -> Answer | None:
        sasl = self.sasl
        if sasl is not None and not sasl.authenticated:
            key = peek_header(frame)[0]
            if key in SASL_KEYS:
                return await sasl_step(frame, sasl, self.listener, self.peer_host)
            if key != m.API_VERSIONS:
                raise CloseConnection(f"{m.APIS[key].name if key in m.APIS else f'API {key}'} request before "
                                      f"SASL authentication")
        return await self.listener.handle_frame(self, frame)

    def described(self, client_id: str | None) -> Connection:
        """The connection as the handlers see it, for a request of ``client_id``: made once and
        again only when the client id changes (a client keeps one), not for every request."""
        about = self._described
        if about is None or about.client_id != client_id:
            about = self._described = Connection(
                self.peer_host, self.local[0], self.local[1], self.endpoint.advertised, client_id,
                hold=self.hold_answer_bytes, zero_copy=self.endpoint.tls is None)
        return about

    def is_idle(self, now: float, idle_s: float) -> str | None:
        """Why the sweeper should close this connection now, or None."""
        if self._closed:
            return None
        if self.sasl is not None and not self.sasl.authenticated and now - self.sasl.started > AUTH_TIMEOUT_S:
            return f"not authenticated within {AUTH_TIMEOUT_S:.0f} s"
        if not self.busy and now - self.last_active > idle_s:
            return f"idle for more than {idle_s * 1000:.0f} ms (connections.max.idle.ms)"
        return None
