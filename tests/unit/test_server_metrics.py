"""server/metrics.py: Kafka's JMX names mapped to Prometheus names, and a scrape that parses."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from logkeeper.cleaner.metrics import CleanerMetrics
from logkeeper.server.metrics import Metrics, kafka_metric_name


def test_name_mapping() -> None:
    assert kafka_metric_name("log", "LogCleaner", "max-buffer-utilization-percent") == \
        "kafka_log_LogCleaner_max_buffer_utilization_percent"
    assert kafka_metric_name("log", "LogCleaner", "DeadThreadCount") == "kafka_log_LogCleaner_DeadThreadCount"
    assert kafka_metric_name("log", "Log", "Size") == "kafka_log_Log_Size"


def fake_status() -> dict[str, Any]:
    cleaner = CleanerMetrics(max_buffer_utilization_percent=42, dead_thread_count=1, rounds=3,
                             uncleanable_partitions_count={"/d0": 1}, uncleanable_bytes={"/d0": 100}).to_dict()
    part = {"topic": "t", "partition": 0, "size_bytes": 10, "segments": 2, "log_start_offset": 0,
            "log_end_offset": 5, "dirty_ratio": 0.5, "cleanable_bytes": 7, "uncleanable": {"reason": "x"},
            "backlog": False, "cleaning_state": "paused(1)"}
    return {"ready": True, "cleaner": cleaner, "partitions": [part, {**part, "partition": 1, "dirty_ratio": None,
                                                                      "cleanable_bytes": None, "uncleanable": None,
                                                                      "cleaning_state": "none"}],
            "log_dirs": [{"path": "/d0", "online": True, "size_bytes": 10, "usable_bytes": 99},
                         {"path": "/d1", "online": False, "size_bytes": 0, "usable_bytes": None}],
            "offline_partitions": [{"topic": "t", "partition": 2, "state": "offline", "log_dir": "/d1",
                                    "paths": ["/d1/t-2"], "error": "EIO"}]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_scrape_parses_with_kafka_names() -> None:
    m = Metrics(fake_status)
    m.observe("GET", "/v1/status", 200, 0.003)
    got = samples(m.exposition().decode())
    assert got[("kafka_log_LogCleaner_max_buffer_utilization_percent", ())] == 42
    assert got[("kafka_log_LogCleaner_DeadThreadCount", ())] == 1
    assert got[("kafka_log_LogCleanerManager_uncleanable_partitions_count", (("logDirectory", "/d0"),))] == 1
    assert got[("kafka_log_LogCleanerManager_uncleanable_bytes", (("logDirectory", "/d0"),))] == 100
    assert got[("kafka_log_Log_Size", (("partition", "0"), ("topic", "t")))] == 10
    assert got[("kafka_log_Log_LogEndOffset", (("partition", "0"), ("topic", "t")))] == 5
    assert got[("kafka_log_LogManager_OfflineLogDirectoryCount", ())] == 1
    assert got[("kafka_log_LogManager_LogDirectoryOffline", (("logDirectory", "/d1"),))] == 1
    assert got[("logkeeper_partition_offline", (("logDirectory", "/d1"), ("partition", "2"), ("topic", "t")))] == 1
    assert got[("logkeeper_partition_dirty_ratio", (("partition", "0"), ("topic", "t")))] == 0.5
    assert ("logkeeper_partition_dirty_ratio", (("partition", "1"), ("topic", "t"))) not in got
    assert got[("logkeeper_partition_uncleanable", (("partition", "0"), ("topic", "t")))] == 1
    assert got[("logkeeper_partition_cleaning_state", (("partition", "0"), ("state", "paused(1)"),
                                                       ("topic", "t")))] == 1
    assert got[("logkeeper_cleaner_rounds_total", ())] == 3
    assert got[("logkeeper_ready", ())] == 1
    assert got[("logkeeper_http_requests_total", (("method", "GET"), ("route", "/v1/status"), ("status", "200")))] == 1
    assert any(name == "process_resident_memory_bytes" for name, _ in got)


def test_scrape_while_not_ready() -> None:
    got = samples(Metrics(lambda: None).exposition().decode())
    assert got[("logkeeper_ready", ())] == 0
    assert not any(name.startswith("kafka_") for name, _ in got)
