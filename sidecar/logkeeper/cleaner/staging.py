"""Where the Spark offload stages a job's output, and the sweep of what an earlier process left.

Apart from offload.py so that a process without the offload (``logkeeper clean``, a sidecar with
``log.cleaner.offload.enable=false``) still removes old staging directories without importing
the hand-off and the Spark job's modules.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

_LOG = logging.getLogger("logkeeper.cleaner.offload")

STAGING_DIR_NAME = ".logkeeper-staging"


def staging_root(configured: str, log_dir: Path) -> Path:
    """``<log dir>/.logkeeper-staging``, or ``<configured>/<log dir name>-<hash of its path>``."""
    if not configured:
        return log_dir / STAGING_DIR_NAME
    import hashlib  # only for a configured staging.dir: its import is a noticeable part of a start

    digest = hashlib.sha256(str(log_dir.resolve()).encode()).hexdigest()[:12]
    return Path(configured) / f"{log_dir.name}-{digest}"


def remove_leftovers(configured: str, log_dirs: Iterable[Path]) -> None:
    """At start: no attempt of an earlier process is ever used."""
    for log_dir in log_dirs:
        root = staging_root(configured, log_dir)
        if root.exists():
            import shutil  # only when there is something to remove: not an import of every process start

            _LOG.info("removing the staging directory %s left by an earlier process", root)
            shutil.rmtree(root, ignore_errors=True)
