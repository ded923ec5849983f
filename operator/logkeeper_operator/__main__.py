"""``python -m logkeeper_operator [--namespace NS ... | --all-namespaces] [--http HOST:PORT]
[--leader-election]``: run the operator.

- ``--http``: /metrics, /healthz, /readyz (metrics.py), served from the start, standby or not.
- ``--leader-election``: wait for the Lease (leader.py) before acting; several replicas may run.
  Without it (an operator run by hand, or by make e2e outside the cluster) this process acts at
  once and must be the only one.
- Then kopf (the change handlers, handlers.py; standalone: no peering objects) and the periodic
  passes (periodic.py) run until SIGTERM (kopf stops; the Lease is released) or until the Lease is
  lost (exit 1: Kubernetes restarts the container, which comes back as a standby).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket

import kopf

from . import handlers, leader, metrics, periodic
from .names import LEASE_NAME
from .reconcile import operator_namespace


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


async def _run(clusterwide: bool, namespaces: list[str], lease_ns: str | None) -> int:
    kube = handlers.kube()
    settings = handlers.SETTINGS
    stop = asyncio.Event()
    elector = None
    if lease_ns:
        elector = leader.Elector(kube, lease_ns, os.environ.get("POD_NAME") or socket.gethostname(),
                                 settings["lease.duration.seconds"], settings["lease.renew.seconds"],
                                 settings["lease.retry.seconds"])
        await elector.acquire()
    metrics.LEADER.set(1)
    keeping = asyncio.create_task(elector.keep(stop)) if elector else None

    async def operator() -> None:
        try:
            await kopf.operator(standalone=True, clusterwide=clusterwide, namespaces=namespaces, stop_flag=stop)
        finally:
            stop.set()  # kopf stopped (SIGTERM): the loops and the Lease keeper stop too

    await asyncio.gather(operator(), periodic.run(kube, None if clusterwide else namespaces, settings, stop))
    metrics.LEADER.set(0)
    kept = await keeping if keeping else True
    if elector and kept:
        await asyncio.to_thread(elector.release)
    return 0 if kept else 1


if __name__ == "__main__":
    raise SystemExit(main())
