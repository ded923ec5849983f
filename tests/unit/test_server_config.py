"""server/config.py: the sidecar's YAML file, its sections, environment overrides and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.cleaner.config import CLEANER_SETTINGS
from logkeeper.errors import InvalidConfigError
from logkeeper.log.log_config import validate_topic_configs
from logkeeper.log.manager_config import BROKER_LOG_DEFAULT_SETTINGS, MANAGER_SETTINGS
from logkeeper.server.config import (
    SIDECAR_SETTINGS,
    config_from_document,
    env_name,
    env_overrides_map,
    load_config,
    parse_listen_address,
)

FULL = """
sidecar:
  listen: ["127.0.0.1:0", "[::1]:9000"]
  token.file: /run/token
  max.request.bytes: 2048
node:
  log.dirs: [/data/a, /data/b]
  log.retention.check.interval.ms: 1000
  num.recovery.threads.per.data.dir: 3
  log.segment.bytes: 1048576
cleaner:
  log.cleaner.threads: 2
topics:
  accounts:
    partitions: 3
    configs: {cleanup.policy: compact, min.cleanable.dirty.ratio: "0.2"}
  plain: {}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(text)
    return path


def test_full_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), environ={})
    assert cfg.sidecar.listen_addresses == [("127.0.0.1", 0), ("::1", 9000)]
    assert cfg.sidecar.token_file == "/run/token" and cfg.sidecar.max_request_bytes == 2048
    assert cfg.manager.log_dirs == ["/data/a", "/data/b"]
    assert cfg.manager.log_retention_check_interval_ms == 1000
    assert cfg.manager.num_recovery_threads_per_data_dir == 3
    assert cfg.manager.default_log_config.segment_bytes == 1048576  # a broker default of a topic key
    assert cfg.cleaner.log_cleaner_threads == 2
    assert cfg.topics["accounts"].partitions == 3
    assert cfg.topics["accounts"].configs == {"cleanup.policy": ["compact"], "min.cleanable.dirty.ratio": 0.2}
    assert cfg.topics["plain"].partitions == 1 and cfg.topics["plain"].configs == {}


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    env = {"LOGKEEPER_LOG_DIRS": "/x,/y", "LOGKEEPER_LISTEN": "127.0.0.1:7000", "LOGKEEPER_TOKEN_FILE": "/t",
           "LOGKEEPER_LOG_CLEANER_THREADS": "4", "LOGKEEPER_LOG_RETENTION_CHECK_INTERVAL_MS": "5",
           "LOGKEEPER_SOMETHING_ELSE": "ignored", "OTHER": "x"}
    cfg = load_config(write(tmp_path, FULL), environ=env)
    assert cfg.manager.log_dirs == ["/x", "/y"]
    assert cfg.sidecar.listen == ["127.0.0.1:7000"] and cfg.sidecar.token_file == "/t"
    assert cfg.cleaner.log_cleaner_threads == 4
    assert cfg.manager.log_retention_check_interval_ms == 5


def test_environment_alone_is_enough(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""), environ={"LOGKEEPER_LOG_DIRS": "/d", "LOGKEEPER_TOKEN_FILE": "/t"})
    assert cfg.manager.log_dirs == ["/d"] and cfg.topics == {}
    assert cfg.sidecar.listen == ["127.0.0.1:8080"]


def test_every_key_has_one_environment_variable() -> None:
    mapping = env_overrides_map()
    keys = [*SIDECAR_SETTINGS.by_key, *MANAGER_SETTINGS.by_key, *BROKER_LOG_DEFAULT_SETTINGS.by_key,
            *CLEANER_SETTINGS.by_key]
    assert len(mapping) == len(keys)
    assert mapping["LOGKEEPER_LOG_DIRS"] == ("node", "log.dirs")
    assert mapping["LOGKEEPER_LISTEN"] == ("sidecar", "listen")
    assert mapping["LOGKEEPER_TOKEN_FILE"] == ("sidecar", "token.file")
    assert env_name("log.cleaner.io.buffer.size") == "LOGKEEPER_LOG_CLEANER_IO_BUFFER_SIZE"


@pytest.mark.parametrize(("text", "message"), [
    ("node: {log.dirs: [/d], log.dir: /e}\nsidecar: {token.file: /t}", "unknown key 'log.dir' in section node"),
    ("node: {log.dirs: [/d], log: {dirs: /e}}\nsidecar: {token.file: /t}", "written flat"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t, port: 1}", "unknown key 'port' in section sidecar"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ncleaner: {log.cleaner.thread: 1}",
     "unknown key 'log.cleaner.thread' in section cleaner"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\nbroker: {}", "unknown section 'broker'"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {t: {partitions: 1, config: {}}}",
     "topic 't': unknown key 'config'"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {t: {configs: {segment.byte: 1}}}",
     "unknown topic config key 'segment.byte'"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {t: {configs: {segment.bytes: -1}}}",
     "invalid value -1 for config segment.bytes"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {t: {configs: {segment.bytes: 4294967296}}}",
     "must be at most 2147483647"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {t: {partitions: 0}}", "partitions must be"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t}\ntopics: {'bad/name': {}}", "illegal topic name"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t, listen: [nowhere]}", "is not host:port"),
    ("node: {log.dirs: [/d]}\nsidecar: {token.file: /t, max.request.bytes: ten}", "max.request.bytes"),
    ("node: {log.dirs: [/d]}", "sidecar.token.file is not set"),
    ("sidecar: {token.file: /t}", "node.log.dirs is not set"),
    ("- a list", "the top level must be a mapping"),
    ("node: [", "not valid YAML"),
])
def test_errors_name_the_key_and_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidConfigError) as e:
        load_config(path, environ={})
    assert message in str(e.value)
    assert str(path) in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.yaml", environ={})


def test_bad_environment_value_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"log\.cleaner\.threads"):
        load_config(write(tmp_path, FULL), environ={"LOGKEEPER_LOG_CLEANER_THREADS": "many"})


def test_listen_addresses() -> None:
    assert parse_listen_address("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_listen_address("[::]:1") == ("::", 1)
    for bad in ("8080", ":8080", "host:", "host:70000", "[::1]8080"):
        with pytest.raises(ValueError):
            parse_listen_address(bad)


def test_topic_configs_are_parsed_as_kafka_types() -> None:
    assert validate_topic_configs({"cleanup.policy": "compact,delete", "retention.ms": "-1"}) == {
        "cleanup.policy": ["compact", "delete"], "retention.ms": -1}
    with pytest.raises(InvalidConfigError, match="must be at most 9223372036854775807"):
        validate_topic_configs({"retention.ms": 1 << 63})


def test_the_old_kafka_max_request_bytes_key_names_its_new_name(tmp_path: Path) -> None:
    doc = {"sidecar": {"kafka.max.request.bytes": 1 << 20}, "node": {"log.dirs": [str(tmp_path)]}}
    with pytest.raises(InvalidConfigError, match=r"kafka\.socket\.request\.max\.bytes"):
        config_from_document(doc, str(tmp_path / "s.yaml"), {})
