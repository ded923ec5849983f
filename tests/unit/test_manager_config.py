"""ManagerConfig: Kafka's broker keys and defaults, and broker synonyms of topic keys."""

from __future__ import annotations

from dataclasses import fields

import pytest

from logkeeper.errors import InvalidConfigError
from logkeeper.log.log_config import TOPIC_SETTINGS, LogConfig
from logkeeper.log.manager_config import (
    BROKER_LOG_DEFAULT_SETTINGS,
    MANAGER_SETTINGS,
    TOPIC_SYNONYMS,
    ManagerConfig,
)
from logkeeper.settings import LONG_MAX


def test_every_manager_setting_has_its_field_and_back() -> None:
    names = {f.name for f in fields(ManagerConfig)} - {"default_log_config"}
    assert names == {s.attr for s in MANAGER_SETTINGS.settings}


def test_kafka_defaults() -> None:
    c = ManagerConfig.from_props()
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert c.num_recovery_threads_per_data_dir == 1  # Kafka 3's value: a second thread contends for the GIL
    assert c.log_retention_check_interval_ms == 300_000
    assert c.log_flush_scheduler_interval_ms == LONG_MAX
    assert c.log_flush_offset_checkpoint_interval_ms == 60_000
    assert c.log_flush_start_offset_checkpoint_interval_ms == 60_000
    assert c.log_initial_task_delay_ms == 30_000
    assert c.default_log_config == LogConfig.from_props()


def test_values_from_strings() -> None:
    c = ManagerConfig.from_props({"log.dirs": "/a, /b", "num.recovery.threads.per.data.dir": "4"})
    assert c.log_dirs == ["/a", "/b"]
    assert c.num_recovery_threads_per_data_dir == 4


@pytest.mark.parametrize(("key", "value"), [("num.recovery.threads.per.data.dir", 0), ("log.dirs", ""),
                                            ("log.retention.check.interval.ms", 0),
                                            ("log.segment.bytes", 1), ("log.retention.hours", "x")])
def test_bad_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        ManagerConfig.from_props({key: value})


def test_unknown_keys_strict_or_skipped() -> None:
    with pytest.raises(InvalidConfigError, match=r"log\.cleaner\.threads"):
        ManagerConfig.from_props({"log.cleaner.threads": 2})
    assert ManagerConfig.from_props({"log.cleaner.threads": 2}, strict=False).log_dirs == ["/tmp/kafka-logs"]
    with pytest.raises(InvalidConfigError):
        ManagerConfig.from_props({"retention.ms": 5})  # a topic key is not a broker key


def test_synonyms_set_topic_defaults() -> None:
    c = ManagerConfig.from_props({"log.segment.bytes": 2048, "log.segment.delete.delay.ms": 5,
                                  "log.cleanup.policy": "compact,delete", "message.max.bytes": 100,
                                  "log.cleaner.min.cleanable.ratio": 0.25})
    d = c.default_log_config
    assert (d.segment_bytes, d.file_delete_delay_ms, d.cleanup_policy, d.max_message_bytes) == (
        2048, 5, ["compact", "delete"], 100)
    assert d.min_cleanable_dirty_ratio == 0.25


def test_retention_precedence_ms_then_minutes_then_hours() -> None:
    assert ManagerConfig.from_props({"log.retention.hours": 2}).default_log_config.retention_ms == 7_200_000
    assert ManagerConfig.from_props({"log.retention.hours": 2, "log.retention.minutes": 3}
                                    ).default_log_config.retention_ms == 180_000
    assert ManagerConfig.from_props({"log.retention.hours": 2, "log.retention.minutes": 3,
                                     "log.retention.ms": 7}).default_log_config.retention_ms == 7
    assert ManagerConfig.from_props({"log.retention.hours": -1}).default_log_config.retention_ms == -1


def test_roll_hours_and_ms() -> None:
    assert ManagerConfig.from_props({"log.roll.hours": 1}).default_log_config.segment_ms == 3_600_000
    assert ManagerConfig.from_props({"log.roll.hours": 1, "log.roll.ms": 9}).default_log_config.segment_ms == 9


def test_flush_ms_falls_back_to_the_scheduler_interval() -> None:
    assert ManagerConfig.from_props().default_log_config.flush_ms == LONG_MAX
    c = ManagerConfig.from_props({"log.flush.scheduler.interval.ms": 500})
    assert c.log_flush_scheduler_interval_ms == 500
    assert c.default_log_config.flush_ms == 500
    c = ManagerConfig.from_props({"log.flush.scheduler.interval.ms": 500, "log.flush.interval.ms": 70})
    assert c.default_log_config.flush_ms == 70


def test_every_synonym_targets_a_topic_key_and_is_defined_once() -> None:
    assert set(TOPIC_SYNONYMS) <= set(TOPIC_SETTINGS.by_key)
    broker_keys = [s.key for s in BROKER_LOG_DEFAULT_SETTINGS.settings]
    assert len(broker_keys) == len(set(broker_keys))
    assert not set(broker_keys) & set(MANAGER_SETTINGS.by_key)
    assert all(s.default is None for s in BROKER_LOG_DEFAULT_SETTINGS.settings)


def test_for_dirs_shorthand() -> None:
    c = ManagerConfig.for_dirs("/x", "/y", log_retention_check_interval_ms=10, log_segment_bytes=4096)
    assert c.log_dirs == ["/x", "/y"]
    assert c.log_retention_check_interval_ms == 10
    assert c.default_log_config.segment_bytes == 4096
    with pytest.raises(InvalidConfigError):
        ManagerConfig.for_dirs("/x", no_such_thing=1)


def test_with_default_log_config() -> None:
    c = ManagerConfig.from_props()
    other = LogConfig.from_props({"retention.ms": 5})
    assert c.with_default_log_config(other).default_log_config is other
