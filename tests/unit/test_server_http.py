"""server/http_api.py in process (aiohttp's test server) over a real Sidecar on temporary directories:
round trips, every error as a JSON 4xx, tokens, body limits, no partial write, a slow disk not
stalling the event loop, topics and cleaning endpoints."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from logkeeper.errors import InvalidConfigError
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from logkeeper.server.auth import TokenFile
from logkeeper.server.config import SidecarConfig, config_from_document
from logkeeper.server.http_api import Api, build_app
from logkeeper.server.service import Sidecar

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BATCH = "application/vnd.kafka.batch"


def make_config(tmp_path: Path, **sidecar: Any) -> SidecarConfig:
    (tmp_path / "token").write_text(TOKEN)
    doc = {"sidecar": {"token.file": str(tmp_path / "token"), **sidecar},
           "node": {"log.dirs": [str(tmp_path / "d0"), str(tmp_path / "d1")], "log.initial.task.delay.ms": 60000},
           "cleaner": {"log.cleaner.backoff.ms": 60000},
           "topics": {"declared": {"partitions": 2, "configs": {"cleanup.policy": "compact"}},
                      "raw": {"partitions": 2}}}
    return config_from_document(doc, str(tmp_path / "sidecar.yaml"), {})


Scenario = Callable[[TestClient[Any, Any], Sidecar], Awaitable[None]]


def run(config: SidecarConfig, scenario: Scenario, *, start: bool = True, token: bool = True) -> None:
    """``token``: the client sends the token with every request (reads need it by default)."""
    sidecar = Sidecar(config)
    if start:
        sidecar.start()
    pool = ThreadPoolExecutor(4)

    async def main() -> None:
        api = Api(sidecar, config.sidecar, TokenFile(config.sidecar.token_file), pool)
        async with TestClient(TestServer(build_app(api)), headers=AUTH if token else None) as client:
            await scenario(client, sidecar)

    try:
        asyncio.run(main())
    finally:
        sidecar.shutdown()
        pool.shutdown()


@pytest.fixture
def config(tmp_path: Path) -> Iterator[SidecarConfig]:
    yield make_config(tmp_path)


async def expect_error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    doc: dict[str, Any] = await resp.json()
    assert doc["error"] == code and isinstance(doc["detail"], str) and doc["detail"]
    return doc


def test_not_ready_before_start(config: SidecarConfig) -> None:
    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        assert (await c.get("/healthz")).status == 200
        await expect_error(await c.get("/readyz"), 503, "not_ready")
        await expect_error(await c.get("/v1/status"), 503, "not_ready")
        await expect_error(await c.post("/v1/topics/declared/partitions/0/records", json={"records": [{}]},
                                        headers=AUTH), 503, "not_ready")
        text = await (await c.get("/metrics")).text()
        assert "logkeeper_ready 0.0" in text
    run(config, scenario, start=False)


def test_produce_and_fetch_round_trips(config: SidecarConfig) -> None:
    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        assert (await c.get("/readyz")).status == 200
        path = "/v1/topics/raw/partitions/0/records"
        r = await c.post(path + "?flush=true", headers=AUTH, json={"records": [
            {"key": "k", "value": "v", "headers": [{"key": "h", "value": None}], "timestamp": 1},
            {"key": None, "value": None}]})
        assert r.status == 200, await r.text()
        produced = await r.json()
        assert produced["base_offset"] == 0 and produced["last_offset"] == 1 and produced["flushed"]
        assert produced["recovery_point"] == 2
        raw = build_batch([Record(0, 2, b"\xff\x00", b"bin"), Record(1, 3, b"b", b"2")])
        r = await c.post(path, headers={**AUTH, "Content-Type": BATCH}, data=raw)
        assert (await r.json())["base_offset"] == 2
        r = await c.get(path, params={"offset": "1", "encoding": "base64"})
        doc = await r.json()
        assert doc["next_offset"] == 4 and doc["log_end_offset"] == 4 and r.headers["Logkeeper-Next-Offset"] == "4"
        assert [x["offset"] for x in doc["records"]] == [1, 2, 3]
        assert doc["records"][0] == {"offset": 1, "timestamp": doc["records"][0]["timestamp"], "key": None,
                                     "value": None, "headers": []}
        assert base64.b64decode(doc["records"][1]["key"]) == b"\xff\x00"
        await expect_error(await c.get(path, params={"offset": "0", "encoding": "utf-8"}), 422, "unrepresentable")
        r = await c.get(path, params={"offset": "2"}, headers={"Accept": BATCH})
        assert r.content_type == BATCH and r.headers["Logkeeper-Log-End-Offset"] == "4"
        assert [(x.offset, x.key) for x in read_records(await r.read())] == [(2, b"\xff\x00"), (3, b"b")]
        r = await c.get(path, params={"offset": "4", "format": "json"})
        assert (await r.json())["records"] == [] and (await r.json())["next_offset"] == 4
        r = await c.get(path, params={"offset": "0", "max_bytes": "1"})
        assert [x["offset"] for x in (await r.json())["records"]] == [0, 1]  # at least one whole batch
        offsets = await (await c.get("/v1/topics/raw/partitions/0/offsets")).json()
        assert offsets == {"topic": "raw", "partition": 0, "log_start_offset": 0, "log_end_offset": 4,
                           "last_stable_offset": 4, "recovery_point": offsets["recovery_point"]}
    run(config, scenario)


def test_malformed_requests_are_json_4xx(config: SidecarConfig) -> None:
    p0 = "/v1/topics/raw/partitions/0"
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("GET", "/nowhere", {}, 404, "not_found"),
        ("PATCH", "/v1/topics", {}, 405, "method_not_allowed"),
        ("GET", "/v1/topics/unknown", {}, 404, "not_found"),
        ("GET", "/v1/topics/bad%2Fname", {}, 400, "bad_request"),
        ("GET", "/v1/topics/" + "x" * 300, {}, 400, "bad_request"),
        ("GET", "/v1/topics/declared/partitions/9/offsets", {}, 404, "not_found"),
        ("GET", "/v1/topics/declared/partitions/-1/offsets", {}, 400, "bad_request"),
        ("GET", "/v1/topics/declared/partitions/x/offsets", {}, 400, "bad_request"),
        ("GET", "/v1/topics/declared/partitions/99999999999/offsets", {}, 400, "bad_request"),
        ("GET", p0 + "/records", {}, 400, "bad_request"),
        ("GET", p0 + "/records?offset=abc", {}, 400, "bad_request"),
        ("GET", p0 + "/records?offset=-1", {}, 400, "bad_request"),
        ("GET", p0 + "/records?offset=5", {}, 416, "offset_out_of_range"),
        ("GET", p0 + "/records?offset=0&max_bytes=0", {}, 400, "bad_request"),
        ("GET", p0 + "/records?offset=0&encoding=latin1", {}, 400, "bad_request"),
        ("GET", p0 + "/records?offset=0&format=xml", {}, 400, "bad_request"),
        ("POST", p0 + "/records", {"data": b"{}", "headers": {"Content-Type": "text/plain"}}, 415,
         "unsupported_media_type"),
        ("POST", p0 + "/records", {"data": b"", "headers": {"Content-Type": "application/json"}}, 400, "bad_request"),
        ("POST", p0 + "/records", {"data": b"{", "headers": {"Content-Type": "application/json"}}, 400, "bad_request"),
        ("POST", p0 + "/records", {"json": {"records": [{"key": 1}]}}, 400, "bad_request"),
        ("POST", p0 + "/records?flush=maybe", {"json": {"records": [{}]}}, 400, "bad_request"),
        ("POST", p0 + "/records", {"data": b"\x00" * 70, "headers": {"Content-Type": BATCH}}, 400, "invalid_records"),
        ("POST", p0 + "/records", {"data": b"garbage", "headers": {"Content-Type": BATCH}}, 400, "invalid_records"),
        ("POST", p0 + "/records", {"json": {"records": [{"timestamp": 10**15}]}}, 400, "invalid_timestamp"),
        ("POST", "/v1/topics/none/partitions/0/records", {"json": {"records": [{}]}}, 404, "not_found"),
        ("POST", "/v1/topics", {"json": {"name": "a/b"}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": 5}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"partitions": 1}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "partitions": 0}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "partitions": 10**6}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "configs": {"segment.bytes": "big"}}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "configs": {"nope": 1}}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "configs": {"retention.ms": {"a": 1}}}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "configs": {"segment.bytes": 1e400}}}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "declared"}}, 409, "conflict"),
        ("POST", "/v1/topics", {"json": ["x"]}, 400, "bad_request"),
        ("POST", "/v1/topics", {"json": {"name": "n", "x": 1}}, 400, "bad_request"),
        ("PUT", "/v1/topics/none/configs", {"json": {"configs": {}}}, 404, "not_found"),
        ("PUT", "/v1/topics/declared/configs", {"json": {}}, 400, "bad_request"),
        ("POST", "/v1/topics/declared/partitions", {"json": {"count": 1}}, 400, "bad_request"),
        ("POST", "/v1/topics/declared/partitions", {"json": {"count": "3"}}, 400, "bad_request"),
        ("DELETE", "/v1/topics/declared/partitions/7", {}, 404, "not_found"),
        ("DELETE", "/v1/topics/none", {}, 404, "not_found"),
        ("POST", p0 + "/cleaning/resume", {}, 409, "conflict"),
        ("POST", "/v1/topics/none/partitions/0/cleaning/pause", {}, 404, "not_found"),
    ]

    async def scenario(c: TestClient[Any, Any], s: Sidecar) -> None:
        for method, path, kw, status, code in cases:
            kw = {**kw, "headers": {**AUTH, **kw.get("headers", {})}}
            if "json" in kw:
                kw["data"] = json.dumps(kw.pop("json"))
                kw["headers"].setdefault("Content-Type", "application/json")
            resp = await c.request(method, path, **kw)
            try:
                await expect_error(resp, status, code)
            except AssertionError as e:
                raise AssertionError(f"{method} {path}: {e}") from None
        for tp in (TopicPartition("raw", 0), TopicPartition("declared", 0)):
            assert s.offsets(tp)["log_end_offset"] == 0  # nothing was written by any of them
    run(config, scenario)


def test_an_invalid_batch_writes_nothing(config: SidecarConfig) -> None:
    good = build_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # CRC mismatch in the second batch

    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        path = "/v1/topics/raw/partitions/1/records"
        await expect_error(await c.post(path, data=good + bytes(bad), headers={**AUTH, "Content-Type": BATCH}), 400,
                           "invalid_records")
        offsets = await (await c.get("/v1/topics/raw/partitions/1/offsets")).json()
        assert offsets["log_end_offset"] == 0
        assert (await c.post(path, data=good + good, headers={**AUTH, "Content-Type": BATCH})).status == 200
    run(config, scenario)


def test_tokens(tmp_path: Path) -> None:
    config = make_config(tmp_path)

    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        body = {"name": "t", "partitions": 1}
        r = await c.post("/v1/topics", json=body)
        await expect_error(r, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        await expect_error(await c.post("/v1/topics", json=body, headers={"Authorization": "Bearer nope"}), 401,
                           "unauthorized")
        # reads need the token by default: records, topics, status and metrics alike
        for path in ("/v1/topics", "/v1/topics/raw", "/v1/topics/raw/partitions/0/offsets",
                     "/v1/topics/raw/partitions/0/records?offset=0", "/v1/status", "/metrics"):
            await expect_error(await c.get(path), 401, "unauthorized")
            assert (await c.get(path, headers=AUTH)).status == 200, path
        # what the kubelet's probes read, and the API's description, answer without it
        for path in ("/healthz", "/readyz", "/openapi.json"):
            assert (await c.get(path)).status == 200, path
        (tmp_path / "token").write_text("rotated")
        await expect_error(await c.post("/v1/topics", json=body, headers=AUTH), 401, "unauthorized")
        assert (await c.post("/v1/topics", json=body, headers={"Authorization": "Bearer rotated"})).status == 201
        (tmp_path / "token").unlink()
        await expect_error(await c.get("/v1/topics", headers=AUTH), 503, "token_unavailable")
        assert (await c.get("/healthz")).status == 200  # the probes do not depend on the token file
    run(config, scenario, token=False)


def test_reads_opened_on_purpose(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"http.read.auth": "none"})

    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        for path in ("/v1/topics", "/v1/topics/raw/partitions/0/records?offset=0", "/v1/status"):
            assert (await c.get(path)).status == 200, path
        await expect_error(await c.get("/metrics"), 401, "unauthorized")  # its own setting
        await expect_error(await c.post("/v1/topics", json={"name": "t"}), 401, "unauthorized")  # writes never
    run(config, scenario, token=False)


def test_metrics_opened_on_purpose(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"http.metrics.auth": "none"})

    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        assert (await c.get("/metrics")).status == 200
        await expect_error(await c.get("/v1/status"), 401, "unauthorized")
    run(config, scenario, token=False)


def test_the_old_auth_reads_key_is_refused_with_the_new_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"http\.read\.auth: none"):
        make_config(tmp_path, **{"auth.reads": True})


def test_request_size_is_bounded(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"max.request.bytes": 4096})

    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        big = {"records": [{"value": "x" * 5000}]}
        doc = await expect_error(await c.post("/v1/topics/raw/partitions/0/records", json=big, headers=AUTH),
                                 413, "payload_too_large")
        assert "max.request.bytes" in doc["detail"]
    run(config, scenario)


def test_a_slow_disk_does_not_stall_the_event_loop(config: SidecarConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(c: TestClient[Any, Any], s: Sidecar) -> None:
        real = s.produce

        def slow_produce(*args: Any, **kwargs: Any) -> Any:
            time.sleep(1.5)
            return real(*args, **kwargs)

        monkeypatch.setattr(s, "produce", slow_produce)
        slow = asyncio.ensure_future(c.post("/v1/topics/raw/partitions/0/records", json={"records": [{}]},
                                            headers=AUTH))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        for path in ("/healthz", "/readyz", "/v1/status", "/v1/topics/declared/partitions/0/offsets"):
            assert (await c.get(path)).status == 200
        # a stalled loop would answer them only after the slow produce's 1.5 s; the bound leaves
        # room for a loaded machine
        assert time.monotonic() - started < 1.0
        assert not slow.done()
        assert (await slow).status == 200
    run(config, scenario)


def test_topics_and_partitions(config: SidecarConfig) -> None:
    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        configs = {"retention.ms": 1000, "cleanup.policy": "delete"}
        r = await c.post("/v1/topics", headers=AUTH, json={"name": "events", "partitions": 2, "configs": configs})
        assert r.status == 201
        topic = await r.json()
        assert topic["partitions"] == [0, 1]
        assert topic["configs"] == {"retention.ms": 1000, "cleanup.policy": ["delete"]}
        assert topic["effective_configs"]["retention.ms"] == 1000 and not topic["declared"]
        names = [t["name"] for t in (await (await c.get("/v1/topics")).json())["topics"]]
        assert names == ["declared", "events", "raw"]
        r = await c.put("/v1/topics/events/configs", headers=AUTH, json={"configs": {"segment.bytes": 100000}})
        assert (await r.json())["configs"] == {"segment.bytes": 100000}
        r = await c.post("/v1/topics/events/partitions", headers=AUTH, json={"count": 4})
        assert (await r.json())["partitions"] == [0, 1, 2, 3]
        assert (await c.delete("/v1/topics/events/partitions/1", headers=AUTH)).status == 204
        parts = (await (await c.get("/v1/topics/events/partitions")).json())["partitions"]
        assert [p["partition"] for p in parts] == [0, 2, 3]
        assert (await c.post("/v1/topics/events/partitions", headers=AUTH, json={"count": 4})).status == 200
        assert (await c.delete("/v1/topics/events", headers=AUTH)).status == 204
        await expect_error(await c.get("/v1/topics/events"), 404, "not_found")
        r = await c.post("/v1/topics", headers=AUTH, json={"name": "events"})
        assert (await r.json())["configs"] == {}  # a new topic: the old overrides are gone
    run(config, scenario)


def test_cleaning_endpoints_and_status(config: SidecarConfig) -> None:
    async def scenario(c: TestClient[Any, Any], _s: Sidecar) -> None:
        base = "/v1/topics/declared/partitions/0"
        for _ in range(3):
            recs = [{"key": f"k{i % 10}", "value": "v" * 50} for i in range(200)]
            assert (await c.post(base + "/records", headers=AUTH, json={"records": recs})).status == 200
        assert (await (await c.post(base + "/cleaning/pause", headers=AUTH)).json())["cleaning_state"] == "paused(1)"
        assert (await (await c.post(base + "/cleaning/pause", headers=AUTH)).json())["cleaning_state"] == "paused(2)"
        await expect_error(await c.post(base + "/cleaning/clean", headers=AUTH), 409, "conflict")
        await c.post(base + "/cleaning/resume", headers=AUTH)
        assert (await (await c.post(base + "/cleaning/resume", headers=AUTH)).json())["cleaning_state"] == "none"
        r = await c.post(base + "/cleaning/clean", headers=AUTH)
        assert (await r.json())["cleaned"] is False  # everything is in the active segment
        await c.post("/v1/topics", headers=AUTH, json={"name": "plain"})
        await expect_error(await c.post("/v1/topics/plain/partitions/0/cleaning/clean", headers=AUTH), 409, "conflict")
        await c.put("/v1/topics/declared/configs", headers=AUTH, json={"configs": {"cleanup.policy": "compact",
                                                                                  "segment.bytes": 2000}})
        recs = [{"key": f"k{i % 10}", "value": "v" * 50} for i in range(100)]
        for _ in range(5):
            await c.post(base + "/records", headers=AUTH, json={"records": recs[:20]})
        status = await (await c.get("/v1/status")).json()
        part = next(p for p in status["partitions"] if p["topic"] == "declared" and p["partition"] == 0)
        assert part["compacted"] and part["dirty_ratio"] == 1.0 and part["last_round"] is None
        r = await c.post(base + "/cleaning/clean", headers=AUTH)
        doc = await r.json()
        assert doc["cleaned"] is True, doc
        assert "Log cleaner thread 1000 cleaned log declared-0" in doc["round"]["stats_line"]
        assert doc["round"]["messages_written"] < doc["round"]["messages_read"]
        status = await (await c.get("/v1/status")).json()
        part = next(p for p in status["partitions"] if p["topic"] == "declared" and p["partition"] == 0)
        assert part["last_round"]["dirty_section"] == doc["round"]["dirty_section"]
        assert part["dirty_ratio"] < 1.0 and part["cleaning_state"] == "none" and part["uncleanable"] is None
        assert status["cleaner"]["rounds"] == 1 and "max-buffer-utilization-percent" in status["cleaner"]
        assert [d["online"] for d in status["log_dirs"]] == [True, True]
    run(config, scenario)
