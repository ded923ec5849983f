"""server/http_limits.py over the real app on loopback: a body that does not arrive in time is a
408 with Connection: close, a client that hangs up mid-body is one 4xx log line (no
traceback, no 500), connections past http.max.connections are answered 503 and closed while the
others keep working, an idle connection is closed. Every wait is bounded; no pass/fail on timings."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from logkeeper.log.names import TopicPartition
from logkeeper.server.auth import TokenFile
from logkeeper.server.config import SidecarConfig, config_from_document
from logkeeper.server.http_api import Api, build_app
from logkeeper.server.http_limits import ConnectionLimit, LimitedSite
from logkeeper.server.service import Sidecar

TOKEN = "t0ken"
RAW_0 = TopicPartition("raw", 0)
BOUND_S = 20.0  # the most any step waits for the server; a pass never depends on how long it took


def make_config(tmp_path: Path, **sidecar: Any) -> SidecarConfig:
    (tmp_path / "token").write_text(TOKEN)
    doc = {"sidecar": {"token.file": str(tmp_path / "token"), **sidecar},
           "node": {"log.dirs": [str(tmp_path / "d0")], "log.initial.task.delay.ms": 60000},
           "cleaner": {"log.cleaner.backoff.ms": 60000}, "topics": {"raw": {"partitions": 1}}}
    return config_from_document(doc, str(tmp_path / "sidecar.yaml"), {})


@dataclass
class Served:
    port: int
    api: Api
    limit: ConnectionLimit
    runner: web.AppRunner

    def requests_seen(self) -> int:
        """Requests whose head aiohttp has parsed and handed to the app."""
        server = self.runner.server
        return server.requests_count if server is not None else 0


Scenario = Callable[[Served], Awaitable[None]]


def serve(config: SidecarConfig, scenario: Scenario) -> None:
    """The app as sidecar_main.py runs it (LimitedSite, the idle timeout), on a free loopback port."""
    sidecar = Sidecar(config)
    sidecar.start()
    pool = ThreadPoolExecutor(2)
    settings = config.sidecar

    async def main() -> None:
        api = Api(sidecar, settings, TokenFile(settings.token_file), pool)
        runner = web.AppRunner(build_app(api), access_log=None, handle_signals=False,
                               keepalive_timeout=settings.http_connections_max_idle_ms / 1000.0)
        await runner.setup()
        limit = ConnectionLimit(settings.http_max_connections)
        try:
            await LimitedSite(runner, "127.0.0.1", 0, limit).start()
            await scenario(Served(runner.addresses[0][1], api, limit, runner))
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    finally:
        sidecar.shutdown()
        pool.shutdown()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_S)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), BOUND_S)
    return status, headers, body


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), BOUND_S) == b""
    except ConnectionError:
        return True


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there within the bound"
        await asyncio.sleep(0.02)


def partial_post(declared: int, sent: bytes) -> bytes:
    return (f"POST /v1/topics/raw/partitions/0/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n").encode() + sent


def test_a_body_that_does_not_arrive_in_time_is_a_408_and_closes(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, **{"http.body.timeout.ms": 200})

    async def scenario(s: Served) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(partial_post(1000, b'{"records": ['))  # and nothing more
        status, headers, body = await read_answer(reader)
        assert status == 408 and b'"request_timeout"' in body
        # closed once aiohttp's lingering read (bounded, for a client still sending) is over
        assert headers["connection"].lower() == "close"
        writer.close()
        await writer.wait_closed()
        assert s.api.sidecar.offsets(RAW_0)["log_end_offset"] == 0  # nothing was appended

    with caplog.at_level(logging.WARNING):
        serve(config, scenario)
    assert any("http.body.timeout.ms" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_client_hanging_up_mid_body_is_a_4xx_line_without_traceback(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path)

    async def scenario(s: Served) -> None:
        for n, (declared, sent) in enumerate(((1000, b'{"records": [{"value": "x"'), (50, b""))):
            _reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
            writer.write(partial_post(declared, sent))
            await writer.drain()
            await until(lambda n=n: s.requests_seen() == n + 1)  # type: ignore[misc]  # the handler waits for the body
            writer.transport.abort()  # hang up: an RST, as a killed client's kernel sends
            await until(lambda: s.limit.open == 0)
        await until(lambda: sum("hung up" in r.getMessage() for r in caplog.records) == 2)
        text = s.api.metrics.exposition().decode()
        line = next(ln for ln in text.splitlines() if ln.startswith("logkeeper_http_requests_total")
                    and 'method="POST"' in ln and 'status="400"' in ln)
        assert line.endswith(" 2.0"), line
        assert 'status="500"' not in text
        assert s.api.sidecar.offsets(RAW_0)["log_end_offset"] == 0

    with caplog.at_level(logging.DEBUG):
        serve(config, scenario)
    lines = [r for r in caplog.records if "hung up" in r.getMessage()]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in lines)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_connections_past_the_limit_get_503_and_the_others_keep_working(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"http.max.connections": 3})

    async def scenario(s: Served) -> None:
        port, limit = s.port, s.limit
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await until(lambda: limit.open == 3)
        for _ in range(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            status, _h, body = await read_answer(reader)
            assert status == 503 and b'"too_many_connections"' in body
            assert await closed_by_server(reader)
            writer.close()
        assert limit.open == 3 and limit.refused == 5
        reader, writer = held[0]
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # a held connection is served
        assert (await read_answer(reader))[0] == 200
        for _r, w in held:
            w.close()
        await until(lambda: limit.open == 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # room again
        writer.write(f"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        assert (await read_answer(reader))[0] == 200
        writer.close()

    serve(config, scenario)


def test_an_idle_connection_and_a_slow_header_are_closed(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"http.connections.max.idle.ms": 200})

    async def scenario(s: Served) -> None:
        idle = await asyncio.open_connection("127.0.0.1", s.port)
        slow = await asyncio.open_connection("127.0.0.1", s.port)
        slow[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        assert await closed_by_server(idle[0])
        assert await closed_by_server(slow[0])
        await until(lambda: s.limit.open == 0)
        for _r, w in (idle, slow):
            w.close()

    serve(config, scenario)


def produce_body(size: int) -> bytes:
    """A JSON produce body of exactly ``size`` bytes."""
    empty = len(b'{"records": [{"value": ""}]}')
    return b'{"records": [{"value": "' + b"v" * (size - empty) + b'"}]}'


def test_bodies_held_at_once_are_bounded_by_the_budget(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{"http.queued.max.request.bytes": 1500})

    async def scenario(s: Served) -> None:
        budget = s.api.body_budget
        first, second = produce_body(1000), produce_body(800)
        a = await asyncio.open_connection("127.0.0.1", s.port)
        a[1].write(partial_post(len(first), first[:10]))  # holds its 1000 bytes of the budget, sends slowly
        await until(lambda: budget.used == 1000)
        b = await asyncio.open_connection("127.0.0.1", s.port)
        b[1].write(partial_post(len(second), second))  # whole, but 1000 + 800 > 1500: waits, reading nothing
        await until(lambda: s.requests_seen() == 2)
        assert budget.used == 1000
        a[1].write(first[10:])
        assert (await read_answer(a[0]))[0] == 200
        assert (await read_answer(b[0]))[0] == 200
        await until(lambda: budget.used == 0)
        assert budget.peak <= 1500
        big = produce_body(1400)  # alone, a body may take the whole budget
        c = await asyncio.open_connection("127.0.0.1", s.port)
        c[1].write(partial_post(len(big), big))
        assert (await read_answer(c[0]))[0] == 200
        for _r, w in (a, b, c):
            w.close()
        assert s.api.sidecar.offsets(RAW_0)["log_end_offset"] == 3

    serve(config, scenario)
