"""``/metrics``: Prometheus text format (prometheus-client) with Kafka's metric names.

Kafka's JMX names map to Prometheus names by one rule, the one the usual JMX-exporter rules
apply (``kafka.(\\w+)<type=(.+), name=(.+)><>Value`` -> ``kafka_$1_$2_$3``), case kept::

    kafka.<domain>:type=<Type>,name=<Name>[,<key>=<value>...]
        -> kafka_<domain>_<Type>_<Name, each character outside [A-Za-z0-9_] as "_">{<key>="<value>"...}

The other key properties of the MBean become labels with the same names. Every one is a gauge:

    JMX MBean (kafka.log:...)                               Prometheus name
    type=LogCleaner,name=max-buffer-utilization-percent     kafka_log_LogCleaner_max_buffer_utilization_percent
    type=LogCleaner,name=cleaner-recopy-percent             kafka_log_LogCleaner_cleaner_recopy_percent
    type=LogCleaner,name=max-clean-time-secs                kafka_log_LogCleaner_max_clean_time_secs
    type=LogCleaner,name=max-compaction-delay-secs          kafka_log_LogCleaner_max_compaction_delay_secs
    type=LogCleaner,name=DeadThreadCount                    kafka_log_LogCleaner_DeadThreadCount
    type=LogCleanerManager,name=max-dirty-percent           kafka_log_LogCleanerManager_max_dirty_percent
    type=LogCleanerManager,name=time-since-last-run-ms      kafka_log_LogCleanerManager_time_since_last_run_ms
    type=LogCleanerManager,name=uncleanable-partitions-count,logDirectory=D
                                  kafka_log_LogCleanerManager_uncleanable_partitions_count{logDirectory}
    type=LogCleanerManager,name=uncleanable-bytes,logDirectory=D
                                  kafka_log_LogCleanerManager_uncleanable_bytes{logDirectory}
    type=Log,name=Size,topic=T,partition=P                  kafka_log_Log_Size{topic,partition}
    type=Log,name=NumLogSegments,topic=T,partition=P        kafka_log_Log_NumLogSegments{topic,partition}
    type=Log,name=LogStartOffset,topic=T,partition=P        kafka_log_Log_LogStartOffset{topic,partition}
    type=Log,name=LogEndOffset,topic=T,partition=P          kafka_log_Log_LogEndOffset{topic,partition}
    type=LogManager,name=OfflineLogDirectoryCount           kafka_log_LogManager_OfflineLogDirectoryCount
    type=LogManager,name=LogDirectoryOffline,logDirectory=D kafka_log_LogManager_LogDirectoryOffline{logDirectory}

logkeeper's own figures are ``logkeeper_*``: readiness, per partition the dirty ratio, cleanable
bytes, uncleanable and backlog flags and the cleaning state (one series per state, value 1),
per directory the bytes used and usable, the rounds cleaned, and the HTTP requests (count by
method, route and status; latency histogram by method and route). prometheus-client's process
collector adds ``process_*`` (resident memory, CPU, open files). With a Kafka listener, its own
collector adds ``logkeeper_kafka_*`` (protocol/listener_metrics.py).

Figures are read at scrape time from the same snapshot as ``/v1/status`` (status.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .status_schema import LogDirStatus, OfflinePartition, PartitionStatus, Status

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def kafka_metric_name(domain: str, mbean_type: str, name: str) -> str:
    """The Prometheus name of ``kafka.<domain>:type=<mbean_type>,name=<name>``."""
    return "kafka_" + "_".join(_UNSAFE.sub("_", part) for part in (domain, mbean_type, name))


def _gauge(domain: str, mbean_type: str, name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    jmx = f"kafka.{domain}:type={mbean_type},name={name}"
    return GaugeMetricFamily(kafka_metric_name(domain, mbean_type, name), f"{doc} (JMX {jmx})",
                             labels=labels or [])


CLEANER_GAUGES = (
    ("LogCleaner", "max-buffer-utilization-percent", "Largest offset map use of the threads' last rounds, percent"),
    ("LogCleaner", "cleaner-recopy-percent", "Bytes written / bytes read by the last rounds, percent"),
    ("LogCleaner", "max-clean-time-secs", "Longest last round, seconds"),
    ("LogCleaner", "max-compaction-delay-secs", "Largest delay past max.compaction.lag.ms, seconds"),
    ("LogCleaner", "DeadThreadCount", "Cleaner threads that died"),
    ("LogCleanerManager", "max-dirty-percent", "Highest cleanable ratio at the last choice, percent"),
    ("LogCleanerManager", "time-since-last-run-ms", "Milliseconds since a log was last chosen"),
)
PER_DIR_CLEANER_GAUGES = (
    ("uncleanable-partitions-count", "Partitions marked uncleanable in the directory"),
    ("uncleanable-bytes", "Cleanable bytes of the directory's uncleanable partitions"),
)
_LogFigure = Literal["size_bytes", "segments", "log_start_offset", "log_end_offset"]  # PartitionStatus's keys
LOG_GAUGES: tuple[tuple[str, _LogFigure, str], ...] = (
    ("Size", "size_bytes", "Bytes of the partition's segments"),
    ("NumLogSegments", "segments", "Segments of the partition"),
    ("LogStartOffset", "log_start_offset", "First offset readers may see"),
    ("LogEndOffset", "log_end_offset", "Next offset to assign"),
)


class SidecarCollector(Collector):
    """Yields every family from one status snapshot (``snapshot()``: build_status, or None when not ready)."""

    def __init__(self, snapshot: Callable[[], Status | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        status = self._snapshot()
        ready = GaugeMetricFamily("logkeeper_ready", "1 when recovery is done and the sidecar serves requests")
        ready.add_metric([], 1.0 if status is not None and status.get("ready") else 0.0)
        yield ready
        if status is None:
            return
        yield from self._cleaner(status["cleaner"])
        yield from self._dirs(status["log_dirs"])
        yield from self._partitions(status["partitions"])
        yield self._offline(status["offline_partitions"])

    @staticmethod
    def _offline(parts: list[OfflinePartition]) -> Any:
        g = GaugeMetricFamily("logkeeper_partition_offline", "1 for a partition that exists but cannot be served "
                              "(its log directory failed, or it has a copy in two)",
                              labels=["topic", "partition", "logDirectory"])
        for p in parts:
            g.add_metric([p["topic"], str(p["partition"]), p["log_dir"]], 1.0)
        return g

    @staticmethod
    def _cleaner(cleaner: Mapping[str, Any]) -> Iterator[Any]:
        for mbean_type, name, doc in CLEANER_GAUGES:
            g = _gauge("log", mbean_type, name, doc)
            g.add_metric([], float(cleaner[name]))
            yield g
        for name, doc in PER_DIR_CLEANER_GAUGES:
            g = _gauge("log", "LogCleanerManager", name, doc, ["logDirectory"])
            for d, value in sorted(cleaner[name].items()):
                g.add_metric([d], float(value))
            yield g
        rounds = CounterMetricFamily("logkeeper_cleaner_rounds", "Cleaning rounds finished since start")
        rounds.add_metric([], float(cleaner["rounds"]))
        yield rounds

    @staticmethod
    def _dirs(dirs: list[LogDirStatus]) -> Iterator[Any]:
        offline = _gauge("log", "LogManager", "OfflineLogDirectoryCount", "Offline log directories")
        offline.add_metric([], float(sum(1 for d in dirs if not d["online"])))
        yield offline
        each = _gauge("log", "LogManager", "LogDirectoryOffline", "1 when the log directory is offline",
                      ["logDirectory"])
        size = GaugeMetricFamily("logkeeper_log_dir_size_bytes", "Bytes of the directory's segments",
                                 labels=["logDirectory"])
        usable = GaugeMetricFamily("logkeeper_log_dir_usable_bytes", "Bytes left on the directory's file system",
                                   labels=["logDirectory"])
        for d in dirs:
            each.add_metric([d["path"]], 0.0 if d["online"] else 1.0)
            size.add_metric([d["path"]], float(d["size_bytes"]))
            if d["usable_bytes"] is not None:
                usable.add_metric([d["path"]], float(d["usable_bytes"]))
        yield from (each, size, usable)

    @staticmethod
    def _partitions(parts: list[PartitionStatus]) -> Iterator[Any]:
        labels = ["topic", "partition"]
        for name, key, doc in LOG_GAUGES:
            g = _gauge("log", "Log", name, doc, labels)
            for p in parts:
                g.add_metric([p["topic"], str(p["partition"])], float(p[key]))
            yield g
        dirty = GaugeMetricFamily("logkeeper_partition_dirty_ratio",
                                  "Cleanable bytes / (clean + cleanable bytes) of a compacted partition", labels=labels)
        cleanable = GaugeMetricFamily("logkeeper_partition_cleanable_bytes", "Bytes of the dirty section",
                                      labels=labels)
        unclean = GaugeMetricFamily("logkeeper_partition_uncleanable", "1 while the partition is uncleanable",
                                    labels=labels)
        backlog = GaugeMetricFamily("logkeeper_partition_backlog",
                                    "1 when the dirty section holds more keys than one offset map", labels=labels)
        state = GaugeMetricFamily("logkeeper_partition_cleaning_state",
                                  "1 for the partition's cleaning state (none, in-progress, aborted, paused(n))",
                                  labels=[*labels, "state"])
        for p in parts:
            lv = [p["topic"], str(p["partition"])]
            if p["dirty_ratio"] is not None:
                dirty.add_metric(lv, float(p["dirty_ratio"]))
            if p["cleanable_bytes"] is not None:
                cleanable.add_metric(lv, float(p["cleanable_bytes"]))
            unclean.add_metric(lv, 1.0 if p["uncleanable"] else 0.0)
            backlog.add_metric(lv, 1.0 if p["backlog"] else 0.0)
            state.add_metric([*lv, p["cleaning_state"]], 1.0)
        yield from (dirty, cleanable, unclean, backlog, state)


class Metrics:
    """The registry: the sidecar's collector, HTTP request metrics and the process collector."""

    def __init__(self, snapshot: Callable[[], Status | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SidecarCollector(snapshot))
        ProcessCollector(registry=self.registry)
        self.requests = Counter("logkeeper_http_requests", "HTTP requests answered",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("logkeeper_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
