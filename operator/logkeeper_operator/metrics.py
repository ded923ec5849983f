"""The operator's own metrics (Prometheus text format) and its HTTP endpoint.

    GET /metrics   the registry below (the chart's Service port "http"; an optional ServiceMonitor)
    GET /healthz   200 while the process runs (every replica: a standby is healthy too)
    GET /readyz    200 likewise (a standby must count as ready, or a rolling update would wait
                   for a pod that only becomes leader when the old one goes)

Metrics (own registry: nothing of the sidecar's modules leaks in):

    logkeeper_operator_reconciles_total{kind,trigger,result}   handler runs and periodic passes per object
    logkeeper_operator_reconcile_duration_seconds{kind,trigger} their durations (histogram)
    logkeeper_operator_errors_total{kind,trigger,error}        failed ones, by exception class
    logkeeper_operator_repairs_total{kind}                      children made or changed back (drift)
    logkeeper_operator_objects{kind,phase}                      our objects by phase (LogVolume: its
                                                                Ready reason; CompactionJob: phase)
    logkeeper_operator_leader                                    1 on the replica that leads
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry()
RECONCILES = Counter("logkeeper_operator_reconciles", "Reconciles of one object (handlers and periodic passes).",
                     ["kind", "trigger", "result"], registry=REGISTRY)
DURATION = Histogram("logkeeper_operator_reconcile_duration_seconds", "Duration of one object's reconcile.",
                     ["kind", "trigger"], registry=REGISTRY,
                     buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
ERRORS = Counter("logkeeper_operator_errors", "Reconciles that failed, by exception class.",
                 ["kind", "trigger", "error"], registry=REGISTRY)
REPAIRS = Counter("logkeeper_operator_repairs", "Owned objects made again or changed back by the periodic reconcile.",
                  ["kind"], registry=REGISTRY)
OBJECTS = Gauge("logkeeper_operator_objects", "Objects by phase at the last periodic pass.", ["kind", "phase"],
                registry=REGISTRY)
LEADER = Gauge("logkeeper_operator_leader", "1 while this replica leads (runs the handlers and loops).",
               registry=REGISTRY)


@contextmanager
def observe(kind: str, trigger: str) -> Iterator[None]:
    """Count and time one reconcile; an exception is counted by class and re-raised."""
    started = time.perf_counter()
    try:
        yield
    except BaseException as e:
        RECONCILES.labels(kind, trigger, "error").inc()
        ERRORS.labels(kind, trigger, type(e).__name__).inc()
        raise
    else:
        RECONCILES.labels(kind, trigger, "ok").inc()
    finally:
        DURATION.labels(kind, trigger).observe(time.perf_counter() - started)


def set_objects(kind: str, counts: Mapping[str, int]) -> None:
    """Replace ``kind``'s per-phase counts (phases no longer seen drop out)."""
    for labels in [s.labels for m in OBJECTS.collect() for s in m.samples]:
        if labels.get("kind") == kind and labels.get("phase") not in counts:
            OBJECTS.remove(kind, labels["phase"])
    for phase, n in counts.items():
        OBJECTS.labels(kind, phase).set(n)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            body, ctype = generate_latest(REGISTRY), CONTENT_TYPE_LATEST
        elif self.path in ("/healthz", "/readyz"):
            body, ctype = b"ok\n", "text/plain"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: not logged
        pass


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """Start the endpoint in a daemon thread; returns the server (its port when port was 0)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
