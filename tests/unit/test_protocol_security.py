"""The Kafka listener's pieces without sockets: the memory pool of queued.max.request.bytes, the
SASL users file, PLAIN and SCRAM against kafka-python's independent SCRAM client, and the
listener addresses and security settings of the config."""

from __future__ import annotations

import asyncio
import mmap
import os
from pathlib import Path

import pytest
from kafka.net.sasl.scram import SaslMechanismScram

from logkeeper.errors import InvalidConfigError
from logkeeper.protocol.memory_pool import MMAP_THRESHOLD, REUSE_MAX, FrameCache, MemoryPool
from logkeeper.protocol.sasl import PlainServer, SaslFailure, ScramServer, UsersFile, server_for
from logkeeper.server.config import config_from_document, parse_kafka_listener


# ------------------------------------------------------------------------------- memory pool
def test_pool_is_strict_and_first_come_first_served() -> None:
    async def run() -> list[str]:
        pool = MemoryPool(100)
        order: list[str] = []
        assert pool.try_acquire(60)

        async def take(name: str, size: int) -> None:
            await pool.acquire(size)
            order.append(name)

        big = asyncio.ensure_future(take("big", 80))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(take("small", 10))  # fits now, but waits behind "big"
        await asyncio.sleep(0.01)
        assert order == [] and pool.waiting == 2 and not pool.try_acquire(1)
        pool.release(60)
        await asyncio.wait_for(asyncio.gather(big, small), 1)
        assert pool.used == 90
        return order

    assert asyncio.run(run()) == ["big", "small"]


def test_pool_grants_up_to_what_is_free_and_waits_in_turn_for_the_least() -> None:
    """The response pool's grants (fetch answers): as much as is free up to the want, a wait in
    line for the least when less is free, and a take past the capacity that later grants wait for."""
    async def run() -> None:
        pool = MemoryPool(100)
        assert pool.try_acquire_up_to(70, 10) == 70
        assert pool.try_acquire_up_to(70, 10) == 30  # what is left
        assert pool.try_acquire_up_to(5, 1) == 0 and pool.available == 0
        waiter = asyncio.ensure_future(pool.acquire_up_to(50, 20))
        await asyncio.sleep(0)
        assert pool.try_acquire_up_to(5, 1) == 0  # nobody passes the waiter
        pool.release(10)
        await asyncio.sleep(0)
        assert not waiter.done()  # 10 free, it waits for 20
        pool.release(30)
        assert await asyncio.wait_for(waiter, 1) == 40  # its 20, then all that was free
        pool.take(25)  # an answer past its grant: the pool is 25 over
        assert pool.available == -25
        pool.release(70)
        assert pool.try_acquire_up_to(100, 1) == 45
        with pytest.raises(ValueError):
            pool.try_acquire_up_to(10, 0)
        with pytest.raises(ValueError):
            pool.try_acquire_up_to(10, 101)  # could never be granted

    asyncio.run(run())


def test_pool_cancelled_waiter_gives_way_and_never_leaks() -> None:
    async def run() -> None:
        pool = MemoryPool(100)
        assert pool.try_acquire(50)
        blocked = asyncio.ensure_future(pool.acquire(80))
        await asyncio.sleep(0)
        behind = asyncio.ensure_future(pool.acquire(40))
        await asyncio.sleep(0)
        blocked.cancel()
        await asyncio.wait_for(behind, 1)  # the waiter behind the cancelled one is served
        assert pool.used == 90 and pool.waiting == 0
        pool.release(90)
        assert pool.available == 100
        with pytest.raises(RuntimeError):
            pool.release(1)
        with pytest.raises(ValueError):
            pool.try_acquire(101)

    asyncio.run(run())


def test_big_frames_are_mmaps_that_cost_nothing_until_written() -> None:
    frames = FrameCache()
    small, big = frames.frame(100), frames.frame(64 << 20)
    assert isinstance(small.obj, bytearray) and len(small) == 100
    assert isinstance(big.obj, mmap.mmap) and len(big) == 64 << 20
    assert MMAP_THRESHOLD <= 1 << 20 < REUSE_MAX < 64 << 20
    rss = _rss()
    big[:4096] = b"x" * 4096
    assert _rss() - rss < 16 << 20  # an anonymous mapping: only written pages are resident
    mapping = big.obj
    kept = big[:10]  # a view alive elsewhere: not unmapped under it
    frames.release(big)
    assert not mapping.closed and bytes(kept) == b"x" * 10 and frames.kept_bytes == 0  # too big to keep
    kept.release()
    frames.release(small)


