"""Times in the operator's resources: RFC 3339 in UTC with a Z, to the second (the Kubernetes API
conventions' format, which kubectl shows as an age), one owner for writing and reading them."""

from __future__ import annotations

import time
from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime(FORMAT)


def now_iso() -> str:
    return rfc3339(time.time())


def epoch_of(value: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (fractions and offsets accepted), or of a number
    (a status written by an older operator held Unix seconds); None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
