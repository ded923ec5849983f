"""Handlers of the consumer-group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups and ListGroups, thin over groups.GroupCoordinator.

OffsetCommit answers UNKNOWN_TOPIC_OR_PARTITION for a partition the sidecar does not have and
OFFSET_METADATA_TOO_LARGE past 4096 bytes of metadata; the rest of the request is committed.
OffsetFetch answers offset -1 for partitions without a commit; a null topic list (v2+) means
every partition the group committed.
"""

from __future__ import annotations

from typing import Any

from ..log.names import TopicPartition
from . import error_codes as ec
from .context import BrokerContext, Connection
from .groups import MAX_METADATA_BYTES, GroupCoordinator
from .offsets_store import CommittedOffset


def _coordinator(ctx: BrokerContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.coordinator
    return coordinator


async def join_group(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    result = await _coordinator(ctx).join(req, version, conn.client_id or "", conn.peer_host)
    return {"throttle_time_ms": 0, "skip_assignment": False, **result}


async def sync_group(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    code, assignment, group = await _coordinator(ctx).sync(req)
    ok = code == ec.NONE and group is not None
    return {"throttle_time_ms": 0, "error_code": code, "assignment": assignment,
            "protocol_type": group.protocol_type if ok and group else None,
            "protocol_name": group.protocol_name if ok and group else None}


async def heartbeat(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": _coordinator(ctx).heartbeat(req)}


async def leave_group(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    if version <= 2:
        results = _coordinator(ctx).leave(req["group_id"], [(req["member_id"], None)])
        return {"throttle_time_ms": 0, "error_code": results[0][2]}
    results = _coordinator(ctx).leave(req["group_id"], [(m["member_id"], m["group_instance_id"])
                                                        for m in req["members"]])
    return {"throttle_time_ms": 0, "error_code": ec.NONE,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": c} for m, i, c in results]}


def _known_partitions(ctx: BrokerContext, tps: list[TopicPartition]) -> set[TopicPartition]:
    manager = ctx.sidecar.manager
    return {tp for tp in tps if manager.get_log(tp) is not None}


async def offset_commit(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    coordinator = _coordinator(ctx)
    group_id = req["group_id"]
    check = coordinator.commit_check(group_id, req["generation_id_or_member_epoch"], req["member_id"])
    wanted = [(t["name"], p) for t in req["topics"] for p in t["partitions"]]
    codes: dict[tuple[str, int], int] = {}
    entries: list[tuple[str, int, CommittedOffset]] = []
    if check != ec.NONE:
        codes = {(t, p["partition_index"]): check for t, p in wanted}
    else:
        known = await ctx.run(_known_partitions, ctx, [TopicPartition(t, p["partition_index"]) for t, p in wanted])
        now = coordinator.wall_ms()
        for topic, p in wanted:
            key = (topic, p["partition_index"])
            metadata = p["committed_metadata"] or ""
            if TopicPartition(*key) not in known:
                codes[key] = ec.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                codes[key] = ec.OFFSET_METADATA_TOO_LARGE
            else:
                ts = p["commit_timestamp"] if p["commit_timestamp"] >= 0 else now
                entries.append((topic, key[1], CommittedOffset(p["committed_offset"], p["committed_leader_epoch"],
                                                               metadata, ts)))
                codes[key] = ec.NONE
        if entries:
            try:
                await coordinator.commit(group_id, entries)
            except Exception as e:
                code = ec.code_of(e)
                if code == ec.UNKNOWN_SERVER_ERROR:
                    raise
                for topic, partition, _ in entries:
                    codes[(topic, partition)] = code
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, p in wanted:
        topics.setdefault(topic, []).append({"partition_index": p["partition_index"],
                                             "error_code": codes[(topic, p["partition_index"])]})
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def _fetch_group(coordinator: GroupCoordinator, group_id: str,
                 topics: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if topics is None:
        committed = coordinator.committed_of_group(group_id)
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t["name"]: list(t["partition_indexes"]) for t in topics}
    out = []
    for topic, partitions in wanted.items():
        parts = []
        for partition in partitions:
            c = coordinator.committed(group_id, topic, partition)
            parts.append({"partition_index": partition, "committed_offset": c.offset if c else -1,
                          "committed_leader_epoch": c.leader_epoch if c else -1,
                          "metadata": c.metadata if c else "", "error_code": ec.NONE})
        out.append({"name": topic, "partitions": parts})
    return out


async def offset_fetch(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    coordinator = _coordinator(ctx)
    if version >= 8:
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": g["group_id"], "topics": _fetch_group(coordinator, g["group_id"], g["topics"]),
             "error_code": ec.NONE} for g in req["groups"]]}
    topics = req["topics"]
    if topics is None and version < 2:
        topics = []
    return {"throttle_time_ms": 0, "topics": _fetch_group(coordinator, req["group_id"], topics),
            "error_code": ec.NONE}


async def describe_groups(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                          version: int) -> dict[str, Any]:
    coordinator = _coordinator(ctx)
    out = []
    for group_id in req["groups"]:
        g = coordinator.groups.get(group_id)
        if g is None:
            out.append({"error_code": ec.NONE, "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                        "protocol_data": "", "members": []})
            continue
        stable = g.state == "Stable"
        out.append({"error_code": ec.NONE, "group_id": group_id, "group_state": g.state,
                    "protocol_type": g.protocol_type or "", "protocol_data": (g.protocol_name or "") if stable else "",
                    "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": "/" + m.client_host,
                                 "member_metadata": m.metadata_for(g.protocol_name or "") if stable else b"",
                                 "member_assignment": m.assignment if stable else b""}
                                for m in g.members.values()]})
    return {"throttle_time_ms": 0, "groups": out}


async def list_groups(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    states = set(req["states_filter"])
    groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "consumer", "group_state": g.state,
               "group_type": "classic"}
              for g in _coordinator(ctx).groups.values() if not states or g.state in states]
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "groups": groups}
