"""Broker-level configuration of the LogManager: its own keys and the broker defaults of topic keys.

Two groups of settings, each defined once:

``MANAGER_SETTINGS``: what the LogManager itself reads (Kafka's broker keys and defaults).

| key                                            | default       | what                              |
|------------------------------------------------|---------------|-----------------------------------|
| log.dirs                                       | /tmp/kafka-logs | the log directories (disks)     |
| num.recovery.threads.per.data.dir              | 1             | load/close threads per directory  |
| log.retention.check.interval.ms                | 300000        | period of the retention pass      |
| log.flush.scheduler.interval.ms                | 2^63 - 1      | period of the flush.ms check      |
| log.flush.offset.checkpoint.interval.ms        | 60000         | recovery-point checkpoint period  |
| log.flush.start.offset.checkpoint.interval.ms  | 60000         | log-start-offset checkpoint period|
| log.initial.task.delay.ms                      | 30000         | delay before the first background run |
| producer.id.expiration.check.interval.ms       | 600000        | period of the producer expiry task |

``BROKER_LOG_DEFAULT_SETTINGS``: Kafka's broker synonyms of topic keys (``log.segment.bytes``,
``log.retention.hours``, ...). They are unset by default; the first synonym set (in Kafka's order,
converted to the topic key's unit) becomes the default of that topic key for every log, and a
topic key with no synonym set keeps LogConfig's default. A topic's own overrides win over both.

Deliberate choices: num.recovery.threads.per.data.dir is 1, Kafka 3's value, not Kafka 4.0's 2
(KIP-1030): loading a log is mostly Python under the GIL, and a second thread only hands the GIL
back and forth at every system call, so it loads slower, warm or cold (bench/results/startup.md).
Each directory still has its own pool. Kafka's
default log.flush.scheduler.interval.ms (2^63 - 1) is kept: the flusher then runs once, after the
initial delay, so a topic's flush.ms only takes effect with a shorter scheduler interval (as in
Kafka). Keys no one reads here (``log.cleaner.*`` of the cleaner, ``broker.id``...) are rejected
by ``from_props(strict=True)`` and skipped with ``strict=False``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from ..errors import InvalidConfigError
from ..settings import LONG_MAX, Setting, SettingGroup, Validator, at_least
from .log_config import TOPIC_SETTINGS, LogConfig

HOUR_MS = 60 * 60 * 1000
MINUTE_MS = 60 * 1000


def _non_empty(value: list[str]) -> str | None:
    return None if value else "must name at least one directory"


MANAGER_SETTINGS = SettingGroup("broker", (
    Setting("log.dirs", list, ["/tmp/kafka-logs"], "Directories (one per disk) holding partition directories.",
            _non_empty),
    Setting("num.recovery.threads.per.data.dir", int, 1,
            "Threads per log directory that load logs at startup and flush them at shutdown.", at_least(1)),
    Setting("log.retention.check.interval.ms", int, 300000,
            "How often logs are checked for segments to delete by retention.", at_least(1), "ms"),
    Setting("log.flush.scheduler.interval.ms", int, LONG_MAX,
            "How often logs are checked for a flush due by flush.ms.", at_least(0), "ms"),
    Setting("log.flush.offset.checkpoint.interval.ms", int, 60000,
            "How often the recovery points are written to recovery-point-offset-checkpoint.", at_least(0), "ms"),
    Setting("log.flush.start.offset.checkpoint.interval.ms", int, 60000,
            "How often log start offsets are written to log-start-offset-checkpoint.", at_least(0), "ms"),
    Setting("log.initial.task.delay.ms", int, 30000,
            "Delay after startup before the first run of each background task.", at_least(0), "ms"),
    Setting("producer.id.expiration.check.interval.ms", int, 600000,
            "How often each log forgets the producers idle for producer.id.expiration.ms (a cleaner key).",
            at_least(1), "ms"),
))


class Synonym(NamedTuple):
    """A broker key that sets the default of a topic key: value * ``multiplier``."""

    broker_key: str
    multiplier: int = 1


# Kafka's synonyms, first match wins (ServerTopicConfigSynonyms). log.flush.scheduler.interval.ms
# is a manager setting above, and also the last fallback of flush.ms.
TOPIC_SYNONYMS: dict[str, tuple[Synonym, ...]] = {
    "segment.bytes": (Synonym("log.segment.bytes"),),
    "segment.ms": (Synonym("log.roll.ms"), Synonym("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (Synonym("log.index.size.max.bytes"),),
    "index.interval.bytes": (Synonym("log.index.interval.bytes"),),
    "flush.messages": (Synonym("log.flush.interval.messages"),),
    "flush.ms": (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
    "retention.bytes": (Synonym("log.retention.bytes"),),
    "retention.ms": (Synonym("log.retention.ms"), Synonym("log.retention.minutes", MINUTE_MS),
                     Synonym("log.retention.hours", HOUR_MS)),
    "max.message.bytes": (Synonym("message.max.bytes"),),
    "delete.retention.ms": (Synonym("log.cleaner.delete.retention.ms"),),
    "min.compaction.lag.ms": (Synonym("log.cleaner.min.compaction.lag.ms"),),
    "max.compaction.lag.ms": (Synonym("log.cleaner.max.compaction.lag.ms"),),
    "file.delete.delay.ms": (Synonym("log.segment.delete.delay.ms"),),
    "min.cleanable.dirty.ratio": (Synonym("log.cleaner.min.cleanable.ratio"),),
    "cleanup.policy": (Synonym("log.cleanup.policy"),),
    "compression.type": (Synonym("compression.type"),),
    "preallocate": (Synonym("log.preallocate"),),
    "message.timestamp.type": (Synonym("log.message.timestamp.type"),),
    "message.timestamp.before.max.ms": (Synonym("log.message.timestamp.before.max.ms"),),
    "message.timestamp.after.max.ms": (Synonym("log.message.timestamp.after.max.ms"),),
}


def _convert(topic_key: str, synonym: Synonym, value: Any) -> Any:
    if synonym.multiplier == 1:
        return value
    if topic_key == "retention.ms" and value < 0:
        return -1  # Kafka: any negative retention time means "keep forever"
    return value * synonym.multiplier


def _synonym_validator(topic_setting: Setting, synonym: Synonym) -> Validator | None:
    check = topic_setting.validator
    if check is None:
        return None
    return lambda v: check(_convert(topic_setting.key, synonym, v))


def _broker_default_settings() -> SettingGroup:
    out = []
    for topic_key, synonyms in TOPIC_SYNONYMS.items():
        topic_setting = TOPIC_SETTINGS.by_key[topic_key]
        for syn in synonyms:
            if syn.broker_key in MANAGER_SETTINGS.by_key:
                continue
            unit = "hours" if syn.multiplier == HOUR_MS else "minutes" if syn.multiplier == MINUTE_MS \
                else topic_setting.unit
            out.append(Setting(syn.broker_key, topic_setting.type, None,
                               f"Broker default of {topic_key}: {topic_setting.doc}",
                               _synonym_validator(topic_setting, syn), unit))
    return SettingGroup("broker log default", tuple(out))


BROKER_LOG_DEFAULT_SETTINGS = _broker_default_settings()


@dataclass(frozen=True)
class ManagerConfig:
    """The LogManager's broker settings, and the topic defaults they imply."""

    log_dirs: list[str]
    num_recovery_threads_per_data_dir: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_initial_task_delay_ms: int
    producer_id_expiration_check_interval_ms: int
    default_log_config: LogConfig

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None, *, strict: bool = True) -> ManagerConfig:
        """Kafka's defaults overlaid with broker ``props`` (dotted keys, typed values or strings)."""
        props = dict(props or {})
        own = {k: v for k, v in props.items() if k in MANAGER_SETTINGS.by_key}
        synonyms = {k: v for k, v in props.items() if k in BROKER_LOG_DEFAULT_SETTINGS.by_key}
        unknown = sorted(set(props) - set(own) - set(synonyms))
        if unknown and strict:
            raise InvalidConfigError(f"unknown broker config keys {unknown}")
        values = MANAGER_SETTINGS.resolve(own)
        broker_values = BROKER_LOG_DEFAULT_SETTINGS.resolve(synonyms)
        broker_values.update(values)  # log.flush.scheduler.interval.ms is both
        return cls(**values, default_log_config=LogConfig.from_props(_topic_defaults(broker_values)))

    @classmethod
    def for_dirs(cls, *dirs: object, **props: Any) -> ManagerConfig:
        """Shorthand for tests and tools: ``for_dirs(a, b, log_retention_check_interval_ms=10)``
        (underscored keyword names are turned back into dotted keys)."""
        dotted = {_dotted(k): v for k, v in props.items()}
        return cls.from_props({"log.dirs": [str(d) for d in dirs], **dotted})

    def with_default_log_config(self, config: LogConfig) -> ManagerConfig:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["default_log_config"] = config
        return ManagerConfig(**values)


def _topic_defaults(broker_values: Mapping[str, Any]) -> dict[str, Any]:
    """Topic keys whose default a broker synonym sets: {topic key: converted value}."""
    out: dict[str, Any] = {}
    all_settings = {**BROKER_LOG_DEFAULT_SETTINGS.by_key, **MANAGER_SETTINGS.by_key}
    for topic_key, synonyms in TOPIC_SYNONYMS.items():
        for syn in synonyms:
            value = broker_values.get(all_settings[syn.broker_key].attr)
            if value is None:
                continue
            if syn.broker_key == "log.flush.scheduler.interval.ms" and value == LONG_MAX:
                break  # its default is the topic default (LONG_MAX): nothing set
            out[topic_key] = _convert(topic_key, syn, value)
            break
    return out


def _dotted(name: str) -> str:
    for setting in (*MANAGER_SETTINGS.settings, *BROKER_LOG_DEFAULT_SETTINGS.settings):
        if setting.attr == name:
            return setting.key
    raise InvalidConfigError(f"unknown broker config {name!r}")