def test_a_released_frame_is_reused_for_the_next_of_its_size_and_sliced_to_it() -> None:
    frames = FrameCache()
    first = frames.frame((1 << 20) + 100)  # a 1 MiB batch and its request's header
    mapping = first.obj
    assert len(mapping) == 2 << 20 and len(first) == (1 << 20) + 100
    first[:] = b"a" * len(first)
    frames.release(first)
    assert frames.kept_bytes == 2 << 20
    second = frames.frame(1 << 20 | 1)
    assert second.obj is mapping and frames.reused == 1 and frames.kept_bytes == 0
    assert len(second) == (1 << 20) + 1  # the earlier request's bytes past it are out of reach
    frames.release(second)
    frames.clear()
    assert mapping.closed and frames.kept_bytes == 0


def test_a_frame_still_viewed_is_never_reused() -> None:
    frames = FrameCache()
    frame = frames.frame(1 << 20)
    records = frame[100:200]  # e.g. a handler that kept a slice of the request
    mapping = frame.obj
    frames.release(frame)
    assert frames.kept_bytes == 0 and not mapping.closed
    again = frames.frame(1 << 20)
    assert again.obj is not mapping  # a fresh mapping: the kept slice's bytes cannot change
    again[100:200] = b"z" * 100
    assert bytes(records) != b"z" * 100
    records.release()
    frames.release(again)


def test_kept_frames_are_unmapped_when_not_used_between_two_trims() -> None:
    frames = FrameCache()
    frames.release(frames.frame(1 << 20))
    frames.trim()  # one was taken since the last trim: kept
    assert frames.kept_bytes == 1 << 20
    frames.release(frames.frame(1 << 20))
    frames.trim()
    assert frames.kept_bytes == 1 << 20
    frames.trim()  # none taken since: unmapped
    assert frames.kept_bytes == 0


def test_kept_frames_are_bounded() -> None:
    frames = FrameCache(keep_bytes=4 << 20)
    views = [frames.frame(1 << 20) for _ in range(6)]
    for v in views:
        frames.release(v)
    assert frames.kept_bytes == 4 << 20  # four of the six; the rest unmapped
    frames.clear()


def _rss() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# -------------------------------------------------------------------------------- users file
def users(tmp_path: Path, text: str = "# users\nalice:alice-secret\n\nbob: with:colon \nbroken line\n") -> UsersFile:
    path = tmp_path / "users"
    path.write_text(text)
    f = UsersFile(str(path))
    f.ensure_usable()
    return f


