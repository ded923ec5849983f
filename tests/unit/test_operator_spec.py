"""LogVolume / CompactionJob spec parsing: defaults, and errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from logkeeper_operator.jobspec import parse_compactionjob
from logkeeper_operator.spec import SpecError, check_topic_changes, parse_logvolume


def base(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"volumes": [{"id": "disk-0", "size": "1Gi"}],
                            "topics": [{"name": "t", "partitions": 2, "configs": {"cleanup.policy": ["compact"]}}]}
    spec.update(over)
    return spec


def test_defaults() -> None:
    lv = parse_logvolume(base(), default_image="img:1")
    assert lv.volumes[0].delete_claim is False and lv.volumes[0].access_modes == ("ReadWriteOnce",)
    assert lv.sidecar.image == "img:1" and lv.sidecar.port == 8080
    assert lv.spark.mode == "local" and lv.spark.master == "local[*]" and lv.spark.image == "img:1"
    assert lv.spark.max_attempts == 3 and lv.spark.timeout_seconds == 3600 and lv.spark.auto_submit
    assert lv.topics[0].configs == {"cleanup.policy": ["compact"]}


@pytest.mark.parametrize(("spec", "field", "words"), [
    (base(volumes=[]), "spec.volumes", "at least one"),
    (base(volumes=[{"id": "Disk_0", "size": "1Gi"}]), "spec.volumes[0].id", "DNS label"),
    (base(volumes=[{"id": "d"}]), "spec.volumes[0]", "size"),
    (base(volumes=[{"id": "d", "size": "1Gi", "existingClaim": "c"}]), "spec.volumes[0]", "not both"),
    (base(volumes=[{"id": "d", "size": "lots"}]), "spec.volumes[0].size", "quantity"),
    (base(volumes=[{"id": "d", "size": "1Gi"}, {"id": "d", "size": "1Gi"}]), "spec.volumes[1].id", "twice"),
    (base(topics=[{"name": "t", "partitions": 0}]), "spec.topics[0].partitions", "between 1"),
    (base(topics=[{"name": "bad/name"}]), "spec.topics[0].name", ""),
    (base(topics=[{"name": "t", "configs": {"segment.bytes": 1}}]), "spec.topics[0].configs.segment.bytes",
     "at least 14"),
    (base(topics=[{"name": "t", "configs": {"segment.bytes": 1 << 40}}]), "spec.topics[0].configs.segment.bytes",
     "at most"),
    (base(topics=[{"name": "t", "configs": {"no.such.key": 1}}]), "spec.topics[0].configs.no.such.key", "unknown"),
    (base(topics=[{"name": "t"}, {"name": "t"}]), "spec.topics[1].name", "twice"),
    (base(node={"log.dirs": ["/x"]}), "spec.node.log.dirs", "set by the operator"),
    (base(node={"log.roll.hours": 0}), "spec.node.log.roll.hours", "at least 1"),
    (base(cleaner={"log.cleaner.threads": -1}), "spec.cleaner.log.cleaner.threads", "at least 0"),
    (base(cleanerPolicyRef={"name": "p"}, cleaner={"log.cleaner.threads": 1}), "spec.cleaner", "not both"),
    (base(sidecar={"port": 80}), "spec.sidecar.port", "between 1024"),
    (base(sidecar={"settings": {"listen": ["x:1"]}}), "spec.sidecar.settings.listen", "set by the operator"),
    (base(spark={"mode": "yarn"}), "spec.spark.mode", "one of"),
    (base(spark={"mode": "kubernetes", "master": "local[2]"}), "spec.spark.master", "k8s://"),
    (base(containers=[{"name": "sidecar", "image": "x"}]), "spec.containers[0].name", "taken"),
    (base(containers=[{"name": "app"}]), "spec.containers[0].image", "required"),
])
def test_errors_name_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_logvolume(spec)
    assert e.value.field == field
    assert words in e.value.message
    assert str(e.value).startswith(field + ": ")


def test_partitions_never_shrink() -> None:
    old = parse_logvolume(base())
    with pytest.raises(SpecError, match=r"spec.topics\[0\].partitions: cannot shrink"):
        check_topic_changes(old, parse_logvolume(base(topics=[{"name": "t", "partitions": 1}])))
    check_topic_changes(old, parse_logvolume(base(topics=[{"name": "t", "partitions": 3}])))
    check_topic_changes(None, old)


def test_compactionjob_spec() -> None:
    hand_off = {"handOff": "0123456789ab", "args": ["spark-compact", "--partition", "t-3"], "staging": "/s"}
    cj = parse_compactionjob({"logVolume": "lv", "topic": "t", "partition": 3, "volumeId": "disk-0",
                              "logDir": "/data/disk-0/log", **hand_off})
    assert (cj.partition, cj.max_attempts, cj.timeout_seconds) == (3, 3, 3600)
    assert cj.args == ("spark-compact", "--partition", "t-3") and cj.hand_off == "0123456789ab"
    with pytest.raises(SpecError, match=r"spec\.partition: is required"):
        parse_compactionjob({"logVolume": "lv", "topic": "t", "volumeId": "d", "logDir": "/x", **hand_off})
