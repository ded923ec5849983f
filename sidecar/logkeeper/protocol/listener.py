"""The Kafka protocol listener: sockets, connection limits, request dispatch, start and stop.

Per connection (connection.py: framing with bounded memory, TLS, SASL), requests are handled
one at a time in arrival order and answered in that order (Kafka does the same: a connection is
muted while its request is in flight), so pipelined requests queue in the socket. For each frame:

1. the 4-byte size: below the header's 8 bytes or above ``kafka.socket.request.max.bytes`` ->
   the connection is closed before anything is allocated; otherwise the size is taken from the
   memory pool of ``kafka.queued.max.request.bytes`` (the socket waits unread until it fits);
2. the header: an unknown API key or a version outside the schemas -> closed (as Kafka does);
   ApiVersions of a too-new version is answered at v0 with UNSUPPORTED_VERSION and the
   supported versions, so that the client can retry with one of them;
3. the body decodes, or the connection is closed; nothing of a malformed request is acted
   upon, so a bad frame harms no data (bytes after a decoded body are ignored, as Kafka does);
4. a version outside the advertised range but inside the schemas is handled by its handler,
   which answers UNSUPPORTED_VERSION (Produce below 3, Fetch below 4);
5. the handler's answer is encoded at the request's version; acks-0 produces get none.

Limits (README "Kafka listener"): ``kafka.max.connections`` (one more is closed as soon as it is
accepted; Kafka instead leaves it in the accept backlog, which under a flood only moves the
pile-up into the kernel and leaves clients hanging), ``kafka.connections.max.idle.ms`` (a sweeper
closes idle connections), the two byte limits above. Why 128 connections: a sidecar serves the
containers of its own pod, a client opens 2-4 connections, so 128 is ten times a busy pod; a
plaintext connection costs little, a TLS one far more (asyncio's 256 KiB TLS read buffer), so the
limit bounds what a flood adds (the measured costs: bench/results/kafka_flood.md). With the pool of 100 MiB
the listener's worst case is the process at rest + ~100 MiB of frames + their decoded copies.

A handler's unexpected exception (a bug) is logged with its traceback and closes the connection.
Start: the offsets log is loaded, the SASL users file and TLS certificate are read (a failure
stops the start), then the sockets listen. Stop: the sockets close, requests in flight get the
drain time, then their connections are cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import KafkaStorageError
from ..server.config import SidecarSettings, is_loopback_host, parse_listen_address
from ..server.service import Sidecar
from . import handlers_admin, handlers_data, handlers_group, handlers_meta, handlers_sasl
from . import messages as m
from .connection import Answer, Endpoint, KafkaConnection
from .context import AppendNotifier, BrokerContext, CloseConnection, Connection
from .framing import answer_frame, parse_request_header, peek_header, response_frame
from .groups import GroupCoordinator
from .listener_metrics import ListenerFigures
from .memory_pool import FrameCache, MemoryPool
from .offsets_store import CommittedOffset, OffsetsStore
from .sasl import UsersFile
from .tls import ServerTls

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
    # only reached outside a SASL exchange (connection.py serves it during one): a PLAINTEXT or SSL
    # listener, or a connection already authenticated; Kafka answers ILLEGAL_SASL_STATE there too
    m.SASL_HANDSHAKE: handlers_sasl.handshake_out_of_state,
    m.SASL_AUTHENTICATE: handlers_sasl.authenticate_out_of_state,
}
if set(HANDLERS) != set(m.APIS):  # every advertised API has its handler
    raise RuntimeError(f"handlers and schemas disagree: {sorted(set(HANDLERS) ^ set(m.APIS))}")


def cluster_id_for(log_dirs: list[str]) -> str:
    """A stable cluster id (22 characters, as Kafka's) derived from the node's log directories."""
    digest = hashlib.sha256("\n".join(sorted(log_dirs)).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


async def handle_frame(ctx: BrokerContext, describe: Callable[[str | None], Connection],
                       frame: bytes | memoryview) -> Answer | None:
    """The response frame of one request frame; None when none is due (acks 0). ``describe``: the
    connection as the handlers see it, given the request's client id. Raises MalformedError (close
    the connection) or CloseConnection."""
    key, version, correlation_id = peek_header(frame)
    if key == m.API_VERSIONS and version > m.APIS[key].schema_max:
        return response_frame(correlation_id, 0, m.API_VERSIONS_RESPONSE, handlers_meta.api_versions_body(35), 0)
    started = time.perf_counter()
    header, spec, reader = parse_request_header(frame)
    request = spec.request.decode(reader, version)
    if reader.remaining():  # Kafka ignores them too (librdkafka's admin Metadata v12 sends 3 more)
        log.debug("%s v%d: %d bytes after the request ignored", spec.name, version, reader.remaining())
    response = await HANDLERS[key](ctx, describe(header.client_id), request, version)
    answer = None if response is None else \
        answer_frame(correlation_id, spec.response_header_version(version), spec.response, response, version)
    ctx.figures.request_done(key, time.perf_counter() - started)
    return answer


class KafkaListener:
    def __init__(self, sidecar: Sidecar, settings: SidecarSettings, pool: Any) -> None:
        self.sidecar = sidecar
        self.settings = settings
        self.pool = pool
        self.servers: list[asyncio.Server] = []
        self.addresses: list[tuple[str, int]] = []
        self.connections: set[KafkaConnection] = set()
        self.memory = MemoryPool(settings.kafka_queued_max_request_bytes)
        # TLS fetch answers' records (plaintext ones are sent from their files: handlers_data.py)
        self.responses = MemoryPool(settings.kafka_queued_max_response_bytes)
        self.frames = FrameCache()  # the buffers of the frames the pool's bytes are claimed for
        self.users: UsersFile | None = None
        self.figures = ListenerFigures()  # what the listener and its handlers count (listener_metrics.py)
        self.stopping = False
        self.ctx: BrokerContext | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._last_refusal_log = 0.0

    async def start(self) -> list[tuple[str, int]]:
        """Load the committed offsets, then listen. Call once the Sidecar is ready."""
        settings = self.settings
        listeners = settings.kafka_listeners
        protocols = {p for p, _h, _port in listeners}
        # secrets first: a listener that cannot authenticate must not open at all
        tls = ServerTls(settings) if protocols & {"SSL", "SASL_SSL"} else None
        if protocols & {"SASL_PLAINTEXT", "SASL_SSL"}:
            self.users = UsersFile(settings.kafka_sasl_users_file)
            count = await asyncio.to_thread(self.users.ensure_usable)
            log.info("kafka: SASL %s with %d users", ", ".join(settings.kafka_sasl_enabled_mechanisms), count)
        loop = asyncio.get_running_loop()
        notifier = AppendNotifier(loop)
        sidecar = self.sidecar
        sidecar.append_listeners.append(lambda tp: notifier.notify([tp]))
        ctx = BrokerContext(sidecar, self.settings, self.pool, notifier,
                            cluster_id_for(sidecar.config.log_dirs),
                            self.responses, self.figures)
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
        # an advertised entry may carry its listener's protocol, as in Kafka's advertised.listeners
        advertised = [parse_listen_address(a.partition("://")[2] or a)
                      for a in self.settings.kafka_advertised_listeners]
        for i, (protocol, host, port) in enumerate(listeners):
            endpoint = Endpoint(protocol, tls if protocol in ("SSL", "SASL_SSL") else None,
                                advertised[i] if advertised else None)
            if protocol == "PLAINTEXT" and not is_loopback_host(host):
                log.warning("kafka: %s:%d is a PLAINTEXT listener off loopback: anyone who reaches it can "
                            "produce, read and delete topics", host, port)
            server = await loop.create_server(lambda e=endpoint: KafkaConnection(self, e),  # type: ignore[misc]
                                              host, port, reuse_address=True)
            self.servers.append(server)
            for sock in server.sockets:
                addr = sock.getsockname()
                self.addresses.append((str(addr[0]), int(addr[1])))
        self._sweeper = asyncio.ensure_future(self._sweep())
        return self.addresses

    # ------------------------------------------------------------------ connections
    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def admit(self, conn: KafkaConnection) -> bool:
        """Count a new connection in, or refuse it (kafka.max.connections, or stopping)."""
        if self.stopping or self.ctx is None:
            return False
        if len(self.connections) >= self.settings.kafka_max_connections:
            refused = self.figures.event("refused")
            now = time.monotonic()
            if now - self._last_refusal_log >= 1.0:  # at most a line a second under a flood
                self._last_refusal_log = now
                log.warning("kafka: refusing connections (from %s and %d so far): %d open, max.connections is %d",
                            conn.peer_host, refused, len(self.connections),
                            self.settings.kafka_max_connections)
            return False
        sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.connections.add(conn)
        return True

    def forget(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)

    def users_or_fail(self) -> UsersFile:
        if self.users is None:
            raise CloseConnection("SASL is not configured on this listener")
        return self.users

    async def handle_frame(self, conn: KafkaConnection, frame: bytes | memoryview) -> Answer | None:
        ctx = self.ctx
        if ctx is None:
            raise CloseConnection("the listener is stopping")
        try:
            return await handle_frame(ctx, conn.described, frame)
        except handlers_data.CloseConnection as e:
            raise CloseConnection(str(e)) from None

    async def _sweep(self) -> None:
        """Close idle connections (connections.max.idle.ms) and ones that did not authenticate in time;
        unmap the frames kept for reuse when none was used since the last round."""
        idle_s = self.settings.kafka_connections_max_idle_ms / 1000.0
        period = min(max(idle_s / 10, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            self.frames.trim()
            now = time.monotonic()
            for conn in list(self.connections):
                why = conn.is_idle(now, idle_s)
                if why is not None:
                    self.figures.event("idle_closed")
                    log.info("kafka: closing the connection from %s: %s", conn.peer_host, why)
                    conn.close()

    async def stop(self, drain_s: float) -> None:
        self.stopping = True
        for server in self.servers:
            server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        tasks = {c.task for c in self.connections if c.task is not None}
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=min(drain_s, 0.5))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=drain_s)
        for conn in list(self.connections):
            conn.close()
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except (TimeoutError, RuntimeError):
                pass
        self.frames.clear()
        if self.ctx is not None and self.ctx.coordinator is not None:
            await self.ctx.coordinator.stop()
