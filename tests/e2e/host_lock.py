"""The host's lock on its one real node (realnode.py): taken by make e2e's session fixture."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

# One real node per host at a time: the node's names are the host's (the bridge, NODE_IP, the
# KUBE-* iptables chains, the Service range 10.96.0.0/24 that kube-proxy routes, /run/containerd).
# Two suites at once take each other's traffic: one's pods reached the other's API server through
# 10.96.0.1 and failed TLS against a CA they did not know. So a second run waits for the first.
HOST_LOCK = Path("/run/logkeeper-e2e-node.lock")
HOST_LOCK_WAIT_S = 3600


@contextlib.contextmanager
def host_lock(path: Path = HOST_LOCK, wait_s: float = HOST_LOCK_WAIT_S, every_s: float = 30) -> Iterator[None]:
    """Hold the host's real-node lock (flock: released when the process dies), waiting for another
    holder up to ``wait_s`` and saying so every ``every_s``; TimeoutError naming the holder after."""
    with path.open("a+") as f:
        deadline = time.monotonic() + wait_s
        said = 0.0
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "?"
                now = time.monotonic()
                if now > deadline:
                    raise TimeoutError(f"{path} still held by {holder} after {wait_s:.0f} s: another real "
                                       "node runs on this host (its bridge, iptables chains and Service "
                                       "range are ours)") from None
                if now - said >= every_s:
                    print(f"waiting for {path}, held by {holder}: one real node per host", flush=True)
                    said = now
                time.sleep(1)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} in {Path.cwd()}\n")  # which run, which clone: for the one waiting
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)
