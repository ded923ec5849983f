"""Throttling the cleaner's I/O to ``log.cleaner.io.max.bytes.per.second`` (Kafka's Throttler).

Every cleaner thread reports the bytes it reads and writes to one shared throttler. Once per
check interval (300 ms) the rate observed since the last check is compared with the desired
rate; when above it, the reporting thread sleeps as long as it takes for the bytes observed to
match the desired rate, then a new interval starts. The clock and the sleep are passed in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

NS_PER_SEC = 1_000_000_000


class Throttler:
    def __init__(self, desired_rate_per_sec: float, *, check_interval_ms: int = 300,
                 clock_ns: Callable[[], int] = time.monotonic_ns,
                 sleep_s: Callable[[float], None] = time.sleep) -> None:
        self.desired_rate_per_sec = desired_rate_per_sec
        self._interval_ns = check_interval_ms * 1_000_000
        self._clock_ns = clock_ns
        self._sleep = sleep_s
        self._lock = threading.Lock()
        self._period_start_ns = clock_ns()
        self._observed = 0.0
        self.total_observed = 0

    def maybe_throttle(self, observed: float) -> None:
        rate = self.desired_rate_per_sec
        with self._lock:
            self.total_observed += int(observed)
            self._observed += observed
            now = self._clock_ns()
            elapsed = now - self._period_start_ns
            if elapsed > self._interval_ns and self._observed > 0:
                if self._observed * NS_PER_SEC / elapsed > rate:
                    sleep_ms = round(self._observed / (rate / 1000.0) - elapsed // 1_000_000)
                    if sleep_ms > 0:
                        self._sleep(sleep_ms / 1000.0)
                self._period_start_ns = self._clock_ns()
                self._observed = 0.0
