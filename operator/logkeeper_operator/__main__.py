"""``python -m logkeeper_operator [--namespace NS ... | --all-namespaces] [--http HOST:PORT]
[--leader-election]``: run the operator.

- ``--http``: /metrics, /healthz, /readyz (metrics.py), served from the start, standby or not.
- ``--leader-election``: wait for the Lease (leader.py) before acting; several replicas may run.
  Without it (an operator run by hand, or by make e2e outside the cluster) this process acts at
  once and must be the only one.
- Then kopf (the change handlers, handlers.py; standalone: no peering objects; in its own thread)
  and the periodic passes (periodic.py) run until SIGTERM (all stop; the Lease is released, exit 0)
  or until the Lease is lost (exit 1: Kubernetes restarts the container, which comes back as a
  standby). A standby stops at once on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable

import kopf

from . import handlers, leader, metrics, periodic
from .names import LEASE_NAME
from .reconcile import operator_namespace

# How long a stopping operator waits for kopf's handlers in flight before it releases the Lease
# anyway (a handler cut short is retried by the next leader: they are safe to repeat).
KOPF_STOP_S = 10.0
kopf_failed = threading.Event()  # kopf ended without being asked to: the operator exits 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m logkeeper_operator")
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="namespace to watch (repeatable; default: $WATCH_NAMESPACES, comma-separated)")
    p.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (cluster-wide RBAC)")
    p.add_argument("--http", default=os.environ.get("LOGKEEPER_OPERATOR_HTTP", ""),
                   help="HOST:PORT of /metrics, /healthz and /readyz, e.g. 0.0.0.0:8080 (default: none)")
    p.add_argument("--leader-election", action="store_true",
                   help=f"act only while holding the Lease {LEASE_NAME} of the operator's namespace")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    namespaces = args.namespace or [n for n in os.environ.get("WATCH_NAMESPACES", "").split(",") if n]
    if not args.all_namespaces and not namespaces:
        p.error("give --namespace NS (repeatable) or --all-namespaces")
    lease_ns = operator_namespace()
    if args.leader_election and not lease_ns:
        p.error("--leader-election needs the operator's namespace ($LOGKEEPER_OPERATOR_NAMESPACE)")
    if args.http:
        host, _, port = args.http.rpartition(":")
        metrics.serve(host or "0.0.0.0", int(port))
    return asyncio.run(_run(args.all_namespaces, namespaces, lease_ns if args.leader_election else None))


def identity() -> str:
    """This process's name in the Lease: the pod's name and a random suffix (as client-go's
    leader election does), so a restarted container is a new candidate: it never takes over a
    Lease its dead predecessor held without waiting for it to expire, and leaseTransitions counts
    the restart."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}"


async def _run(clusterwide: bool, namespaces: list[str], lease_ns: str | None) -> int:
    """Stand by for the Lease, then lead: kopf in its own thread, the periodic passes and the Lease
    keeper here, all stopped by one event (SIGTERM, a lost Lease, or kopf stopping). kopf runs
    apart because it treats every task made after its start as its own: at its shutdown it waits
    5 s for them and then cancels them, which cancelled the passes and the Lease's release (the
    Lease then expired: 17-21 s hand-overs on the real node instead of lease.retry.seconds)."""
    kube = handlers.kube()
    settings = handlers.SETTINGS
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elector = None
    if lease_ns:
        elector = leader.Elector(kube, lease_ns, identity(), settings["lease.duration.seconds"],
                                 settings["lease.renew.seconds"], settings["lease.retry.seconds"])
        if not await elector.acquire(stop):
            return 0  # stopped while standing by: nothing held, nothing to release
    metrics.LEADER.set(1)
    kopf_stop = threading.Event()  # set: we stop kopf; kopf ending without it is a failure
    def kopf_ended() -> None:
        loop.call_soon_threadsafe(stop.set)
    kopf_thread = threading.Thread(target=_kopf, name="kopf", daemon=True,
                                   args=(clusterwide, namespaces, kopf_stop, kopf_ended))
    kopf_thread.start()
    try:
        results = await asyncio.gather(elector.keep(stop) if elector else _true(),
                                       periodic.run(kube, None if clusterwide else namespaces, settings, stop))
    finally:
        metrics.LEADER.set(0)
        kopf_stop.set()
        await asyncio.to_thread(kopf_thread.join, KOPF_STOP_S)
    kept = bool(results[0])
    if elector and kept:
        await asyncio.to_thread(elector.release)
    return 0 if kept and not kopf_failed.is_set() else 1


async def _true() -> bool:
    return True


def _kopf(clusterwide: bool, namespaces: list[str], stop: threading.Event, stopped: Callable[[], None]) -> None:
    """kopf's change handlers until ``stop``; ``stopped`` when kopf ends, for whatever reason
    (then the whole operator stops: Kubernetes restarts it)."""
    try:
        asyncio.run(kopf.operator(standalone=True, clusterwide=clusterwide, namespaces=namespaces, stop_flag=stop))
    except Exception:
        logging.getLogger(__name__).exception("kopf failed")
    finally:
        if not stop.is_set():
            kopf_failed.set()
        stopped()


if __name__ == "__main__":
    raise SystemExit(main())
