"""Leader election over a coordination.k8s.io/v1 Lease (names.LEASE_NAME, in the operator's
namespace), so that several replicas may run and exactly one acts (kopf runs standalone in it).

- A candidate takes the Lease when it is free or expired (renewTime + leaseDurationSeconds in
  the past); writes are guarded by the resourceVersion read, so two candidates cannot both take it
  (the second gets 409 Conflict and stays a standby).
- The leader renews it every lease.renew.seconds and stops leading (the process exits; Kubernetes
  restarts it as a standby) when it could not renew for two thirds of lease.duration.seconds:
  it has stopped before any standby may take over.
- On SIGTERM the leader releases the Lease (holderIdentity cleared), so a rolling update or a
  drain hands over within lease.retry.seconds.

Hand-over (a design value, from the defaults 15 / 5 / 2 s): a leader killed (SIGKILL, node loss)
is replaced at most lease.duration + lease.retry = 17 s after its last renewal, at least 10 s after
it (the renewals are 5 s apart); a leader shut down cleanly, within lease.retry = 2 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .k8s import ApiError, Kube
from .names import FIELD_MANAGER, LEASE_NAME
from .times import epoch_of

log = logging.getLogger(__name__)
API = "coordination.k8s.io/v1"


def _micro(epoch_s: float) -> str:
    """A Lease's MicroTime."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s % 1 * 1e6):06d}Z"


def holder(lease: Mapping[str, Any] | None, now_s: float) -> str | None:
    """Who holds ``lease`` now (None: nobody, or its holder let it expire)."""
    spec = (lease or {}).get("spec") or {}
    who = spec.get("holderIdentity")
    renewed = epoch_of(spec.get("renewTime"))
    if not who or renewed is None:
        return None
    return str(who) if now_s < renewed + float(spec.get("leaseDurationSeconds") or 0) else None


def claimed(lease: Mapping[str, Any] | None, namespace: str, me: str, now_s: float,
            duration_s: float) -> dict[str, Any]:
    """``lease`` as ``me`` writes it to take or renew it (its resourceVersion kept: the guard)."""
    old = dict((lease or {}).get("spec") or {})
    mine = old.get("holderIdentity") == me
    spec = {**old, "holderIdentity": me, "leaseDurationSeconds": round(duration_s), "renewTime": _micro(now_s),
            "acquireTime": old.get("acquireTime") if mine and old.get("acquireTime") else _micro(now_s),
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if mine or not lease else 1)}
    meta: dict[str, Any] = {"name": LEASE_NAME, "namespace": namespace,
                            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}
    if lease is not None:
        meta["resourceVersion"] = lease["metadata"].get("resourceVersion")
    return {"apiVersion": API, "kind": "Lease", "metadata": meta, "spec": spec}


@dataclass
class Elector:
    kube: Kube
    namespace: str
    identity: str
    duration_s: float = 15.0
    renew_s: float = 5.0
    retry_s: float = 2.0

    def try_lead(self, now_s: float | None = None) -> bool:
        """One attempt to take or renew the Lease; True when this replica holds it afterwards."""
        now_s = time.time() if now_s is None else now_s
        try:
            lease = self.kube.get(API, "Lease", self.namespace, LEASE_NAME)
            who = holder(lease, now_s)
            if who is not None and who != self.identity:
                return False
            body = claimed(lease, self.namespace, self.identity, now_s, self.duration_s)
            if lease is None:
                self.kube.create(body)
            else:
                self.kube.replace(body)
            return True
        except ApiError as e:
            if e.status != 409:  # 409: another candidate wrote first
                log.warning("leader election: %s", e)
            return False

    def release(self) -> None:
        """Let a standby take over at once (best effort: else the Lease expires)."""
        try:
            lease = self.kube.get(API, "Lease", self.namespace, LEASE_NAME)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = claimed(lease, self.namespace, self.identity, time.time(), self.duration_s)
                body["spec"]["holderIdentity"] = None
                self.kube.replace(body)
                log.info("leader election: Lease released")
        except ApiError as e:
            log.warning("leader election: Lease not released (%s); a standby takes over when it expires", e)

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica leads (True) or ``stop`` is set (False)."""
        log.info("leader election: %s waits for Lease %s/%s", self.identity, self.namespace, LEASE_NAME)
        while not stop.is_set():
            if await asyncio.to_thread(self.try_lead):
                log.info("leader election: %s leads", self.identity)
                return True
            try:
                await asyncio.wait_for(stop.wait(), self.retry_s)
            except TimeoutError:
                pass
        return False

    async def keep(self, stop: asyncio.Event) -> bool:
        """Renew until ``stop``; False (and ``stop`` set) when the Lease was lost."""
        deadline_s = self.duration_s * 2 / 3
        last = time.monotonic()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.renew_s)
                break
            except TimeoutError:
                pass
            if await asyncio.to_thread(self.try_lead):
                last = time.monotonic()
            elif time.monotonic() - last >= deadline_s:
                log.error("leader election: Lease not renewed for %.0f s: stop leading", deadline_s)
                stop.set()
                return False
        return True
