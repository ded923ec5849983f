"""LogConfig: one definition per key, Kafka's defaults, validation naming the key."""

from __future__ import annotations

from dataclasses import fields

import pytest

from logkeeper.errors import InvalidConfigError
from logkeeper.log.log_config import TOPIC_SETTINGS, LogConfig


def test_every_setting_has_a_field_and_every_field_a_setting() -> None:
    assert [s.attr for s in TOPIC_SETTINGS.settings] == [f.name for f in fields(LogConfig)]


def test_kafka_defaults() -> None:
    c = LogConfig.from_props()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == 7 * 24 * 3600 * 1000
    assert c.segment_index_bytes == 10 * 1024 * 1024
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 7 * 24 * 3600 * 1000 and c.retention_bytes == -1
    assert c.cleanup_policy == ["delete"] and not c.compact
    assert c.min_cleanable_dirty_ratio == 0.5
    assert c.delete_retention_ms == 86_400_000
    assert c.max_message_bytes == 1048588
    assert c.file_delete_delay_ms == 60000
    assert c.message_timestamp_type == "CreateTime"


def test_strings_are_parsed_and_lists_split() -> None:
    c = LogConfig.from_props({"segment.bytes": "1024", "cleanup.policy": "compact, delete",
                              "min.cleanable.dirty.ratio": "0.1", "preallocate": "true"})
    assert c.segment_bytes == 1024 and c.compact and c.delete
    assert c.min_cleanable_dirty_ratio == 0.1 and c.preallocate is True


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("segment.bytes", "10", "segment.bytes"),
    ("segment.bytes", "lots", "segment.bytes"),
    ("cleanup.policy", "compact,shred", "cleanup.policy"),
    ("min.cleanable.dirty.ratio", 1.5, "min.cleanable.dirty.ratio"),
    ("message.timestamp.type", "WallClock", "message.timestamp.type"),
    ("segment.byte", 1000, "segment.byte"),
])
def test_bad_values_name_the_key(key: str, value: object, fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=fragment):
        LogConfig.from_props({key: value})


def test_with_overrides_keeps_the_rest() -> None:
    base = LogConfig.from_props({"segment.bytes": 5000})
    c = base.with_overrides({"cleanup.policy": "compact"})
    assert c.segment_bytes == 5000 and c.compact
