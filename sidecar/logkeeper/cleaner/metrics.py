"""The cleaner's metrics, as one snapshot object the sidecar serves (Kafka's LogCleaner and
LogCleanerManager gauges, same names and arithmetic but one).

    name                            value
    max-buffer-utilization-percent  100 x the largest map utilization of the threads' last rounds, to
                                    0.1 as the stats line prints it (Kafka truncates it to an int: a
                                    0.4% round then reads 0 while its stats line says 0.4%)
    cleaner-recopy-percent          int(100 x bytes written / max(bytes read, 1)), last rounds summed
    max-clean-time-secs             int(the longest last round, seconds)
    max-compaction-delay-secs       int(largest max-compaction delay seen when choosing, ms / 1000)
    DeadThreadCount                 cleaner threads that died of an unexpected error
    max-dirty-percent               int(100 x the highest cleanable ratio at the last choice)
    time-since-last-run-ms          now - the last time a log was chosen
    uncleanable-partitions-count    per log directory
    uncleanable-bytes               per log directory: cleanable bytes of its uncleanable partitions

Beyond Kafka: ``backlogs`` (backlog.py), ``uncleanable`` (partition -> failures, next retry,
reason), ``states`` (partition -> in-progress, aborted or paused(n); others are none), the
rounds cleaned by the threads and ``offloads`` (partition -> its Spark hand-off: offload.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from .stats import java_f1


def buffer_utilization_percent(utilizations: Iterable[float]) -> float:
    """The largest utilization as a percentage, rounded as the stats line's ``Buffer utilization``."""
    return float(java_f1(100 * max(utilizations, default=0.0)))


# The snapshot as the sidecar serves it (/v1/status's ``cleaner``, server/status_schema.py): Kafka's
# metric names are not identifiers, hence the functional form.
CleanerMetricsDoc = TypedDict("CleanerMetricsDoc", {
    "max-buffer-utilization-percent": float,
    "cleaner-recopy-percent": int,
    "max-clean-time-secs": int,
    "max-compaction-delay-secs": int,
    "DeadThreadCount": int,
    "max-dirty-percent": int,
    "time-since-last-run-ms": int,
    "uncleanable-partitions-count": dict[str, int],
    "uncleanable-bytes": dict[str, int],
    "uncleanable": dict[str, dict[str, Any]],
    "backlogs": dict[str, dict[str, Any]],
    "states": dict[str, str],
    "rounds": int,
    "offloads": dict[str, Mapping[str, object]],
})


@dataclass(frozen=True)
class CleanerMetrics:
    """The cleaner's metrics, as Kafka names them (served by the sidecar)."""

    max_buffer_utilization_percent: float = 0.0
    cleaner_recopy_percent: int = 0
    max_clean_time_secs: int = 0
    max_compaction_delay_secs: int = 0
    dead_thread_count: int = 0
    max_dirty_percent: int = 0
    time_since_last_run_ms: int = 0
    uncleanable_partitions_count: dict[str, int] = field(default_factory=dict)
    uncleanable_bytes: dict[str, int] = field(default_factory=dict)
    uncleanable: dict[str, dict[str, Any]] = field(default_factory=dict)
    backlogs: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    rounds: int = 0
    offloads: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # offload.Offload each

    def to_dict(self) -> CleanerMetricsDoc:
        """Kafka's metric names as keys (plus the logkeeper extras)."""
        return {
            "max-buffer-utilization-percent": self.max_buffer_utilization_percent,
            "cleaner-recopy-percent": self.cleaner_recopy_percent,
            "max-clean-time-secs": self.max_clean_time_secs,
            "max-compaction-delay-secs": self.max_compaction_delay_secs,
            "DeadThreadCount": self.dead_thread_count,
            "max-dirty-percent": self.max_dirty_percent,
            "time-since-last-run-ms": self.time_since_last_run_ms,
            "uncleanable-partitions-count": dict(self.uncleanable_partitions_count),
            "uncleanable-bytes": dict(self.uncleanable_bytes),
            "uncleanable": dict(self.uncleanable),
            "backlogs": dict(self.backlogs),
            "states": dict(self.states),
            "rounds": self.rounds,
            "offloads": dict(self.offloads),
        }
