"""``python -m logkeeper_operator [--namespace NS ... | --all-namespaces] [--liveness URL]``: run the
operator (kopf, standalone: one replica, no peering objects)."""

from __future__ import annotations

import argparse
import logging
import os

import kopf

from . import handlers  # noqa: F401  (registers the handlers)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m logkeeper_operator")
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="namespace to watch (repeatable; default: $WATCH_NAMESPACES, comma-separated)")
    p.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (cluster-wide RBAC)")
    p.add_argument("--liveness", default=os.environ.get("LOGKEEPER_LIVENESS", ""),
                   help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    namespaces = args.namespace or [n for n in os.environ.get("WATCH_NAMESPACES", "").split(",") if n]
    if not args.all_namespaces and not namespaces:
        p.error("give --namespace NS (repeatable) or --all-namespaces")
    kopf.run(standalone=True, clusterwide=args.all_namespaces, namespaces=namespaces,
             liveness_endpoint=args.liveness or None)


if __name__ == "__main__":
    main()