def test_users_file_reads_name_password_lines_and_rereads_when_changed(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    f = users(tmp_path)
    assert f.password("alice") == "alice-secret" and f.password("bob") == " with:colon "
    assert f.password("broken line") is None
    assert "alice-secret" not in caplog.text and "line 5" in caplog.text
    (tmp_path / "users").write_text("alice:rotated-secret-longer\n")
    assert f.password("alice") == "rotated-secret-longer" and f.password("bob") is None
    (tmp_path / "users").unlink()
    assert f.password("alice") == "rotated-secret-longer"  # a Secret being swapped: keep the last users
    with pytest.raises(ValueError, match="cannot read"):
        f.ensure_usable()
    (tmp_path / "empty").write_text("# nobody\n")
    with pytest.raises(ValueError, match="no name:password"):
        UsersFile(str(tmp_path / "empty")).ensure_usable()


# ------------------------------------------------------------------------------------- PLAIN
def test_plain(tmp_path: Path) -> None:
    f = users(tmp_path)
    ok = PlainServer(f)
    assert ok.step(b"\x00alice\x00alice-secret") == b"" and ok.done and ok.principal == "alice"
    assert PlainServer(f).step(b"alice\x00alice\x00alice-secret") == b""
    for token in (b"\x00alice\x00wrong", b"\x00nobody\x00alice-secret", b"bob\x00alice\x00alice-secret",
                  b"alice-secret", b"\x00\x00", b"\x00alice\x00alice-secret\x00"):
        with pytest.raises(SaslFailure):
            PlainServer(f).step(token)


# ------------------------------------------------------------------------------------- SCRAM
def scram_exchange(f: UsersFile, mechanism: str, name: str, password: str) -> str | None:
    """Runs kafka-python's client against the server; the principal, or None when refused."""
    client = SaslMechanismScram(sasl_plain_username=name, sasl_plain_password=password, sasl_mechanism=mechanism,
                                security_protocol="SASL_SSL")
    server = server_for(mechanism, f)
    try:
        while not client.is_done():
            client.receive(server.step(client.auth_bytes()))
    except SaslFailure:
        return None
    assert server.done
    return server.principal


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_kafka_pythons_client(tmp_path: Path, mechanism: str) -> None:
    f = users(tmp_path)
    assert scram_exchange(f, mechanism, "alice", "alice-secret") == "alice"
    assert scram_exchange(f, mechanism, "alice", "alice-secret") == "alice"  # keys cached, fresh nonces
    assert scram_exchange(f, mechanism, "alice", "wrong") is None
    assert scram_exchange(f, mechanism, "nobody", "alice-secret") is None


def test_scram_refuses_replays_tokens_and_channel_binding(tmp_path: Path) -> None:
    f = users(tmp_path)
    client = SaslMechanismScram(sasl_plain_username="alice", sasl_plain_password="alice-secret",
                                sasl_mechanism="SCRAM-SHA-256", security_protocol="SASL_SSL")
    first = client.auth_bytes()
    server = ScramServer(f, "SCRAM-SHA-256")
    client.receive(server.step(first))
    final = client.auth_bytes()
    other = ScramServer(f, "SCRAM-SHA-256")  # the same final message on another exchange: other nonce
    other.step(first)
    with pytest.raises(SaslFailure, match="nonce"):
        other.step(final)
    for bad_first in (b"p=tls-unique,,n=alice,r=abc", b"n,,n=alice,r=abc,tokenauth=true", b"n,a=bob,n=alice,r=abc",
                      b"n,,r=abc", b"n,,n=al=ice,r=abc"):
        with pytest.raises(SaslFailure):
            ScramServer(f, "SCRAM-SHA-256").step(bad_first)
    # an unknown user gets a salt that does not change between tries (names cannot be probed)
    a, b = ScramServer(f, "SCRAM-SHA-256"), ScramServer(f, "SCRAM-SHA-256")
    salt = [s.step(b"n,,n=nobody,r=abc").split(b",")[1] for s in (a, b)]
    assert salt[0] == salt[1]


# ------------------------------------------------------------------------------------ config
def test_listener_addresses_name_their_protocol_off_loopback() -> None:
    assert parse_kafka_listener("127.0.0.1:9092") == ("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_kafka_listener("[::1]:9092") == ("PLAINTEXT", "::1", 9092)
    assert parse_kafka_listener("localhost:0") == ("PLAINTEXT", "localhost", 0)
    assert parse_kafka_listener("sasl_ssl://0.0.0.0:9093") == ("SASL_SSL", "0.0.0.0", 9093)
    assert parse_kafka_listener("PLAINTEXT://10.0.0.5:9092") == ("PLAINTEXT", "10.0.0.5", 9092)
    with pytest.raises(ValueError, match="not loopback"):
        parse_kafka_listener("0.0.0.0:9092")
    with pytest.raises(ValueError, match="unknown security protocol"):
        parse_kafka_listener("TLS://127.0.0.1:9092")


def _config(**sidecar: object) -> object:
    doc = {"sidecar": {"token.file": "/t", **sidecar}, "node": {"log.dirs": ["/d"]}}
    return config_from_document(doc, "test.yaml", {})


def test_security_settings_must_agree_with_the_listeners() -> None:
    with pytest.raises(InvalidConfigError, match="not loopback"):
        _config(**{"kafka.listen": ["0.0.0.0:9092"]})
    with pytest.raises(InvalidConfigError, match=r"kafka\.sasl\.users\.file"):
        _config(**{"kafka.listen": ["SASL_PLAINTEXT://127.0.0.1:9092"]})
    with pytest.raises(InvalidConfigError, match="certificate"):
        _config(**{"kafka.listen": ["SSL://127.0.0.1:9092"]})
    with pytest.raises(InvalidConfigError, match=r"queued\.max\.request\.bytes"):
        _config(**{"kafka.socket.request.max.bytes": 2 << 20, "kafka.queued.max.request.bytes": 1 << 20})
    with pytest.raises(InvalidConfigError, match=r"kafka\.sasl\.enabled\.mechanisms"):
        _config(**{"kafka.sasl.enabled.mechanisms": ["GSSAPI"]})
    with pytest.raises(InvalidConfigError, match=r"ca\.location"):
        _config(**{"kafka.ssl.client.auth": "required"})
    cfg = _config(**{"kafka.listen": ["SASL_SSL://0.0.0.0:9093", "127.0.0.1:9092"],
                     "kafka.sasl.users.file": "/u", "kafka.ssl.certificate.location": "/c"})
    settings = cfg.sidecar  # type: ignore[attr-defined]
    assert settings.kafka_listeners == [("SASL_SSL", "0.0.0.0", 9093), ("PLAINTEXT", "127.0.0.1", 9092)]
    assert (settings.kafka_max_connections, settings.kafka_connections_max_idle_ms,
            settings.kafka_socket_request_max_bytes, settings.kafka_queued_max_request_bytes) == (
        128, 600000, 100 << 20, 100 << 20)
