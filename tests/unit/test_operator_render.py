"""The sidecar config rendered from a spec: loadable by the sidecar, and what rolls the pod."""

from __future__ import annotations

import yaml

from logkeeper.server.config import config_from_document
from logkeeper_operator.render import config_document, render_config, restart_hash, topic_actions
from logkeeper_operator.spec import parse_logvolume


def spec(**over: object) -> dict[str, object]:
    s: dict[str, object] = {"volumes": [{"id": "a", "size": "1Gi"}, {"id": "b", "existingClaim": "old"}],
                            "topics": [{"name": "t", "partitions": 2,
                                        "configs": {"cleanup.policy": ["compact"], "segment.bytes": 1048576}}],
                            "node": {"log.retention.check.interval.ms": 1000},
                            "sidecar": {"port": 9000, "settings": {"io.threads": 4}}}
    s.update(over)
    return s


def test_rendered_config_is_loaded_by_the_sidecar() -> None:
    lv = parse_logvolume(spec())
    text = render_config(lv, {"log.cleaner.threads": 2})
    doc = yaml.safe_load(text)
    assert doc["node"]["log.dirs"] == ["/data/a/log", "/data/b/log"]
    assert doc["sidecar"]["listen"] == ["127.0.0.1:9000"]  # the pod adds its IP (builders.listen_env)
    assert doc["sidecar"]["token.file"] == "/var/run/secrets/logkeeper/token"
    cfg = config_from_document(doc, "x", {})
    assert cfg.cleaner.log_cleaner_threads == 2 and cfg.sidecar.io_threads == 4
    assert cfg.topics["t"].partitions == 2 and cfg.topics["t"].configs["segment.bytes"] == 1048576
    assert cfg.manager.log_retention_check_interval_ms == 1000
    assert cfg.sidecar.http_read_auth == "token"  # reads need the token unless the spec opens them
    opened = config_from_document(yaml.safe_load(render_config(parse_logvolume(
        spec(sidecar={"settings": {"http.read.auth": "none"}})), {})), "x", {})
    assert opened.sidecar.http_read_auth == "none"


def test_restart_hash_ignores_topics_only() -> None:
    base = parse_logvolume(spec())
    h = restart_hash(base, {})
    more_partitions = parse_logvolume(spec(topics=[{"name": "t", "partitions": 5}, {"name": "u"}]))
    assert restart_hash(more_partitions, {}) == h
    assert restart_hash(base, {"log.cleaner.threads": 3}) != h
    assert restart_hash(parse_logvolume(spec(node={"log.retention.check.interval.ms": 5})), {}) != h
    assert restart_hash(parse_logvolume(spec(sidecar={"port": 9001})), {}) != h
    assert "topics" in config_document(base, {})


def test_topic_actions() -> None:
    lv = parse_logvolume(spec(topics=[{"name": "t", "partitions": 3, "configs": {"segment.bytes": 1048576}},
                                      {"name": "new", "partitions": 1}]))
    actual = [{"name": "t", "partitions": [0, 1], "configs": {"segment.bytes": "1048576"}},
              {"name": "gone", "partitions": [0], "configs": {}}]
    acts = topic_actions(lv.topics, actual)
    assert [(a, n) for a, n, _ in acts] == [("grow", "t"), ("create", "new")]
    assert acts[0][2] == 3
    acts = topic_actions(lv.topics, [{"name": "t", "partitions": [0, 1, 2], "configs": {}},
                                     {"name": "new", "partitions": [0], "configs": {}}])
    assert acts == [("configs", "t", {"segment.bytes": 1048576})]
