"""The sidecar's storage service: a LogManager, its cleaner threads, the topics, the data path.

Blocking calls only: the HTTP layer runs each in its thread pool. Life cycle:

``start()`` (blocking; the API answers /healthz meanwhile and 503 not_ready elsewhere)
  1. the LogManager opens and locks the log directories (LogDirLockedError when another
     process holds one);
  2. topic configs: those saved by the API (topic_store.py), then the config file's topics over
     them;
  3. the LogCleaner is built and plugged into the manager's hooks;
  4. ``LogManager.startup()``: every partition is loaded, recovered after an unclean shutdown;
  5. the config file's topics get their missing partitions (not while a directory is offline:
     the partition may be there);
  6. the cleaner threads start; the service is ready.

``shutdown()``: not ready; the cleaner threads stop (a round in progress is abandoned at its next
check), then ``LogManager.shutdown`` flushes and closes every log, writes the checkpoints and the
clean-shutdown markers, and unlocks. The caller bounds the time (sidecar_main.py).

Topics: a topic exists when it has partitions, was created through the API (saved in the
topic store) or is declared in the config file. Partitions are numbered from 0; a create or a
grow (``add_partitions``) creates the missing numbers below the new count. Create, delete,
grow and config changes are serialised by one lock.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..cleaner.log_cleaner import LogCleaner
from ..errors import KafkaStorageError, UnknownPartitionError
from ..log import names
from ..log.assign import LogAppendInfo
from ..log.log import Log, wall_clock_ms
from ..log.log_config import LogConfig, validate_topic_configs
from ..log.manager import LogManager
from ..log.names import TopicPartition
from ..log.validator import validate_request
from ..records.builder import Record, build_batch
from ..records.scan import scan_batches
from .cleaning import CleaningControl, RoundLog
from .config import MAX_PARTITIONS_PER_TOPIC, SidecarConfig
from .errors import BadRequestError, NotReadyError, TopicExistsError, TopicNotFoundError
from .record_json import records_to_json
from .status_schema import OfflinePartition
from .topic_store import TopicStore

log = logging.getLogger(__name__)

CLEANER_SHUTDOWN_TIMEOUT_S = 10.0


class ProduceResult(NamedTuple):  # made for every produce: a frozen dataclass's __init__ showed in profiles
    base_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    log_end_offset: int
    flushed: bool
    recovery_point: int
    log_start_offset: int = 0  # not in the HTTP answer: for the Kafka listener
    log_append_time_ms: int = -1
    duplicate: bool = False  # an idempotent producer's retry: nothing was written

    def to_dict(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "last_offset": self.last_offset,
                "record_count": self.record_count, "batch_count": self.batch_count,
                "log_end_offset": self.log_end_offset, "flushed": self.flushed,
                "recovery_point": self.recovery_point}


@dataclass(frozen=True)
class FetchResult:
    data: bytes  # whole batches; the first may start below the requested offset
    offset: int
    next_offset: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int


@dataclass(frozen=True)
class _Running:
    """What start() built: set once, when every part exists."""

    manager: LogManager
    cleaner: LogCleaner
    cleaning: CleaningControl
    store: TopicStore


def warm_up(config: LogConfig, now_ms: int) -> None:
    """Run the compiled kernels of the data path once (validation, scans, record walks), so that the
    first requests do not wait for numba to compile or load them."""
    data = build_batch([Record(0, now_ms, b"k", b"v", (("h", b"x"),))])
    validate_request(data, config, now_ms=now_ms, from_client=True)
    records_to_json(data, 0, "base64")


def offsets_of(lg: Log) -> dict[str, int]:
    return {"log_start_offset": lg.log_start_offset, "log_end_offset": lg.log_end_offset,
            "last_stable_offset": lg.last_stable_offset, "recovery_point": lg.recovery_point}


class Sidecar:
    def __init__(self, config: SidecarConfig, *, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.rounds = RoundLog(clock_ms)
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._topic_lock = threading.Lock()
        self._running: _Running | None = None
        self._overrides: dict[str, dict[str, Any]] = {}
        self.start_error: str | None = None
        # called (from the appending thread) with the partition after every produce: wakes the
        # Kafka listener's long-polling fetches
        self.append_listeners: list[Callable[[TopicPartition], None]] = []

    # ------------------------------------------------------------------ life cycle
    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self._stopping.is_set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        cfg = self.config
        # a log forgets its idle producers after the cleaner's producer.id.expiration.ms, the
        # horizon the cleaner keeps their last batches by (one key, as in Kafka)
        manager = LogManager(cfg.manager, clock_ms=self.clock_ms, open_log=functools.partial(
            Log, producer_expiration_ms=cfg.cleaner.producer_id_expiration_ms))
        try:
            store = TopicStore(lambda: manager.live_log_dirs)
            overrides = store.load()
            for spec in cfg.topics.values():
                overrides[spec.name] = dict(spec.configs)
            for topic, props in overrides.items():
                manager.update_topic_config(topic, props)
            cleaner = LogCleaner(cfg.cleaner, manager.live_log_dirs, manager.current_logs, clock_ms=self.clock_ms,
                                 log_dir_failure=lambda d, msg, e: manager.handle_log_dir_failure(d, f"{msg}: {e}"),
                                 message_max_bytes=manager.default_log_config.max_message_bytes,
                                 round_sink=self.rounds.record)
            cleaner.install_hooks(manager.cleaner_hooks)
            self._overrides = overrides
            self._running = _Running(manager, cleaner, CleaningControl(cleaner, self.rounds, self._stopping.is_set),
                                     store)
            manager.startup()
            if self._stopping.is_set():  # a shutdown during recovery: it may have missed the manager
                self.shutdown()
                return
            self._create_declared_partitions(manager)
            warm_up(manager.default_log_config, self.clock_ms())
            cleaner.startup()
        except BaseException:
            if self._running is not None:
                self._running.cleaner.shutdown(CLEANER_SHUTDOWN_TIMEOUT_S)
            manager.shutdown()
            raise
        self._ready.set()
        log.info("sidecar ready: %d partitions in %s", len(manager.all_logs()),
                 ", ".join(str(p) for p in manager.live_log_dirs))

    def _create_declared_partitions(self, manager: LogManager) -> None:
        for spec in self.config.topics.values():
            for p in range(spec.partitions):
                tp = TopicPartition(spec.name, p)
                if manager.get_log(tp) is not None:
                    continue
                try:
                    manager.get_or_create_log(tp)
                except KafkaStorageError as e:
                    log.error("declared partition %s not created: %s", tp, e)

    @property
    def partition_count(self) -> int:
        running = self._running
        return len(running.manager.all_logs()) if running is not None else 0

    def begin_stopping(self) -> None:
        """Not ready from now on: storage calls answer NotReadyError."""
        self._stopping.set()

    def shutdown(self) -> None:
        """Stop the cleaner threads, then flush and close every log (checkpoints, clean-shutdown markers)."""
        self._stopping.set()
        running = self._running
        if running is not None:
            running.cleaner.shutdown(CLEANER_SHUTDOWN_TIMEOUT_S)
            running.manager.shutdown()

    # ------------------------------------------------------------------ accessors
    def _ensure_running(self) -> _Running:
        if self._stopping.is_set():
            raise NotReadyError("the sidecar is shutting down")
        if self._running is None or not self._ready.is_set():
            raise NotReadyError("the sidecar is recovering its logs: not ready yet")
        return self._running

    @property
    def manager(self) -> LogManager:
        return self._ensure_running().manager

    @property
    def cleaner(self) -> LogCleaner:
        return self._ensure_running().cleaner

    @property
    def cleaning(self) -> CleaningControl:
        return self._ensure_running().cleaning

    def partition_log(self, tp: TopicPartition) -> Log:
        lg = self.manager.get_log(tp)
        if lg is None:
            self.manager.raise_if_offline(tp)  # KafkaStorageError naming the partition and its dir
            raise UnknownPartitionError(f"no log for partition {tp}")
        return lg

    def offline_partitions(self, topic: str | None = None) -> list[OfflinePartition]:
        """The known partitions that cannot be served (of one topic, or all), as listed by the
        status and the partitions endpoint."""
        return [OfflinePartition(topic=tp.topic, partition=tp.partition, state="offline",
                                 log_dir=str(o.log_dir.path), paths=list(o.paths), error=o.reason)
                for tp, o in sorted(self.manager.offline_partitions().items(),
                                    key=lambda x: (x[0].topic, x[0].partition))
                if topic is None or tp.topic == topic]

    def _offline_numbers(self, topic: str) -> list[int]:
        return [tp.partition for tp in self.manager.offline_partitions() if tp.topic == topic]

    def _known_topic(self, topic: str) -> tuple[list[Log], list[int]]:
        """The topic's logs and offline partition numbers (the topic lock held);
        TopicNotFoundError when it has neither and the API does not know it."""
        logs = self.manager.logs_by_topic(topic)
        offline = self._offline_numbers(topic)
        if not logs and not offline and topic not in self._overrides:
            raise TopicNotFoundError(f"unknown topic {topic!r}")
        return logs, offline

    # ------------------------------------------------------------------ topics
    def topic_names(self) -> list[str]:
        manager = self.manager
        with self._topic_lock:
            found = (set(self._overrides) | {tp.topic for tp in manager.current_logs()}
                     | {tp.topic for tp in manager.offline_partitions()})
        return sorted(found)

    def describe_topic(self, topic: str) -> dict[str, Any]:
        manager = self.manager
        with self._topic_lock:
            logs, offline = self._known_topic(topic)
            overrides = dict(self._overrides.get(topic, {}))
        # offline partitions are listed apart: they exist (a client must not create them again)
        # but serve nothing until their directory is repaired
        return {"name": topic, "partitions": sorted(lg.topic_partition.partition for lg in logs),
                "offline_partitions": sorted(offline),
                "declared": topic in self.config.topics, "configs": overrides,
                "effective_configs": manager.config_for(topic).to_props()}

    def list_topics(self) -> list[dict[str, Any]]:
        out = []
        for name in self.topic_names():
            try:
                out.append(self.describe_topic(name))
            except TopicNotFoundError:
                continue  # deleted meanwhile
        return out

    def create_topic(self, topic: str, partitions: int, configs: Mapping[str, Any]) -> dict[str, Any]:
        names.validate_topic(topic)
        _check_partition_count(partitions)
        parsed = validate_topic_configs(configs)
        manager = self.manager
        with self._topic_lock:
            if topic in self._overrides or manager.logs_by_topic(topic) or self._offline_numbers(topic):
                raise TopicExistsError(f"topic {topic!r} already exists")
            self._save_overrides(manager, topic, parsed)
            created: list[TopicPartition] = []
            try:
                for p in range(partitions):
                    tp = TopicPartition(topic, p)
                    manager.get_or_create_log(tp, is_new=True)
                    created.append(tp)
            except BaseException:
                for tp in created:
                    manager.delete_log(tp)
                self._forget_overrides(manager, topic)
                raise
        return self.describe_topic(topic)

    def update_topic_configs(self, topic: str, configs: Mapping[str, Any]) -> dict[str, Any]:
        parsed = validate_topic_configs(configs)
        manager = self.manager
        with self._topic_lock:
            if topic not in self._overrides and not manager.logs_by_topic(topic):
                raise TopicNotFoundError(f"unknown topic {topic!r}")
            self._save_overrides(manager, topic, parsed)
        return self.describe_topic(topic)

    def add_partitions(self, topic: str, count: int) -> dict[str, Any]:
        _check_partition_count(count)
        manager = self.manager
        with self._topic_lock:
            logs = manager.logs_by_topic(topic)
            existing = {lg.topic_partition.partition for lg in logs} | set(self._offline_numbers(topic))
            if not existing and topic not in self._overrides:
                raise TopicNotFoundError(f"unknown topic {topic!r}")
            if count <= len(existing):
                raise BadRequestError(f"topic {topic!r} has {len(existing)} partitions, not fewer than the "
                                      f"{count} asked")
            offline_dirs = manager.offline_log_dirs
            if offline_dirs:  # a missing partition number may be on them: growing would hide it
                raise KafkaStorageError(", ".join(map(str, offline_dirs)), (
                    f"cannot add partitions to {topic!r} while these log directories are offline"))
            if topic not in self._overrides:
                self._save_overrides(manager, topic, {})  # a topic found on disk: now the API's
            for p in range(count):
                if p not in existing:
                    manager.get_or_create_log(TopicPartition(topic, p), is_new=True)
        return self.describe_topic(topic)

    def delete_topic(self, topic: str) -> None:
        manager = self.manager
        with self._topic_lock:
            logs, offline = self._known_topic(topic)
            if offline:  # deleting the rest would leave a topic half there when the dir comes back
                manager.raise_if_offline(TopicPartition(topic, offline[0]))
            for lg in logs:
                manager.delete_log(lg.topic_partition)
                self.rounds.forget(lg.topic_partition)
            self._forget_overrides(manager, topic)

    def delete_partition(self, tp: TopicPartition) -> None:
        manager = self.manager
        with self._topic_lock:
            self.partition_log(tp)
            manager.delete_log(tp)
            self.rounds.forget(tp)

    def _save_overrides(self, manager: LogManager, topic: str, props: dict[str, Any]) -> None:
        if topic not in self.config.topics:
            self._ensure_running().store.put(topic, props)  # declared topics take the file's configs at every start
        manager.update_topic_config(topic, props)
        self._overrides[topic] = dict(props)

    def _forget_overrides(self, manager: LogManager, topic: str) -> None:
        store = self._ensure_running().store
        if topic in store.snapshot():
            store.remove(topic)
        manager.update_topic_config(topic, {})
        self._overrides.pop(topic, None)

    # ------------------------------------------------------------------ data
    def produce(self, tp: TopicPartition, data: bytes, *, flush: bool) -> ProduceResult:
        self.partition_log(tp)
        return self._produced(tp, self.manager.append(tp, data), flush)

    def try_produce(self, tp: TopicPartition, data: bytes) -> ProduceResult | None:
        """``produce`` (no flush) when the append is quick (LogManager.try_append), else None."""
        self.partition_log(tp)
        info = self.manager.try_append(tp, data)
        return None if info is None else self._produced(tp, info, False)

    def _produced(self, tp: TopicPartition, info: LogAppendInfo, flush: bool) -> ProduceResult:
        manager = self.manager
        lg = self.partition_log(tp)
        recovery_point = manager.flush(tp) if flush else lg.recovery_point
        for listener in self.append_listeners:
            listener(tp)
        return ProduceResult(info.first_offset, info.last_offset, info.num_records, info.num_batches,
                             info.last_offset + 1, flush, recovery_point, lg.log_start_offset,
                             info.log_append_time_ms, info.duplicate)

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> FetchResult:
        manager = self.manager
        lg = self.partition_log(tp)
        data = manager.read(tp, offset, max_bytes).read_bytes
        next_offset = offset
        if data:
            table = scan_batches(np.frombuffer(data, dtype=np.uint8), 0, None)
            if len(table):
                next_offset = max(offset, int(table.base_offset[-1]) + int(table.last_offset_delta[-1]) + 1)
        return FetchResult(bytes(data), offset, next_offset, lg.log_start_offset, lg.log_end_offset,
                           lg.last_stable_offset)

    def offsets(self, tp: TopicPartition) -> dict[str, Any]:
        lg = self.partition_log(tp)
        return {"topic": tp.topic, "partition": tp.partition, **offsets_of(lg)}

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        logs = self.manager.logs_by_topic(topic)
        offline: list[dict[str, Any]] = [dict(o) for o in self.offline_partitions(topic)]
        with self._topic_lock:
            known = topic in self._overrides
        if not logs and not offline and not known:
            raise TopicNotFoundError(f"unknown topic {topic!r}")
        online = [{"topic": topic, "partition": lg.topic_partition.partition, "state": "online",
                   "log_dir": str(Path(lg.dir).parent), "size_bytes": lg.size_in_bytes, "segments": len(lg.segments),
                   **offsets_of(lg)} for lg in logs]
        return sorted(online + offline, key=lambda e: int(e["partition"]))


def _check_partition_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
        raise BadRequestError(f"partitions must be an integer from 1 to {MAX_PARTITIONS_PER_TOPIC}, got {count!r}")
