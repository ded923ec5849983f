"""The group coordinator of the classic consumer-group protocol, on the event loop.

States (Kafka's): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance when a member joins, leaves, changes its protocols or misses its session.

- JoinGroup: a member without an id gets one; from v4 it is answered MEMBER_ID_REQUIRED at once
  and joins again with it (so a lost answer leaves no ghost member). A join puts the group in
  PreparingRebalance; the rebalance completes when every known member has joined, or at the
  largest rebalance timeout (members that did not rejoin are removed). A new group first waits
  ``group.initial.rebalance.delay.ms`` for more members. On completion the generation goes up,
  the protocol all members support with the most first-choice votes is chosen, the leader (kept
  when still a member, else the first) gets every member's metadata, and all answers go out.
  A known member joining a Stable group with unchanged protocols (not the leader) just gets the
  current generation back.
- SyncGroup: the leader's assignments make the group Stable and answer every waiting member.
- Heartbeat: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (rejoin) or NONE; it
  renews the member's session. A member silent for its session timeout is removed.
- LeaveGroup (v0-2 one member, v3+ a list): the members go, the others rebalance.
- OffsetCommit: from the current generation's members, or with generation -1 and no member id
  while the group has no members (a consumer that assigns partitions itself); written to the
  offsets log (offsets_store.py) before it is acknowledged. OffsetFetch answers from memory.

Group membership itself is not persisted (Kafka writes it to __consumer_offsets too): after a
restart members get UNKNOWN_MEMBER_ID and join again; their committed offsets are kept.
Static membership (group.instance.id) is accepted: a join with a known instance id takes over
that member's place. Offsets do not expire (Kafka: offsets.retention.minutes).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import error_codes as ec
from .offsets_store import CommittedOffset, OffsetKey

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes
EXPIRY_CHECK_S = 0.25

JoinResult = dict[str, Any]
Committer = Callable[[str, list[tuple[str, int, CommittedOffset | None]]], Any]  # async: writes the offsets log


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[int, bytes]] | None = None
    deadline: float = 0.0

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # ids given by MEMBER_ID_REQUIRED -> deadline
    not_before: float = 0.0  # the initial delay of a new group's first rebalance
    timer: asyncio.TimerHandle | None = None  # the rebalance timeout
    delay_timer: asyncio.TimerHandle | None = None  # the end of the initial delay


class GroupCoordinator:
    def __init__(self, commit: Committer, offsets: dict[OffsetKey, CommittedOffset], *,
                 initial_delay_ms: int, min_session_ms: int, max_session_ms: int,
                 clock: Callable[[], float] = time.monotonic, wall_ms: Callable[[], int] | None = None) -> None:
        self._commit = commit
        self.offsets = offsets
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_delay_ms / 1000.0
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.clock = clock
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._expiry: asyncio.Task[None] | None = None
        for group_id, _topic, _partition in offsets:
            self.groups.setdefault(group_id, Group(group_id))

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            try:
                await self._expiry
            except asyncio.CancelledError:
                pass
        for g in self.groups.values():
            if g.timer is not None:
                g.timer.cancel()
            for m in g.members.values():
                self._answer_join(m, _join_error(ec.NOT_LEADER_OR_FOLLOWER, m.member_id))
                self._answer_sync(m, ec.REBALANCE_IN_PROGRESS, b"")

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = self.clock()
            for g in list(self.groups.values()):
                expired = [m for m in g.members.values() if m.join_future is None and m.deadline < now]
                for member_id in [i for i, deadline in g.pending.items() if deadline < now]:
                    del g.pending[member_id]
                    self._maybe_complete_join(g)
                for m in expired:
                    log.info("group %s: member %s missed its session timeout (%d ms)", g.group_id, m.member_id,
                             m.session_timeout_ms)
                    self._remove_member(g, m)
                if expired:
                    self._after_removal(g)

    # ------------------------------------------------------------------ helpers
    def _touch(self, m: Member) -> None:
        m.deadline = self.clock() + m.session_timeout_ms / 1000.0

    @staticmethod
    def _answer_join(m: Member, result: JoinResult) -> None:
        fut, m.join_future = m.join_future, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    @staticmethod
    def _answer_sync(m: Member, code: int, assignment: bytes) -> None:
        fut, m.sync_future = m.sync_future, None
        if fut is not None and not fut.done():
            fut.set_result((code, assignment))

    def _remove_member(self, g: Group, m: Member) -> None:
        g.members.pop(m.member_id, None)
        self._answer_join(m, _join_error(ec.UNKNOWN_MEMBER_ID, m.member_id))
        self._answer_sync(m, ec.UNKNOWN_MEMBER_ID, b"")
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _after_removal(self, g: Group) -> None:
        if g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g)
        elif g.state == PREPARING:
            self._maybe_complete_join(g)
        if not g.members and g.state != PREPARING:
            g.state = EMPTY

    def _prepare_rebalance(self, g: Group) -> None:
        if g.state == COMPLETING:
            for m in g.members.values():
                self._answer_sync(m, ec.REBALANCE_IN_PROGRESS, b"")
        delay = self.initial_delay_s if g.state == EMPTY else 0.0
        g.state = PREPARING
        g.not_before = self.clock() + delay
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000.0
        for timer in (g.timer, g.delay_timer):
            if timer is not None:
                timer.cancel()
        loop = asyncio.get_running_loop()
        g.timer = loop.call_later(delay + timeout, self._rebalance_timeout, g)
        g.delay_timer = loop.call_later(delay, self._maybe_complete_join, g) if delay > 0 else None

    def _rebalance_timeout(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        for m in [m for m in g.members.values() if m.join_future is None]:
            log.info("group %s: member %s did not rejoin in time", g.group_id, m.member_id)
            self._remove_member(g, m)
        g.pending.clear()
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        if self.clock() < g.not_before:
            return
        if all(m.join_future is not None for m in g.members.values()) and not g.pending:
            self._complete_join(g)

    def _select_protocol(self, g: Group) -> str | None:
        members = list(g.members.values())
        common = set.intersection(*[{name for name, _ in m.protocols} for m in members]) if members else set()
        if not common:
            return None
        votes: dict[str, int] = {}
        for m in members:
            first = next(name for name, _ in m.protocols if name in common)
            votes[first] = votes.get(first, 0) + 1
        order = [name for name, _ in members[0].protocols if name in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def _complete_join(self, g: Group) -> None:
        for timer in (g.timer, g.delay_timer):
            if timer is not None:
                timer.cancel()
        g.timer = g.delay_timer = None
        for m in [m for m in g.members.values() if m.join_future is None]:
            self._remove_member(g, m)
        g.generation += 1
        if not g.members:
            g.state, g.protocol_name, g.leader_id = EMPTY, None, None
            return
        g.protocol_name = self._select_protocol(g)
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.state = COMPLETING
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", g.group_id, g.generation,
                 len(g.members), g.protocol_name, g.leader_id)
        for m in g.members.values():
            self._touch(m)
            self._answer_join(m, self._join_result(g, m))

    def _join_result(self, g: Group, m: Member) -> JoinResult:
        is_leader = m.member_id == g.leader_id
        members = [{"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                    "metadata": o.metadata_for(g.protocol_name or "")}
                   for o in g.members.values()] if is_leader else []
        return {"error_code": ec.NONE, "generation_id": g.generation, "protocol_type": g.protocol_type,
                "protocol_name": g.protocol_name, "leader": g.leader_id or "", "member_id": m.member_id,
                "members": members}

    # ------------------------------------------------------------------ JoinGroup
    async def join(self, req: dict[str, Any], version: int, client_id: str, client_host: str) -> JoinResult:
        group_id, member_id = req["group_id"], req["member_id"]
        session_ms = req["session_timeout_ms"]
        rebalance_ms = req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] >= 0 else session_ms
        protocols = [(p["name"], p["metadata"]) for p in req["protocols"]]
        if not group_id:
            return _join_error(ec.INVALID_GROUP_ID, member_id)
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            return _join_error(ec.INVALID_SESSION_TIMEOUT, member_id)
        g = self.groups.setdefault(group_id, Group(group_id))
        others = [{n for n, _ in o.protocols} for i, o in g.members.items() if i != member_id]
        if not protocols or (others and (req["protocol_type"] != g.protocol_type or
                                         not {n for n, _ in protocols}.intersection(*others))):
            return _join_error(ec.INCONSISTENT_GROUP_PROTOCOL, member_id)
        instance_id = req["group_instance_id"]
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                old = next((m for m in g.members.values() if m.group_instance_id == instance_id), None)
                if old is not None:  # a static member restarting takes over its place
                    self._remove_member(g, old)
            elif version >= 4:
                g.pending[member_id] = self.clock() + session_ms / 1000.0
                return _join_error(ec.MEMBER_ID_REQUIRED, member_id)
        elif member_id in g.pending:
            del g.pending[member_id]
        elif member_id not in g.members:
            return _join_error(ec.UNKNOWN_MEMBER_ID, member_id)
        m = g.members.get(member_id)
        if m is not None and g.state in (STABLE, COMPLETING) and m.protocols == protocols and \
                (g.state == COMPLETING or member_id != g.leader_id):
            self._touch(m)
            return self._join_result(g, m)
        if m is None:
            m = Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                       req["protocol_type"], protocols)
            g.members[member_id] = m
        else:
            m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        if g.protocol_type is None or len(g.members) == 1:
            g.protocol_type = req["protocol_type"]
        if m.join_future is not None:
            self._answer_join(m, _join_error(ec.REBALANCE_IN_PROGRESS, member_id))  # replaced by this join
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m.join_future = fut
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    # ------------------------------------------------------------------ SyncGroup
    async def sync(self, req: dict[str, Any]) -> tuple[int, bytes, Group | None]:
        g = self.groups.get(req["group_id"])
        m = g.members.get(req["member_id"]) if g is not None else None
        if g is None or m is None:
            return ec.UNKNOWN_MEMBER_ID, b"", g
        if req["generation_id"] != g.generation:
            return ec.ILLEGAL_GENERATION, b"", g
        if (req["protocol_type"] is not None and req["protocol_type"] != g.protocol_type) or \
                (req["protocol_name"] is not None and req["protocol_name"] != g.protocol_name):
            return ec.INCONSISTENT_GROUP_PROTOCOL, b"", g
        if g.state == PREPARING:
            return ec.REBALANCE_IN_PROGRESS, b"", g
        self._touch(m)
        if g.state == STABLE:
            return ec.NONE, m.assignment, g
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        if m.member_id == g.leader_id:
            given = {a["member_id"]: a["assignment"] for a in req["assignments"]}
            g.state = STABLE
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
                self._touch(other)
                self._answer_sync(other, ec.NONE, other.assignment)
        code, assignment = await fut
        return code, assignment, g

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup
    def heartbeat(self, req: dict[str, Any]) -> int:
        g = self.groups.get(req["group_id"])
        m = g.members.get(req["member_id"]) if g is not None else None
        if g is None or m is None:
            return ec.UNKNOWN_MEMBER_ID
        if req["generation_id"] != g.generation:
            return ec.ILLEGAL_GENERATION
        self._touch(m)
        return ec.REBALANCE_IN_PROGRESS if g.state == PREPARING else ec.NONE

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None, int]]:
        members = list(members)
        g = self.groups.get(group_id)
        out = []
        removed = False
        for member_id, instance_id in members:
            m = g.members.get(member_id) if g is not None else None
            if m is None and g is not None and instance_id is not None:
                m = next((x for x in g.members.values() if x.group_instance_id == instance_id), None)
            if g is None or m is None:
                out.append((member_id, instance_id, ec.UNKNOWN_MEMBER_ID))
                continue
            log.info("group %s: member %s left", group_id, m.member_id)
            self._remove_member(g, m)
            removed = True
            out.append((m.member_id, instance_id, ec.NONE))
        if g is not None:
            for member_id, _ in members:
                g.pending.pop(member_id, None)
            if removed:
                self._after_removal(g)
        return out

    # ------------------------------------------------------------------ offsets
    def commit_check(self, group_id: str, generation: int, member_id: str) -> int:
        if not group_id:
            return ec.INVALID_GROUP_ID
        g = self.groups.get(group_id)
        if g is None or (generation < 0 and not member_id and not g.members):
            return ec.NONE
        m = g.members.get(member_id)
        if m is None:
            return ec.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ec.ILLEGAL_GENERATION
        if g.state in (PREPARING, COMPLETING):
            return ec.REBALANCE_IN_PROGRESS
        self._touch(m)
        return ec.NONE

    async def commit(self, group_id: str, entries: list[tuple[str, int, CommittedOffset]]) -> None:
        await self._commit(group_id, list(entries))
        self.groups.setdefault(group_id, Group(group_id))
        for topic, partition, c in entries:
            self.offsets[(group_id, topic, partition)] = c

    def committed(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.offsets.get((group_id, topic, partition))

    def committed_of_group(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        return {(t, p): c for (g, t, p), c in self.offsets.items() if g == group_id}

    async def forget_topic(self, topic: str) -> None:
        """Tombstones for every committed offset of a deleted topic."""
        by_group: dict[str, list[tuple[str, int, CommittedOffset | None]]] = {}
        for (g, t, p) in list(self.offsets):
            if t == topic:
                by_group.setdefault(g, []).append((t, p, None))
        for g, entries in by_group.items():
            await self._commit(g, entries)
            for t, p, _ in entries:
                self.offsets.pop((g, t, p), None)


def _join_error(code: int, member_id: str) -> JoinResult:
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "member_id": member_id, "members": []}
