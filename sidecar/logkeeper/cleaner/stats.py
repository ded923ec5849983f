"""Statistics of a cleaning round and Kafka's stats line for it, with the same figures and wording.

``CleanerStats`` counts what Kafka's does: bytes and records read by the cleaning pass (every
batch of the cleaned segments), bytes and records written, bytes and records read while building
the offset map, unkeyed records dropped, the map's utilization, and the times (milliseconds, from
the clock passed in) at which the round started, finished its map and finished.

``format_stats`` reproduces LogCleaner.recordStats (Java's ``String.format``: ``%,.1f`` groups
thousands with commas and rounds half up from the shortest decimal form of the double; a
division by zero seconds prints ``Infinity`` or ``NaN``; ``%n`` is a newline)::

    <newline><tab>Log cleaner thread 0 cleaned log my-topic-0 (dirty section = [0, 1000])
    <tab>113.6 MB of log processed in 0.4 seconds (284.0 MB/sec).
    <tab>Indexed 113.6 MB in 0.2 seconds (568.0 Mb/sec, 50.0% of total time)
    <tab>Buffer utilization: 1.8%
    <tab>Cleaned 113.6 MB in 0.2 seconds (568.0 Mb/sec, 50.0% of total time)
    <tab>Start size: 113.6 MB (1,000,082 messages)
    <tab>End size: 11.4 MB (100,000 messages)
    <tab>90.0% size reduction (90.0% fewer messages)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

MonotonicMs = Callable[[], int]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class CleanerStats:
    """The counts and times of one cleaning round (see the module docstring)."""

    clock_ms: MonotonicMs = field(default=monotonic_ms, repr=False)
    start_ms: int = -1
    map_complete_ms: int = -1
    end_ms: int = -1
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    invalid_messages_read: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0

    def __post_init__(self) -> None:
        if self.start_ms < 0:
            self.start_ms = self.clock_ms()

    def read_messages(self, messages: int, size: int) -> None:
        self.messages_read += messages
        self.bytes_read += size

    def recopy_messages(self, messages: int, size: int) -> None:
        self.messages_written += messages
        self.bytes_written += size

    def index_messages_read(self, messages: int) -> None:
        self.map_messages_read += messages

    def index_bytes_read(self, size: int) -> None:
        self.map_bytes_read += size

    def invalid_messages(self, count: int) -> None:
        self.invalid_messages_read += count

    def index_done(self) -> None:
        self.map_complete_ms = self.clock_ms()

    def all_done(self) -> None:
        self.end_ms = self.clock_ms()

    @property
    def elapsed_secs(self) -> float:
        return (self.end_ms - self.start_ms) / 1000.0

    @property
    def elapsed_index_secs(self) -> float:
        return (self.map_complete_ms - self.start_ms) / 1000.0


@dataclass
class PreCleanStats:
    """What choosing a log saw: the largest compaction delay, delayed and cleanable partitions."""

    max_compaction_delay_ms: int = 0
    delayed_partitions: int = 0
    cleanable_partitions: int = 0

    def update_max_compaction_delay(self, delay_ms: int) -> None:
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay_ms)
        if delay_ms > 0:
            self.delayed_partitions += 1

    def record_cleanable_partitions(self, count: int) -> None:
        self.cleanable_partitions = count


def java_div(a: float, b: float) -> float:
    """a / b as Java's doubles divide: x/0 is +-Infinity, 0/0 is NaN."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * (math.copysign(1.0, b))
    return a / b


def java_f1(x: float, grouping: bool = False) -> str:
    """Java's ``%.1f`` (``%,.1f`` with grouping) of a double."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    d = Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"{d:,}" if grouping else f"{d}"


def _mb(size: float) -> float:
    return size / (1024 * 1024)


def format_stats(thread_id: int, name: str, start: int, end: int, s: CleanerStats) -> str:
    secs = s.elapsed_secs
    index_secs = s.elapsed_index_secs
    clean_secs = secs - index_secs
    return (
        f"\n\tLog cleaner thread {thread_id} cleaned log {name} (dirty section = [{start}, {end}])\n"
        f"\t{java_f1(_mb(s.bytes_read), True)} MB of log processed in {java_f1(secs, True)} seconds "
        f"({java_f1(_mb(java_div(s.bytes_read, secs)), True)} MB/sec).\n"
        f"\tIndexed {java_f1(_mb(s.map_bytes_read), True)} MB in {java_f1(index_secs)} seconds "
        f"({java_f1(java_div(_mb(s.map_bytes_read), index_secs), True)} Mb/sec, "
        f"{java_f1(java_div(100 * index_secs, secs))}% of total time)\n"
        f"\tBuffer utilization: {java_f1(100 * s.buffer_utilization)}%\n"
        f"\tCleaned {java_f1(_mb(s.bytes_read), True)} MB in {java_f1(clean_secs)} seconds "
        f"({java_f1(java_div(_mb(s.bytes_read), clean_secs), True)} Mb/sec, "
        f"{java_f1(java_div(100 * clean_secs, secs))}% of total time)\n"
        f"\tStart size: {java_f1(_mb(s.bytes_read), True)} MB ({s.messages_read:,} messages)\n"
        f"\tEnd size: {java_f1(_mb(s.bytes_written), True)} MB ({s.messages_written:,} messages)\n"
        f"\t{java_f1(100.0 * (1.0 - java_div(s.bytes_written, s.bytes_read)))}% size reduction "
        f"({java_f1(100.0 * (1.0 - java_div(s.messages_written, s.messages_read)))}% fewer messages)\n"
    )


def format_delayed(pre: PreCleanStats) -> str | None:
    """Kafka's extra line when some partition waited past max.compaction.lag.ms."""
    if pre.delayed_partitions <= 0:
        return None
    return (f"\tCleanable partitions: {pre.cleanable_partitions}, Delayed partitions: "
            f"{pre.delayed_partitions}, max delay: {pre.max_compaction_delay_ms}")


def format_invalid(s: CleanerStats) -> str | None:
    if s.invalid_messages_read <= 0:
        return None
    return f"\tFound {s.invalid_messages_read} invalid messages during compaction."
