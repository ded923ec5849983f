"""The Kafka listener's figures, served on the sidecar's ``/metrics`` beside its own.

What a broker's dashboards watch, under logkeeper's names (Kafka's are JMX meters; these are
Prometheus counters, so rates come from ``rate()``):

    logkeeper_kafka_request_duration_seconds{api}     histogram: a request from its frame read to
                                                      its answer encoded, a fetch's wait for data
                                                      (max.wait.ms) included, as Kafka's TotalTimeMs
                                                      (_count: RequestsPerSec)
    logkeeper_kafka_record_bytes_in_total{topic}      record bytes appended (BytesInPerSec)
    logkeeper_kafka_record_bytes_out_total{topic}     record bytes answered to fetches (BytesOutPerSec)
    logkeeper_kafka_fetch_reads_total{on}             fetch reads done on the event loop from the page
                                                      cache ("loop") or on a thread ("thread")
    logkeeper_kafka_page_cache_queryable              1 while the kernel says what is cached (cachestat);
                                                      0: every fetch goes to a thread
    logkeeper_kafka_connections                       open connections (kafka.max.connections bounds them)
    logkeeper_kafka_<event>_total                     connections refused, connections closed idle,
                                                      oversized requests, waits for the request pool,
                                                      failed authentications
    logkeeper_kafka_pool_bytes{pool,state}            the request and response pools: used, capacity
    logkeeper_kafka_pool_waiters{pool}                requests or fetches waiting for them

Counting is on the event loop's thread, in plain dicts (no lock on the request path); a scrape
reads them from the HTTP API's thread through ``dict()`` copies, which CPython makes whole under
the GIL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..log import page_cache
from . import messages as m
from .memory_pool import MemoryPool

# Kafka's requests take from well under a millisecond (a cached fetch, a heartbeat) to a fetch's
# whole max.wait.ms (500 ms by default) and a join's rebalance (seconds)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# the listener's events (ListenerFigures.events) -> (metric name, help)
EVENTS = {
    "refused": ("logkeeper_kafka_connections_refused", "Connections closed at once: kafka.max.connections open"),
    "idle_closed": ("logkeeper_kafka_connections_idle_closed",
                    "Connections closed idle (kafka.connections.max.idle.ms) or not authenticated in time"),
    "oversized": ("logkeeper_kafka_requests_oversized",
                  "Connections closed for a request larger than kafka.socket.request.max.bytes"),
    "pool_waits": ("logkeeper_kafka_request_pool_waits",
                   "Requests that waited for room in kafka.queued.max.request.bytes"),
    "auth_failures": ("logkeeper_kafka_authentication_failures", "Failed SASL authentications"),
}


class ListenerFigures:
    """What the handlers count; one per listener, reached through BrokerContext.figures."""

    def __init__(self) -> None:
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.fetch_reads = {"loop": 0, "thread": 0}
        self.events = dict.fromkeys(EVENTS, 0)  # connection.py, listener.py and sasl_exchange.py count them
        self.latency = Histogram("logkeeper_kafka_request_duration_seconds",
                                 "Kafka requests from frame read to answer encoded, by API",
                                 ["api"], registry=None, buckets=BUCKETS)
        self._by_api: dict[int, Any] = {}  # the histogram's child per API key (labels() costs a lock and a lookup)

    def request_done(self, api_key: int, seconds: float) -> None:
        child = self._by_api.get(api_key)
        if child is None:
            child = self._by_api[api_key] = self.latency.labels(m.APIS[api_key].name)
        child.observe(seconds)

    def appended(self, topic: str, size: int) -> None:
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def answered(self, topic: str, size: int) -> None:
        if size:
            self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def read(self, on_loop: bool) -> None:
        self.fetch_reads["loop" if on_loop else "thread"] += 1

    def event(self, name: str, count: int = 1) -> int:
        """Counts one of EVENTS; returns its total (the refusal log quotes it)."""
        self.events[name] += count
        return self.events[name]


class Observed(Protocol):
    """What the collector reads of the listener (listener.py's KafkaListener)."""

    @property
    def figures(self) -> ListenerFigures: ...
    @property
    def memory(self) -> MemoryPool: ...
    @property
    def responses(self) -> MemoryPool: ...
    @property
    def connection_count(self) -> int: ...


class ListenerCollector(Collector):
    def __init__(self, listener: Observed) -> None:
        self._listener = listener

    def collect(self) -> Iterator[Any]:
        lst, figures = self._listener, self._listener.figures
        yield from figures.latency.collect()
        for name, counts, doc in (
                ("logkeeper_kafka_record_bytes_in", figures.bytes_in, "Record bytes appended by Produce requests"),
                ("logkeeper_kafka_record_bytes_out", figures.bytes_out, "Record bytes answered to Fetch requests")):
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, value in sorted(dict(counts).items()):
                family.add_metric([topic], value)
            yield family
        reads = CounterMetricFamily("logkeeper_kafka_fetch_reads",
                                    "Fetch reads on the event loop from the page cache, or on a thread", labels=["on"])
        for on, value in dict(figures.fetch_reads).items():
            reads.add_metric([on], value)
        yield reads
        yield GaugeMetricFamily("logkeeper_kafka_page_cache_queryable",
                                "1 while the kernel answers page-cache queries (cachestat)",
                                value=1.0 if page_cache.queryable() else 0.0)
        yield GaugeMetricFamily("logkeeper_kafka_connections", "Open Kafka connections", value=lst.connection_count)
        events = dict(figures.events)
        for key, (name, doc) in EVENTS.items():
            yield CounterMetricFamily(name, doc, value=events[key])
        pools = GaugeMetricFamily("logkeeper_kafka_pool_bytes",
                                  "kafka.queued.max.request.bytes (requests) and kafka.queued.max.response.bytes "
                                  "(TLS fetch answers): bytes used and capacity", labels=["pool", "state"])
        waiters = GaugeMetricFamily("logkeeper_kafka_pool_waiters", "Requests or fetches waiting for a pool",
                                    labels=["pool"])
        for pool_name, pool in (("requests", lst.memory), ("responses", lst.responses)):
            pools.add_metric([pool_name, "used"], pool.used)
            pools.add_metric([pool_name, "capacity"], pool.capacity)
            waiters.add_metric([pool_name], pool.waiting)
        yield pools
        yield waiters
