"""Handlers of ApiVersions, Metadata, FindCoordinator and InitProducerId.

One node is the whole cluster: it leads every partition (replicas and ISR are itself, leader
epoch -1 as a broker without epochs reports), coordinates every group, and is the controller.
The address it gives clients is the one their connection reached, or the configured
``kafka.advertised.listeners`` entry of that listener. Topics are never created by Metadata
(no auto-creation): an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.

Producer ids (InitProducerId without a transactional id): ``wall-clock ms * 1024`` at start,
then one more per request, so ids stay unique across restarts unless more than 1024 a
millisecond are handed out for long or the clock steps back. A request that names its current
id and epoch (v3+, after a fatal sequence error) gets the same id with the next epoch.
"""

from __future__ import annotations

import threading
from typing import Any

from ..log import names
from . import error_codes as ec
from .context import BrokerContext, Connection
from .messages import APIS
from .offsets_store import OFFSETS_TOPIC

INT16_MAX = 0x7FFF


class ProducerIdAllocator:
    def __init__(self, now_ms: int) -> None:
        self._next = now_ms * 1024
        self._lock = threading.Lock()

    def allocate(self) -> int:
        with self._lock:
            pid = self._next
            self._next += 1
            return pid


def api_versions_body(error_code: int = ec.NONE) -> dict[str, Any]:
    return {"error_code": error_code, "throttle_time_ms": 0,
            "api_keys": [{"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
                         for s in sorted(APIS.values(), key=lambda s: s.key)]}


async def api_versions(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    return api_versions_body()


def _broker(ctx: BrokerContext, conn: Connection) -> dict[str, Any]:
    host, port = conn.broker_address
    return {"node_id": ctx.node_id, "host": host, "port": port, "rack": None}


def _topic_partitions(ctx: BrokerContext, topics: list[str] | None) -> list[tuple[str, int, list[tuple[int, int]]]]:
    """(topic, error code, [(partition, its error code)]) for the named topics, or for every topic
    when None. A partition whose log directory is offline is listed with KAFKA_STORAGE_ERROR (as
    Kafka lists an offline replica), so clients keep its number and do not see the topic shrink."""
    sidecar = ctx.sidecar
    try:
        known = sidecar.topic_names()
    except Exception as e:
        code = ec.NOT_LEADER_OR_FOLLOWER if ec.code_of(e) == ec.NOT_LEADER_OR_FOLLOWER else ec.code_of(e)
        return [(t, code, []) for t in topics or []]
    out: list[tuple[str, int, list[tuple[int, int]]]] = []
    offline = set(sidecar.manager.offline_partitions())
    for topic in known if topics is None else topics:
        if topics is not None:
            try:
                names.validate_topic(topic)
            except ValueError:
                out.append((topic, ec.INVALID_TOPIC_EXCEPTION, []))
                continue
            if topic not in known:
                out.append((topic, ec.UNKNOWN_TOPIC_OR_PARTITION, []))
                continue
        logs = sidecar.manager.logs_by_topic(topic)
        parts = [(lg.topic_partition.partition, ec.NONE) for lg in logs]
        parts += [(tp.partition, ec.KAFKA_STORAGE_ERROR) for tp in offline if tp.topic == topic]
        out.append((topic, ec.NONE, sorted(parts)))
    return out


async def metadata(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    requested = req["topics"]
    if requested is not None and version == 0 and not requested:
        requested = None  # v0: an empty list means every topic
    wanted = None if requested is None else [t["name"] for t in requested if t["name"] is not None]
    found = await ctx.run(_topic_partitions, ctx, wanted)
    node = ctx.node_id
    topics = [{"error_code": code, "name": topic, "is_internal": topic == OFFSETS_TOPIC,
               "partitions": [{"error_code": code_p, "partition_index": p, "leader_id": node, "leader_epoch": -1,
                               "replica_nodes": [node], "isr_nodes": [node] if code_p == ec.NONE else [],
                               "offline_replicas": [] if code_p == ec.NONE else [node]}
                              for p, code_p in parts]}
              for topic, code, parts in found]
    return {"throttle_time_ms": 0, "brokers": [_broker(ctx, conn)], "cluster_id": ctx.cluster_id,
            "controller_id": node, "topics": topics}


def _coordinator_entry(ctx: BrokerContext, conn: Connection, key: str, key_type: int) -> dict[str, Any]:
    host, port = conn.broker_address
    if key_type != 0:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ec.COORDINATOR_NOT_AVAILABLE,
                "error_message": "logkeeper has no transaction coordinator: transactions are not supported"}
    if ctx.coordinator_unavailable is not None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ec.COORDINATOR_NOT_AVAILABLE,
                "error_message": ctx.coordinator_unavailable}
    if not key:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ec.INVALID_GROUP_ID,
                "error_message": "the group id is empty"}
    return {"key": key, "node_id": ctx.node_id, "host": host, "port": port, "error_code": ec.NONE,
            "error_message": None}


async def find_coordinator(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                           version: int) -> dict[str, Any]:
    if version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [_coordinator_entry(ctx, conn, k, req["key_type"])
                                                        for k in req["coordinator_keys"]]}
    entry = _coordinator_entry(ctx, conn, req["key"], req["key_type"])
    return {"throttle_time_ms": 0, **{k: v for k, v in entry.items() if k != "key"}}


async def init_producer_id(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                           version: int) -> dict[str, Any]:
    if req["transactional_id"] is not None:
        return {"throttle_time_ms": 0, "error_code": ec.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    pid, epoch = req["producer_id"], req["producer_epoch"]
    if pid >= 0 and 0 <= epoch < INT16_MAX - 1:
        return {"throttle_time_ms": 0, "error_code": ec.NONE, "producer_id": pid, "producer_epoch": epoch + 1}
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "producer_id": ctx.producer_ids.allocate(),
            "producer_epoch": 0}

