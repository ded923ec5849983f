"""Offline partitions (Kafka's LogDirFailureChannel) and repair without deleting data.

A partition whose log directory failed, or that has a directory in two log directories, stays
known: the manager lists it offline with its directory and the reason; using it raises
KafkaStorageError naming partition and directory; nothing creates it again (a new empty log on a
healthy disk would restart its offsets at 0 and hide the old data when the disk comes back). The
HTTP API answers 503 storage_error with ``log_dir`` and ``partition``, the Kafka listener
KAFKA_STORAGE_ERROR (56) to Metadata, Produce, Fetch and ListOffsets, the operator's topic sync
counts it. A copy in two directories is settled by ``logkeeper resolve-duplicates`` (the higher
log end offset wins, the other copy is renamed -stray), and a restart serves it again.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from logkeeper.errors import KafkaStorageError
from logkeeper.log.checkpoint import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log_dir import LogDir
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import ManualClock, Scheduler
from logkeeper.protocol import error_codes as ec
from logkeeper.protocol.messages import FETCH, FIND_COORDINATOR, LIST_OFFSETS, METADATA, PRODUCE
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from logkeeper.server.auth import TokenFile
from logkeeper.server.config import config_from_document
from logkeeper.server.http_api import Api, build_app
from logkeeper.server.process import SidecarProcess
from logkeeper.server.service import Sidecar
from logkeeper.tools.duplicates import ResolveError, resolve
from logkeeper_operator.render import topic_actions
from logkeeper_operator.spec import TopicSpec
from tests.kafka_wire import WireClient

START_MS = 1_700_000_000_000
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def manager(dirs: list[Path]) -> LogManager:
    config = ManagerConfig.from_props({"log.dirs": [str(d) for d in dirs], "log.initial.task.delay.ms": 0,
                                       "log.flush.offset.checkpoint.interval.ms": 1000})
    clock = ManualClock(START_MS)
    m = LogManager(config, clock_ms=clock, scheduler=Scheduler(clock))
    m.startup()
    return m


def write(m: LogManager, tp: TopicPartition, n: int, tag: str) -> None:
    lg = m.get_or_create_log(tp, is_new=True)
    leo = lg.log_end_offset
    m.append(tp, build_batch([Record(leo + i, START_MS, b"k%d" % i, f"{tag}:{leo + i}".encode()) for i in range(n)]))
    m.flush(tp)


def values(m: LogManager, tp: TopicPartition) -> list[str]:
    data = m.read(tp, 0, 1 << 20).records
    return [r.value.decode() for r in read_records(bytes(data)) if r.value is not None]


def make_duplicate(root: Path, *, old: int = 5, new: int = 8) -> list[Path]:
    """d0 holds t-0 with ``old`` records and t-1; d1 holds a second t-0 with ``new`` records (as if
    the partition had been made again on d1 while d0 was away)."""
    d0, d1 = root / "d0", root / "d1"
    m = manager([d0])
    write(m, T0, old, "old")
    write(m, T1, 3, "t1")
    m.shutdown()
    m = manager([d1])
    write(m, T0, new, "new")
    m.shutdown()
    return [d0, d1]


def test_a_partition_in_two_directories_is_offline_and_the_rest_is_served(tmp_path: Path) -> None:
    dirs = make_duplicate(tmp_path)
    m = manager(dirs)
    try:
        assert [lg.topic_partition for lg in m.all_logs()] == [T1]
        offline = m.offline_partitions()
        assert list(offline) == [T0]
        assert offline[T0].paths == (str(dirs[0] / "t-0"), str(dirs[1] / "t-0"))
        assert "resolve-duplicates" in offline[T0].reason
        for call in (lambda: m.append(T0, b""), lambda: m.read(T0, 0, 100),
                     lambda: m.get_or_create_log(T0, is_new=True), lambda: m.delete_log(T0)):
            with pytest.raises(KafkaStorageError) as e:
                call()
            assert e.value.partition == "t-0" and e.value.log_dir == str(dirs[0])
            assert str(dirs[1] / "t-0") in str(e.value)
        write(m, T1, 2, "t1")  # the other partition of the same directory is served
    finally:
        m.shutdown()
    # neither copy was touched, and d0's checkpoint still holds the entry of its copy
    assert OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT).read()[T0] == 5
    assert OffsetCheckpointFile(dirs[1] / RECOVERY_POINT_CHECKPOINT).read()[T0] == 8


def test_resolve_duplicates_keeps_the_longer_copy_and_deletes_nothing(tmp_path: Path) -> None:
    dirs = make_duplicate(tmp_path)
    out = io.StringIO()
    assert resolve(dirs, out, dry_run=True) == 1
    assert (dirs[0] / "t-0").is_dir() and "would rename" in out.getvalue()
    assert resolve(dirs, out) == 1
    strays = [p for p in dirs[0].iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and strays[0].name.startswith("t-0.")
    assert any(f.name.endswith(".log") and f.stat().st_size > 0 for f in strays[0].iterdir())  # nothing deleted
    m = manager(dirs)
    try:
        assert m.offline_partitions() == {}
        assert m.dir_of(T0).path == dirs[1]
        assert values(m, T0) == [f"new:{i}" for i in range(8)]
        assert {s.path: s.stray for s in m.dir_status()}[str(dirs[0])] == (str(strays[0]),)
    finally:
        m.shutdown()


def test_resolve_duplicates_refuses_a_tie_unless_told_which(tmp_path: Path) -> None:
    dirs = make_duplicate(tmp_path, old=4, new=4)
    with pytest.raises(ResolveError, match=r"same offset 4.*--keep"):
        resolve(dirs, io.StringIO())
    assert (dirs[0] / "t-0").is_dir() and (dirs[1] / "t-0").is_dir()
    with pytest.raises(ResolveError, match="not one of the copies of a duplicated partition"):
        resolve(dirs, io.StringIO(), keep=[tmp_path])
    resolve(dirs, io.StringIO(), keep=[dirs[0] / "t-0"])
    assert (dirs[0] / "t-0").is_dir() and not (dirs[1] / "t-0").exists()


def test_a_failed_directory_keeps_its_partitions_known_until_a_restart_brings_them_back(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    m = manager(dirs)
    try:
        write(m, T0, 4, "a")  # least loaded: t-0 -> d0, t-1 -> d1
        write(m, T1, 4, "b")
        victim = m.dir_of(T0)
        m.handle_log_dir_failure(victim, "writing t-0: [Errno 28] No space left on device")
        assert m.offline_partitions()[T0].log_dir is victim
        assert "No space left" in m.offline_partitions()[T0].reason
        with pytest.raises(KafkaStorageError):
            m.get_or_create_log(T0, is_new=True)  # never made again on the healthy disk
        write(m, T1, 1, "b")
    finally:
        m.shutdown()
    m = manager(dirs)
    try:
        assert m.offline_partitions() == {}
        assert values(m, T0) == [f"a:{i}" for i in range(4)]
    finally:
        m.shutdown()


def test_partitions_of_a_directory_offline_at_start_are_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    m = manager(dirs)
    write(m, T0, 2, "a")
    write(m, T1, 2, "b")
    m.shutdown()
    real_lock = LogDir.lock

    def lock(self: LogDir) -> None:
        if self.path == dirs[0]:
            raise OSError(5, "Input/output error", str(self.path))
        real_lock(self)

    monkeypatch.setattr(LogDir, "lock", lock)
    m = manager(dirs)
    try:
        assert list(m.offline_partitions()) == [T0]
        assert m.offline_partitions()[T0].paths == (str(dirs[0] / "t-0"),)
        with pytest.raises(KafkaStorageError, match="Input/output error"):
            m.read(T0, 0, 10)
        with pytest.raises(KafkaStorageError):
            m.get_or_create_log(T0, is_new=True)
        assert values(m, T1) == ["b:0", "b:1"]
    finally:
        m.shutdown()


# ---------------------------------------------------------------------------- the HTTP API, in process
def test_http_answers_503_naming_partition_and_directory_and_refuses_to_recreate(tmp_path: Path) -> None:
    dirs = make_duplicate(tmp_path)
    (tmp_path / "token").write_text("tok")
    auth = {"Authorization": "Bearer tok"}
    config = config_from_document({"sidecar": {"token.file": str(tmp_path / "token")},
                                   "node": {"log.dirs": [str(d) for d in dirs]}}, str(tmp_path / "s.yaml"), {})
    sidecar = Sidecar(config)
    sidecar.start()
    pool = ThreadPoolExecutor(2)

    async def scenario(c: TestClient[Any, Any]) -> None:
        resp = await c.get("/v1/topics/t/partitions/0/records?offset=0", headers=auth)
        assert resp.status == 503
        body = await resp.json()
        assert body["error"] == "storage_error" and body["partition"] == "t-0"
        assert body["log_dir"] == str(dirs[0]) and str(dirs[1] / "t-0") in body["detail"]
        resp = await c.post("/v1/topics/t/partitions/0/records", json={"records": [{"value": "x"}]}, headers=auth)
        assert resp.status == 503
        status = await (await c.get("/v1/status", headers=auth)).json()
        assert [(p["topic"], p["partition"], p["state"]) for p in status["partitions"]] == [("t", 1, "online")]
        (off,) = status["offline_partitions"]
        assert (off["topic"], off["partition"], off["state"], off["log_dir"]) == ("t", 0, "offline", str(dirs[0]))
        topic = await (await c.get("/v1/topics/t", headers=auth)).json()
        assert topic["partitions"] == [1] and topic["offline_partitions"] == [0]
        parts = (await (await c.get("/v1/topics/t/partitions", headers=auth)).json())["partitions"]
        assert [(p["partition"], p["state"]) for p in parts] == [(0, "offline"), (1, "online")]
        # the operator's sync counts the offline partition: nothing to grow
        assert topic_actions([TopicSpec("t", 2, {})], [topic]) == []
        resp = await c.post("/v1/topics", json={"name": "t", "partitions": 2}, headers=auth)
        assert resp.status == 409
        resp = await c.post("/v1/topics/t/partitions", json={"count": 2}, headers=auth)
        assert resp.status == 400  # it has 2 already
        metrics = await (await c.get("/metrics", headers=auth)).text()
        assert f'logkeeper_partition_offline{{logDirectory="{dirs[0]}",partition="0",topic="t"}} 1.0' in metrics

    async def main() -> None:
        api = Api(sidecar, config.sidecar, TokenFile(config.sidecar.token_file), pool)
        async with TestClient(TestServer(build_app(api))) as client:
            await scenario(client)

    try:
        asyncio.run(main())
    finally:
        sidecar.shutdown()
        pool.shutdown()


# ---------------------------------------------------------------------------- a real sidecar process
def _kafka(bootstrap: str) -> dict[str, Any]:
    c = WireClient(bootstrap)
    now = int(time.time() * 1000)
    try:
        meta = c.call(METADATA, 12, {"topics": [{"topic_id": b"\0" * 16, "name": "t"}],
                                     "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        produce = c.call(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": p, "records": build_batch([Record(0, now, b"k", b"v")])}
                                             for p in (0, 1)]}]})
        fetch = c.call(FETCH, 12, {"max_wait_ms": 0, "min_bytes": 1, "isolation_level": 0, "session_id": 0,
                                   "topics": [{"topic": "t", "partitions": [
                                       {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}]}],
                                   "forgotten_topics_data": [], "rack_id": ""})
        offsets = c.call(LIST_OFFSETS, 8, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    finally:
        c.close()
    return {"meta": meta, "produce": produce, "fetch": fetch, "offsets": offsets}


def test_a_user_repairs_a_duplicated_partition(tmp_path: Path) -> None:
    """What the README's repair steps say, with a real sidecar and the command line."""
    dirs = make_duplicate(tmp_path)
    config = {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}, "node": {"log.dirs": [str(d) for d in dirs]}}
    proc = SidecarProcess(tmp_path / "sidecar", config)
    with proc:
        answers = _kafka(proc.kafka_bootstrap)
        (topic,) = answers["meta"]["topics"]
        assert {p["partition_index"]: p["error_code"] for p in topic["partitions"]} == {
            0: ec.KAFKA_STORAGE_ERROR, 1: ec.NONE}
        assert {p["index"]: p["error_code"] for p in answers["produce"]["responses"][0]["partition_responses"]} == {
            0: ec.KAFKA_STORAGE_ERROR, 1: ec.NONE}
        assert answers["fetch"]["responses"][0]["partitions"][0]["error_code"] == ec.KAFKA_STORAGE_ERROR
        assert answers["offsets"]["topics"][0]["partitions"][0]["error_code"] == ec.KAFKA_STORAGE_ERROR
        assert proc.client.status()["offline_partitions"][0]["partition"] == 0
        # the repair, while the sidecar runs (it opened neither copy)
        done = subprocess.run([sys.executable, "-m", "logkeeper.cli", "resolve-duplicates", *map(str, dirs)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "(kept)" in done.stdout and "nothing deleted" in done.stdout
    with proc:  # the restart serves the kept copy
        status = proc.client.status()
        assert status["offline_partitions"] == []
        got = [r["value"] for r in proc.client.fetch_all("t", 0)]
        assert got == [f"new:{i}" for i in range(8)]
    shutil.rmtree(tmp_path / "sidecar", ignore_errors=True)


def test_an_offline_offsets_partition_makes_the_coordinator_unavailable_not_empty(tmp_path: Path) -> None:
    """Were __consumer_offsets made again empty, consumers would find no commits and reset."""
    dirs = make_duplicate(tmp_path)
    for d in dirs:
        (d / "__consumer_offsets-0").mkdir()
    config = {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}, "node": {"log.dirs": [str(d) for d in dirs]}}
    with SidecarProcess(tmp_path / "sidecar", config) as proc:
        c = WireClient(proc.kafka_bootstrap)
        try:
            found = c.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
            assert found["error_code"] == ec.COORDINATOR_NOT_AVAILABLE
            assert "__consumer_offsets-0" in found["error_message"]
        finally:
            c.close()
        assert _kafka(proc.kafka_bootstrap)["produce"]["responses"][0]["partition_responses"][1]["error_code"] == 0
    assert sorted(p.name for p in dirs[1].iterdir() if p.name.startswith("__")) == ["__consumer_offsets-0"]
