"""What request handlers share: the Sidecar, the I/O thread pool, the node's identity and
addresses, the group coordinator, and the append notifier that wakes long-polling fetches; and
CloseConnection, how the listener, a connection and its SASL exchange end a connection."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..log.names import TopicPartition
from ..server.config import SidecarSettings
from ..server.service import Sidecar
from .listener_metrics import ListenerFigures
from .memory_pool import MemoryPool

T = TypeVar("T")


class CloseConnection(Exception):
    """Close this connection (after writing ``response`` when given); the message is logged."""

    def __init__(self, why: str, response: bytes | bytearray | None = None, level: int = logging.WARNING) -> None:
        super().__init__(why)
        self.response = response
        self.level = level


def _hold_nothing(_size: int) -> None:
    raise RuntimeError("this connection cannot hold answer bytes")


@dataclass(frozen=True)
class Connection:
    """One client connection: where it came from and the address it reached; ``hold(n)`` gives
    the connection ``n`` bytes of the response pool (BrokerContext.responses) to release once its
    answer is written; ``zero_copy``: the connection sends RecordsSlice records with sendfile."""

    peer_host: str
    local_host: str
    local_port: int
    advertised: tuple[str, int] | None  # kafka.advertised.listeners entry of its listener
    client_id: str | None = None
    hold: Callable[[int], None] = _hold_nothing
    zero_copy: bool = False  # a fetch's records may be sent from their files (a plaintext socket)

    @property
    def broker_address(self) -> tuple[str, int]:
        """The host and port this node gives the client in Metadata and FindCoordinator."""
        return self.advertised if self.advertised is not None else (self.local_host, self.local_port)


class AppendNotifier:
    """Wakes fetches waiting for data: ``notify(tps)`` after an append (from any thread);
    ``wait(tps, timeout)`` returns when one of ``tps`` got data, or at the timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def notify(self, tps: list[TopicPartition]) -> None:
        if self._loop.is_closed():
            return
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # an I/O thread's append
            on_loop = False
        if on_loop:  # an append made on the event loop (most produces): no self-pipe write and wake-up
            self._wake(tps)
        else:
            self._loop.call_soon_threadsafe(self._wake, tps)

    def _wake(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            for fut in self._waiters.pop(tp, ()):
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, tps: list[TopicPartition], timeout_s: float) -> None:
        if timeout_s <= 0 or not tps:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]


@dataclass
class BrokerContext:
    sidecar: Sidecar
    settings: SidecarSettings
    pool: Executor
    notifier: AppendNotifier
    cluster_id: str
    responses: MemoryPool  # fetch answers' records held at once (kafka.queued.max.response.bytes)
    figures: ListenerFigures = field(default_factory=ListenerFigures)  # what /metrics shows of the handlers
    coordinator: Any = None  # groups.GroupCoordinator, set once built
    producer_ids: Any = None  # producer_ids.ProducerIdAllocator
    # Why the group coordinator cannot serve, when its offsets partition is offline at start
    # (FindCoordinator then answers COORDINATOR_NOT_AVAILABLE: a client that found no commits
    # would reset its position, so no commits are served rather than none at all)
    coordinator_unavailable: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def node_id(self) -> int:
        return self.settings.kafka_node_id

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking storage call in the I/O pool."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
