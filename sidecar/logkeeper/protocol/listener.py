"""The Kafka protocol listener: connections, request dispatch, start and stop.

Per connection, requests are handled one at a time in arrival order and answered in that
order (Kafka does the same: a connection is muted while its request is in flight), so
pipelined requests queue in the socket. For each frame (framing.py):

1. the 4-byte size: <= 0, below the header's 8 bytes or above ``kafka.max.request.bytes`` ->
   the connection is closed;
2. the header: an unknown API key or a version outside the schemas -> closed (as Kafka does);
   ApiVersions of a too-new version is answered at v0 with UNSUPPORTED_VERSION and the
   supported versions, so that the client can retry with one of them;
3. the body decodes, or the connection is closed; nothing of a malformed request is acted
   upon, so a bad frame harms no data (bytes after a decoded body are ignored, as Kafka does);
4. a version outside the advertised range but inside the schemas is handled by its handler,
   which answers UNSUPPORTED_VERSION (Produce below 3, Fetch below 4);
5. the handler's answer is encoded at the request's version; acks-0 produces get none.

A handler's unexpected exception (a bug) is logged with its traceback and closes the connection.
Start: the offsets log is loaded, then the sockets listen. Stop: the sockets close, requests in
flight get the drain time, then their connections are cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import KafkaStorageError
from ..server.config import SidecarSettings, parse_listen_address
from ..server.service import Sidecar
from . import handlers_admin, handlers_data, handlers_group, handlers_meta
from . import messages as m
from .context import AppendNotifier, BrokerContext, Connection
from .framing import FRAME_SIZE, MIN_REQUEST_SIZE, parse_request_header, peek_header, response_frame
from .groups import GroupCoordinator
from .offsets_store import CommittedOffset, OffsetsStore
from .primitives import MalformedError, Writer

log = logging.getLogger(__name__)

Handler = Callable[[BrokerContext, Connection, dict[str, Any], int], Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, Handler] = {
    m.API_VERSIONS: handlers_meta.api_versions,
    m.METADATA: handlers_meta.metadata,
    m.FIND_COORDINATOR: handlers_meta.find_coordinator,
    m.INIT_PRODUCER_ID: handlers_meta.init_producer_id,
    m.PRODUCE: handlers_data.produce,
    m.FETCH: handlers_data.fetch,
    m.LIST_OFFSETS: handlers_data.list_offsets,
    m.CREATE_TOPICS: handlers_admin.create_topics,
    m.DELETE_TOPICS: handlers_admin.delete_topics,
    m.DESCRIBE_CONFIGS: handlers_admin.describe_configs,
    m.INCREMENTAL_ALTER_CONFIGS: handlers_admin.incremental_alter_configs,
    m.JOIN_GROUP: handlers_group.join_group,
    m.SYNC_GROUP: handlers_group.sync_group,
    m.HEARTBEAT: handlers_group.heartbeat,
    m.LEAVE_GROUP: handlers_group.leave_group,
    m.OFFSET_COMMIT: handlers_group.offset_commit,
    m.OFFSET_FETCH: handlers_group.offset_fetch,
    m.DESCRIBE_GROUPS: handlers_group.describe_groups,
    m.LIST_GROUPS: handlers_group.list_groups,
}
if set(HANDLERS) != set(m.APIS):  # every advertised API has its handler
    raise RuntimeError(f"handlers and schemas disagree: {sorted(set(HANDLERS) ^ set(m.APIS))}")


def cluster_id_for(log_dirs: list[str]) -> str:
    """A stable cluster id (22 characters, as Kafka's) derived from the node's log directories."""
    digest = hashlib.sha256("\n".join(sorted(log_dirs)).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


async def handle_frame(ctx: BrokerContext, conn: Connection, frame: bytes) -> bytes | None:
    """The response frame of one request frame; None when none is due (acks 0). Raises
    MalformedError (close the connection) or CloseConnection."""
    key, version, correlation_id = peek_header(frame)
    if key == m.API_VERSIONS and version > m.APIS[key].schema_max:
        w = Writer()
        m.API_VERSIONS_RESPONSE.encode(w, handlers_meta.api_versions_body(35), 0)
        return response_frame(correlation_id, 0, w.buf)
    header, spec, reader = parse_request_header(frame)
    request = spec.request.decode(reader, version)
    if reader.remaining():  # Kafka ignores them too (librdkafka's admin Metadata v12 sends 3 more)
        log.debug("%s v%d: %d bytes after the request ignored", spec.name, version, reader.remaining())
    conn = Connection(conn.peer_host, conn.local_host, conn.local_port, conn.advertised, header.client_id)
    response = await HANDLERS[key](ctx, conn, request, version)
    if response is None:
        return None
    w = Writer()
    spec.response.encode(w, response, version)
    return response_frame(correlation_id, spec.response_header_version(version), w.buf)


class KafkaListener:
    def __init__(self, sidecar: Sidecar, settings: SidecarSettings, pool: Any) -> None:
        self.sidecar = sidecar
        self.settings = settings
        self.pool = pool
        self.servers: list[asyncio.Server] = []
        self.addresses: list[tuple[str, int]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self.ctx: BrokerContext | None = None

    async def start(self) -> list[tuple[str, int]]:
        """Load the committed offsets, then listen. Call once the Sidecar is ready."""
        loop = asyncio.get_running_loop()
        notifier = AppendNotifier(loop)
        sidecar = self.sidecar
        sidecar.append_listeners.append(lambda tp: notifier.notify([tp]))
        ctx = BrokerContext(sidecar, self.settings, self.pool, notifier,
                            cluster_id_for(sidecar.config.log_dirs))
        store = OffsetsStore(sidecar, self.settings.offsets_topic_num_partitions)
        try:
            offsets = await ctx.run(store.load)
        except KafkaStorageError as e:
            log.error("the group coordinator is unavailable until a restart: %s", e)
            ctx.coordinator_unavailable = str(e)
            offsets = {}

        async def commit(group: str, entries: list[tuple[str, int, CommittedOffset | None]]) -> None:
            await ctx.run(store.append, group, entries, sidecar.clock_ms())

        ctx.coordinator = GroupCoordinator(
            commit, offsets, initial_delay_ms=self.settings.group_initial_rebalance_delay_ms,
            min_session_ms=self.settings.group_min_session_timeout_ms,
            max_session_ms=self.settings.group_max_session_timeout_ms, wall_ms=sidecar.clock_ms)
        ctx.coordinator.start()
        ctx.producer_ids = handlers_meta.ProducerIdAllocator(sidecar.clock_ms())
        self.ctx = ctx
        advertised = [parse_listen_address(a) for a in self.settings.kafka_advertised_listeners]
        for i, (host, port) in enumerate(self.settings.kafka_addresses):
            adv = advertised[i] if advertised else None
            server = await asyncio.start_server(self._connection_callback(adv), host, port, reuse_address=True)
            self.servers.append(server)
            for sock in server.sockets:
                addr = sock.getsockname()
                self.addresses.append((str(addr[0]), int(addr[1])))
        return self.addresses

    def _connection_callback(self, advertised: tuple[str, int] | None) -> Callable[
            [asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Awaitable[None]:
            return self._on_connection(reader, writer, advertised)
        return accept

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       advertised: tuple[str, int] | None) -> Awaitable[None]:
        task = asyncio.ensure_future(self._serve(reader, writer, advertised))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        return task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     advertised: tuple[str, int] | None) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        local = writer.get_extra_info("sockname") or ("127.0.0.1", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        conn = Connection(str(peer[0]), str(local[0]), int(local[1]), advertised)
        ctx = self.ctx
        limit = self.settings.kafka_max_request_bytes
        try:
            while ctx is not None:
                try:
                    head = await reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection
                size = FRAME_SIZE.unpack(head)[0]
                if size < MIN_REQUEST_SIZE or size > limit:
                    log.warning("kafka: closing the connection from %s: frame of %d bytes (allowed %d-%d)",
                                conn.peer_host, size, MIN_REQUEST_SIZE, limit)
                    return
                try:
                    frame = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    log.warning("kafka: connection from %s closed inside a frame", conn.peer_host)
                    return
                try:
                    response = await handle_frame(ctx, conn, frame)
                except MalformedError as e:
                    log.warning("kafka: closing the connection from %s: malformed request: %s (frame starts %s)",
                                conn.peer_host, e, frame[:96].hex())
                    return
                except handlers_data.CloseConnection as e:
                    log.warning("kafka: closing the connection from %s: %s", conn.peer_host, e)
                    return
                except Exception:
                    log.exception("kafka: closing the connection from %s: request failed", conn.peer_host)
                    return
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError, asyncio.CancelledError):
                pass

    async def stop(self, drain_s: float) -> None:
        for server in self.servers:
            server.close()
        if self._connections:
            _done, pending = await asyncio.wait(set(self._connections), timeout=min(drain_s, 0.5))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=drain_s)
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except (TimeoutError, RuntimeError):
                pass
        if self.ctx is not None and self.ctx.coordinator is not None:
            await self.ctx.coordinator.stop()

