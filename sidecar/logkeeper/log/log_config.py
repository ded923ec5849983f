"""LogConfig: Kafka's topic-level config keys with Kafka 4.0's defaults.

Each key is defined once in ``TOPIC_SETTINGS`` (type, default, validator, doc); LogConfig's
fields carry the same names with dots as underscores, and a unit test checks both agree.
``validate_topic_configs`` checks a topic's overrides (from the config file, the API, the
Kafka listener, the operator) against them. Deliberate choices: none yet (every default is
Kafka's; ``message.timestamp.after.max.ms`` follows Kafka 4.0, where it became one hour).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from ..errors import InvalidConfigError
from ..settings import LONG_MAX, Setting, SettingGroup, at_least, between, one_of, subset_of

DAY_MS = 24 * 60 * 60 * 1000

TOPIC_SETTINGS = SettingGroup("topic", (
    Setting("segment.bytes", int, 1024 * 1024 * 1024, "Size at which a segment is rolled.",
            at_least(14), "bytes"),
    Setting("segment.ms", int, 7 * DAY_MS, "Age of a segment's first record after which it is rolled.",
            at_least(1), "ms"),
    Setting("segment.jitter.ms", int, 0, "Random jitter subtracted from segment.ms per segment.",
            at_least(0), "ms"),
    Setting("segment.index.bytes", int, 10 * 1024 * 1024, "Preallocated size of each index file.",
            at_least(4), "bytes"),
    Setting("index.interval.bytes", int, 4096, "Bytes appended between two offset index entries.",
            at_least(0), "bytes"),
    Setting("retention.ms", int, 7 * DAY_MS, "Age after which segments are deleted (-1: never).",
            at_least(-1), "ms"),
    Setting("retention.bytes", int, -1, "Size beyond which old segments are deleted (-1: never).",
            None, "bytes"),
    Setting("flush.messages", int, LONG_MAX, "Messages appended between forced fsyncs.", at_least(1)),
    Setting("flush.ms", int, LONG_MAX, "Time between forced fsyncs.", at_least(0), "ms"),
    Setting("file.delete.delay.ms", int, 60000, "Delay before a file renamed .deleted is removed.",
            at_least(0), "ms"),
    Setting("cleanup.policy", list, ["delete"], "delete, compact or both.", subset_of("delete", "compact")),
    Setting("min.cleanable.dirty.ratio", float, 0.5, "Dirty share of a log above which it is cleaned.",
            between(0.0, 1.0)),
    Setting("min.compaction.lag.ms", int, 0, "Minimum age of a record before it may be compacted.",
            at_least(0), "ms"),
    Setting("max.compaction.lag.ms", int, LONG_MAX, "Maximum time a record stays uncompacted.",
            at_least(1), "ms"),
    Setting("delete.retention.ms", int, DAY_MS, "How long tombstones are kept after cleaning.",
            at_least(0), "ms"),
    Setting("max.message.bytes", int, 1048588, "Largest record batch accepted.", at_least(0), "bytes"),
    Setting("message.timestamp.type", str, "CreateTime", "CreateTime or LogAppendTime.",
            one_of("CreateTime", "LogAppendTime")),
    Setting("message.timestamp.before.max.ms", int, LONG_MAX,
            "How far before the append time a CreateTime timestamp may be.", at_least(0), "ms"),
    Setting("message.timestamp.after.max.ms", int, 3600000,
            "How far after the append time a CreateTime timestamp may be.", at_least(0), "ms"),
    Setting("compression.type", str, "producer", "Codec of stored batches (producer keeps theirs).",
            one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    Setting("preallocate", bool, False, "Preallocate segment files (accepted for compatibility).",
            None),
))


class AppendRules(NamedTuple):
    """The settings every append is checked against (``validator.py``), read once per config."""

    max_message_bytes: int
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    create_time: bool  # message.timestamp.type is CreateTime (else LogAppendTime)
    compact: bool


@dataclass(frozen=True)
class LogConfig:
    """A topic's log settings (Kafka's LogConfig), one field a key of TOPIC_SETTINGS."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    flush_messages: int
    flush_ms: int
    file_delete_delay_ms: int
    cleanup_policy: list[str]
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    compression_type: str
    preallocate: bool

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None) -> LogConfig:
        """Kafka's defaults overlaid with ``props`` (dotted keys, typed values or strings)."""
        return cls(**TOPIC_SETTINGS.resolve(props))

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        merged = self.to_props()
        merged.update(props)
        return LogConfig.from_props(merged)

    def to_props(self) -> dict[str, Any]:
        return {s.key: getattr(self, s.attr) for s in TOPIC_SETTINGS.settings}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @cached_property
    def append_rules(self) -> AppendRules:
        return AppendRules(self.max_message_bytes, self.message_timestamp_before_max_ms,
                           self.message_timestamp_after_max_ms, self.message_timestamp_type == "CreateTime",
                           self.compact)

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes


# Kafka declares these topic keys as Java ints, the other integer keys as longs (TopicConfig).
JAVA_INT_TOPIC_KEYS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes"})
INT32_MAX = (1 << 31) - 1


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Topic-level overrides parsed and validated: ``{key: value}`` (InvalidConfigError names the key).
    Integers must also fit Kafka's type of the key (int or long), as a broker would require."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        setting = TOPIC_SETTINGS.by_key.get(str(key))
        if setting is None:
            raise InvalidConfigError(f"unknown topic config key {key!r}")
        value = setting.parse(raw)
        if setting.type is int:
            limit = INT32_MAX if setting.key in JAVA_INT_TOPIC_KEYS else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise InvalidConfigError(f"invalid value {raw!r} for config {setting.key}: must be at most {limit}")
        out[setting.key] = value
    return out
