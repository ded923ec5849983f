"""The LogManager tests' environment: Kafka's MockTime (a manual clock whose sleep runs the
scheduler's due tasks), the broker properties they start from, and one batch maker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from logkeeper.log.log import Log
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import ManualClock, Scheduler
from logkeeper.records.builder import Record, build_batch

START_MS = 1_700_000_000_000
INITIAL_DELAY_MS = 10_000
MAX_LOG_AGE_MS = 10 * 60 * 1000
NAME = "kafka"
TP0 = TopicPartition(NAME, 0)


def batch(ts: int, value: bytes = b"test", key: bytes | None = None) -> bytes:
    return build_batch([Record(0, ts, key, value)])


class Env:
    """Kafka's MockTime: a manual clock whose ``sleep`` runs the scheduler's due tasks."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clock = ManualClock(START_MS)
        self.scheduler = Scheduler(self.clock)
        self.managers: list[LogManager] = []
        self.log_dir = tmp_path / "logs"

    def sleep(self, ms: int) -> None:
        self.clock.advance(ms)
        self.scheduler.tick()

    def props(self, **overrides: Any) -> dict[str, Any]:
        props: dict[str, Any] = {"log.segment.bytes": 1024, "log.index.size.max.bytes": 4096,
                                 "log.retention.ms": MAX_LOG_AGE_MS, "num.recovery.threads.per.data.dir": 1,
                                 "log.initial.task.delay.ms": INITIAL_DELAY_MS,
                                 "log.retention.check.interval.ms": 1000,
                                 "log.flush.scheduler.interval.ms": 10_000_000,
                                 "log.flush.offset.checkpoint.interval.ms": 10_000,
                                 "log.flush.start.offset.checkpoint.interval.ms": 10_000}
        props.update(overrides)
        return props

    def manager(self, dirs: list[Path] | None = None, *, start: bool = True,
                topic_configs: dict[str, dict[str, Any]] | None = None, **overrides: Any) -> LogManager:
        props = self.props(**overrides)
        props["log.dirs"] = [str(d) for d in (dirs or [self.log_dir])]
        self.scheduler = Scheduler(self.clock)
        m = LogManager(ManagerConfig.from_props(props), clock_ms=self.clock, scheduler=self.scheduler,
                       topic_configs=topic_configs)
        self.managers.append(m)
        if start:
            m.startup()
        return m

    def append(self, lg: Log, n: int = 1, **kw: Any) -> int:
        last = -1
        for _ in range(n):
            last = lg.append(batch(self.clock(), **kw)).last_offset
        return last

    def append_flushed(self, lg: Log, n: int) -> None:
        """Append ``n`` batches and flush them: the log's recovery point moves to its end."""
        self.append(lg, n)
        lg.flush()


def dirs_in(tmp_path: Path, n: int) -> list[Path]:
    return [tmp_path / f"d{i}" for i in range(n)]

