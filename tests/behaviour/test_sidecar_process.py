"""The real sidecar as a subprocess (one for the module): produce and fetch round trips, the status
following cleaning, a metrics scrape parsed by prometheus-client, topics, and SIGTERM leaving the
clean-shutdown marker."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.compression import Codec
from logkeeper.records.reader import read_records
from logkeeper.server.process import SidecarClient, SidecarError, SidecarProcess
from logkeeper.tools.verify import verify_path
from tests.offload_process import wait_for

BATCH = "application/vnd.kafka.batch"
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.3}


def config(root: Path) -> dict[str, Any]:
    return {
        "node": {"log.dirs": [str(root / "d0"), str(root / "d1")], "log.initial.task.delay.ms": 200,
                 "log.flush.offset.checkpoint.interval.ms": 500},
        "cleaner": {"log.cleaner.backoff.ms": 100},
        "topics": {"plain": {"partitions": 2}, "compacted": {"partitions": 1, "configs": COMPACTED}},
    }


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarProcess]:
    root = tmp_path_factory.mktemp("sidecar")
    with SidecarProcess(root, config(root)) as proc:
        yield proc


def test_health_and_readiness(sidecar: SidecarProcess) -> None:
    c = sidecar.client
    assert c.json("GET", "/healthz") == {"status": "ok"}
    assert c.json("GET", "/readyz") == {"ready": True}
    spec = c.json("GET", "/openapi.json")
    assert spec["openapi"].startswith("3.") and "/v1/status" in spec["paths"]


def test_json_round_trip(sidecar: SidecarProcess) -> None:
    c = sidecar.client
    before = c.json("GET", "/v1/topics/plain/partitions/0/offsets")["log_end_offset"]
    recs: list[dict[str, Any]] = [
        {"key": "k1", "value": "hello", "headers": [{"key": "trace", "value": "t-1"}]},
        {"key": None, "value": "no key"}, {"key": "k2", "value": None},
        {"key": "ünï", "value": "çødé", "headers": [{"key": "n", "value": None}], "timestamp": 1_700_000_000_000}]
    produced = c.produce("plain", 0, recs)
    assert produced["base_offset"] == before and produced["last_offset"] == before + 3
    assert produced["record_count"] == 4 and not produced["flushed"]
    got = c.fetch("plain", 0, before)
    assert got["next_offset"] == before + 4 == got["log_end_offset"]
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in got["records"]] == [
        (before + i, x.get("key"), x.get("value"), x.get("headers", [])) for i, x in enumerate(recs)]
    assert got["records"][3]["timestamp"] == 1_700_000_000_000
    b64 = c.fetch("plain", 0, before, encoding="base64")["records"]
    assert base64.b64decode(b64[0]["value"]) == b"hello"
    binary = bytes(range(256))
    produced = c.produce("plain", 0, [{"key": base64.b64encode(b"\x00").decode(),
                                       "value": base64.b64encode(binary).decode()}], encoding="base64", flush=True)
    assert produced["flushed"] and produced["recovery_point"] == produced["last_offset"] + 1
    (rec,) = c.fetch("plain", 0, produced["base_offset"], encoding="base64")["records"]
    assert base64.b64decode(rec["value"]) == binary


def test_raw_batch_round_trip(sidecar: SidecarProcess) -> None:
    c = sidecar.client
    now = int(time.time() * 1000)
    raw = build_batch([Record(i, now + i, b"key-%d" % i, b"value-%d" % i, (("h", b"x"),)) for i in range(50)],
                      codec=Codec.LZ4)
    status, _h, body = c.request("POST", "/v1/topics/plain/partitions/1/records", raw, content_type=BATCH)
    assert status == 200, body
    produced = json.loads(body)
    assert produced["record_count"] == 50 and produced["batch_count"] == 1
    status, headers, data = c.request("GET", f"/v1/topics/plain/partitions/1/records?offset={produced['base_offset']}",
                                      headers={"Accept": BATCH})
    assert status == 200 and headers["Content-Type"] == BATCH
    assert int(headers["Logkeeper-Next-Offset"]) == produced["last_offset"] + 1
    assert data[8:] == raw[8:]  # the same batch, its base offset assigned
    assert [(r.offset, r.key, r.value) for r in read_records(data)] == [
        (produced["base_offset"] + i, b"key-%d" % i, b"value-%d" % i) for i in range(50)]


def partition_status(c: SidecarClient, topic: str, partition: int) -> dict[str, Any]:
    return next(p for p in c.status()["partitions"] if p["topic"] == topic and p["partition"] == partition)


def test_status_follows_cleaning(sidecar: SidecarProcess) -> None:
    c = sidecar.client
    assert c.json("POST", "/v1/topics/compacted/partitions/0/cleaning/pause")["cleaning_state"] == "paused(1)"
    for _ in range(30):
        c.produce("compacted", 0, [{"key": f"user-{i % 20}", "value": "x" * 40} for i in range(40)])
    paused = partition_status(c, "compacted", 0)
    assert paused["cleaning_state"] == "paused(1)" and paused["segments"] > 3
    assert paused["dirty_ratio"] > 0.9 and paused["last_round"] is None
    assert paused["uncleanable"] is None and paused["backlog"] is False
    c.json("POST", "/v1/topics/compacted/partitions/0/cleaning/resume")
    cleaned = wait_for(lambda: (p := partition_status(c, "compacted", 0))["last_round"] and p, 30, "a cleaning round")
    assert cleaned["dirty_ratio"] < paused["dirty_ratio"]
    assert cleaned["size_bytes"] < paused["size_bytes"]
    assert cleaned["cleaner_checkpoint"] > 0
    line = cleaned["last_round"]["stats_line"]
    assert "Log cleaner thread 0 cleaned log compacted-0 (dirty section = [0, " in line
    assert "% size reduction" in line
    status = c.status()
    assert status["cleaner"]["rounds"] >= 1 and status["cleaner"]["DeadThreadCount"] == 0
    assert all(d["online"] and d["size_bytes"] >= 0 for d in status["log_dirs"])
    keys = {r["key"]: r["value"] for r in c.fetch_all("compacted", 0)}
    assert len(keys) == 20


def test_metrics_scrape_parses(sidecar: SidecarProcess) -> None:
    assert sidecar.client.request("GET", "/metrics", auth=False)[0] == 401  # reads need the token by default
    status, headers, body = sidecar.client.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in ("kafka_log_LogCleaner_max_buffer_utilization_percent", "kafka_log_LogCleaner_cleaner_recopy_percent",
                 "kafka_log_LogCleaner_max_clean_time_secs", "kafka_log_LogCleaner_max_compaction_delay_secs",
                 "kafka_log_LogCleaner_DeadThreadCount", "kafka_log_LogCleanerManager_max_dirty_percent",
                 "kafka_log_LogCleanerManager_time_since_last_run_ms",
                 "kafka_log_LogCleanerManager_uncleanable_partitions_count",
                 "kafka_log_LogCleanerManager_uncleanable_bytes", "kafka_log_Log_Size", "kafka_log_Log_LogEndOffset",
                 "kafka_log_LogManager_OfflineLogDirectoryCount", "logkeeper_ready", "logkeeper_http_requests",
                 "process_resident_memory_bytes"):
        assert name in families, name
    sizes = {s.labels["topic"] + "-" + s.labels["partition"]: s.value for s in families["kafka_log_Log_Size"].samples}
    assert set(sizes) >= {"plain-0", "plain-1", "compacted-0"}
    dirs = families["kafka_log_LogCleanerManager_uncleanable_partitions_count"].samples
    assert {s.labels["logDirectory"] for s in dirs} == {str(d) for d in sidecar.log_dirs}


def test_topics_over_http(sidecar: SidecarProcess) -> None:
    c = sidecar.client
    created = c.json("POST", "/v1/topics", {"name": "orders", "partitions": 3, "configs": {"retention.ms": 3600000}},
                     expect=201)
    assert created["partitions"] == [0, 1, 2]
    names = [t["name"] for t in c.json("GET", "/v1/topics")["topics"]]
    assert {"plain", "compacted", "orders"} <= set(names)
    assert c.json("POST", "/v1/topics", {"name": "orders"}, expect=409)["error"] == "conflict"
    assert c.json("POST", "/v1/topics", {"name": "x"}, expect=401, auth=False)["error"] == "unauthorized"
    assert c.json("GET", "/v1/topics", expect=401, auth=False)["error"] == "unauthorized"
    c.json("DELETE", "/v1/topics/orders", expect=204)
    assert c.json("GET", "/v1/topics/orders", expect=404)["error"] == "not_found"


def test_sigterm_leaves_the_clean_shutdown_marker(tmp_path: Path) -> None:
    proc = SidecarProcess(tmp_path, config(tmp_path)).start()
    try:
        proc.client.produce("plain", 0, [{"key": "k", "value": str(i)} for i in range(100)])
        proc.client.json("POST", "/v1/topics", {"name": "made-by-api", "configs": {"cleanup.policy": "compact"}},
                         expect=201)
    finally:
        started = time.monotonic()
        code = proc.stop(timeout_s=30)
    assert code == 0
    assert time.monotonic() - started < 10
    for d in proc.log_dirs:
        marker = json.loads((d / CLEAN_SHUTDOWN_FILE).read_text())
        assert marker["version"] == 0
        assert not (d / ".lock").exists()
        assert verify_path(d).ok
    out = proc.output()
    assert "logkeeper sidecar: stopping" in out and "logkeeper sidecar: stopped in" in out
    proc.start()  # a clean start: the records and the API's topic with its config are back
    try:
        assert [r["value"] for r in proc.client.fetch_all("plain", 0)] == [str(i) for i in range(100)]
        topic = proc.client.json("GET", "/v1/topics/made-by-api")
        assert topic["configs"] == {"cleanup.policy": ["compact"]} and topic["partitions"] == [0]
        assert "unclean" not in proc.output().split("logkeeper sidecar: stopped")[-1]
    finally:
        assert proc.stop() == 0


def test_a_second_sidecar_on_the_same_directories_exits(sidecar: SidecarProcess, tmp_path: Path) -> None:
    other = SidecarProcess(tmp_path, {"node": {"log.dirs": [str(d) for d in sidecar.log_dirs]}})
    with pytest.raises(SidecarError, match="exited with status 1"):
        other.start(timeout_s=60)
    assert "cannot start" in other.output() and "is in use" in other.output()
    assert sidecar.client.json("GET", "/readyz") == {"ready": True}  # the first one is untouched


def refused_sidecar(path: Path, config_text: str) -> str:
    """Run ``logkeeper sidecar`` on a config file holding ``config_text``, which it must refuse with
    exit status 2 (wrong input) before starting; its stderr."""
    path.write_text(config_text)
    done = subprocess.run([sys.executable, "-m", "logkeeper.cli", "sidecar", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    return done.stderr


def test_a_bad_config_file_exits_2_naming_the_key_and_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    stderr = refused_sidecar(path, f"sidecar: {{token.file: {tmp_path / 'token'}}}\n"
                                   f"node: {{log.dirs: [{tmp_path}], log.dir: x}}\n")
    assert stderr.strip() == f"logkeeper sidecar: {path}: unknown key 'log.dir' in section node"


def test_an_unreadable_token_file_exits_2(tmp_path: Path) -> None:
    stderr = refused_sidecar(tmp_path / "sidecar.yaml", f"sidecar: {{token.file: {tmp_path / 'absent'}}}\n"
                                                        f"node: {{log.dirs: [{tmp_path / 'd'}]}}\n")
    assert f"cannot read the token file {tmp_path / 'absent'}" in stderr
    assert not (tmp_path / "d").exists()  # nothing was touched
