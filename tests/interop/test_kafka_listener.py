"""Stock Kafka clients against the running sidecar's Kafka listener: kcat (Debian's, fetched by
interop/fetch_kcat.sh), confluent-kafka (librdkafka) and kafka-python produce, consume and commit
in consumer groups; a compacted topic read from the beginning after cleaning shows the latest
value per key; committed offsets survive a restart; clients cannot produce to internal topics;
malformed frames close their connection and harm no data."""

from __future__ import annotations

import random
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from logkeeper.log import page_cache
from logkeeper.log.file_records import FileRecords
from logkeeper.protocol import messages as m
from logkeeper.records.builder import Record, build_batch
from logkeeper.server.process import SidecarProcess
from logkeeper.tools.verify import verify_path
from tests.kafka_wire import WireClient, fetch_frame, fetched_records, produce_batches, request_frame, scrape

REPO = Path(__file__).resolve().parents[2]
SIDECAR_KEYS = {"kafka.listen": ["127.0.0.1:0"], "group.initial.rebalance.delay.ms": 0}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2048, "min.cleanable.dirty.ratio": 0.01,
             "delete.retention.ms": 0}


def config(root: Path) -> dict[str, Any]:
    return {"sidecar": dict(SIDECAR_KEYS),
            "node": {"log.dirs": [str(root / "d0")], "log.initial.task.delay.ms": 200},
            "cleaner": {"log.cleaner.backoff.ms": 100},
            "topics": {"kcat": {"partitions": 1}, "ck": {"partitions": 2}, "kp": {"partitions": 2},
                       "wire": {"partitions": 1}, "slices": {"partitions": 1},
                       "metered": {"partitions": 1}}}


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarProcess]:
    root = tmp_path_factory.mktemp("kafka-sidecar")
    with SidecarProcess(root, config(root)) as proc:
        yield proc


@pytest.fixture(scope="module")
def kcat() -> str:
    result = subprocess.run(["bash", str(REPO / "interop" / "fetch_kcat.sh")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"interop/fetch_kcat.sh failed:\n{result.stderr}"
    return result.stdout.strip().splitlines()[-1]


def consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout_s: float = 20.0,
                **conf: Any) -> list[Any]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", **conf})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expect and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
    c.close()
    return out


# ---------------------------------------------------------------------------------------- kcat
def test_kcat_produces_and_consumes(sidecar: SidecarProcess, kcat: str) -> None:
    lines = [f"key-{i}:value {i}" for i in range(50)]
    produced = subprocess.run([kcat, "-b", sidecar.kafka_bootstrap, "-P", "-t", "kcat", "-K:", "-z", "lz4"],
                              input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([kcat, "-b", sidecar.kafka_bootstrap, "-C", "-t", "kcat", "-o", "beginning", "-e",
                               "-f", "%o %k=%s\n"], capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{i} key-{i}=value {i}" for i in range(50)]
    listed = subprocess.run([kcat, "-b", sidecar.kafka_bootstrap, "-L", "-t", "kcat"], capture_output=True,
                            text=True, timeout=60)
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listed.stdout, listed.stdout


# ------------------------------------------------------------------------------ confluent-kafka
def test_confluent_kafka_produces_consumes_and_commits_in_a_group(sidecar: SidecarProcess) -> None:
    bootstrap = sidecar.kafka_bootstrap
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                            "linger.ms": 5, "compression.type": "zstd"})
    for i in range(400):
        producer.produce("ck", key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    group = {"bootstrap.servers": bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest",
             "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    first = ck.Consumer(group)
    first.subscribe(["ck"])
    seen: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 250 and time.monotonic() < deadline:
        msg = first.poll(0.2)
        if msg is not None and not msg.error():
            seen[msg.key()] = msg.value()
    first.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in first.committed([ck.TopicPartition("ck", p) for p in (0, 1)])}
    first.close()
    assert sum(committed.values()) >= 250
    second = ck.Consumer(group)  # the same group resumes from the commits
    second.subscribe(["ck"])
    deadline = time.monotonic() + 30
    rest = 0
    while len(seen) < 400 and time.monotonic() < deadline:
        msg = second.poll(0.2)
        if msg is not None and not msg.error():
            assert msg.offset() >= committed[msg.partition()]
            seen[msg.key()] = msg.value()
            rest += 1
    second.close()
    assert seen == {f"k{i}".encode(): f"v{i}".encode() for i in range(400)}
    assert rest == 400 - sum(committed.values())


def test_confluent_kafka_admin_creates_describes_alters_and_deletes(sidecar: SidecarProcess) -> None:
    admin = AdminClient({"bootstrap.servers": sidecar.kafka_bootstrap})
    for f in admin.create_topics([NewTopic("admin-t", 3, 1, config={"cleanup.policy": "compact"})]).values():
        f.result(30)
    with pytest.raises(ck.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        for f in admin.create_topics([NewTopic("admin-t", 1, 1)]).values():
            f.result(30)
    with pytest.raises(ck.KafkaException, match="INVALID_REPLICATION_FACTOR"):
        for f in admin.create_topics([NewTopic("admin-r3", 1, 3)]).values():
            f.result(30)
    meta = admin.list_topics(timeout=30)
    assert len(meta.topics["admin-t"].partitions) == 3
    resource = ConfigResource("topic", "admin-t", set_config={"retention.ms": "60000"}, incremental_configs=[
        ck.admin.ConfigEntry("retention.ms", "60000",
                             incremental_operation=ck.admin.AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    described = next(iter(admin.describe_configs([ConfigResource("topic", "admin-t")]).values())).result(30)
    assert described["cleanup.policy"].value == "compact" and described["retention.ms"].value == "60000"
    assert described["segment.bytes"].is_default and not described["retention.ms"].is_default
    for f in admin.delete_topics(["admin-t"]).values():
        f.result(30)
    assert "admin-t" not in admin.list_topics(timeout=30).topics


# --------------------------------------------------------------------------------- kafka-python
def test_kafka_python_produces_consumes_and_commits_in_a_group(sidecar: SidecarProcess) -> None:
    bootstrap = sidecar.kafka_bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             compression_type="gzip", linger_ms=5)
    futures = [producer.send("kp", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
               for i in range(200)]
    producer.flush(30)
    offsets = sorted((f.get(30).partition, f.get(30).offset) for f in futures)
    producer.close()
    assert offsets == sorted([(0, i) for i in range(100)] + [(1, i) for i in range(100)])
    consumer = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    got = {(msg.key, msg.value) for msg in consumer}
    assert got == {(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)}
    consumer.commit()
    assert consumer.committed(TopicPartition("kp", 0)) == 100
    consumer.close()
    again = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kp-group", auto_offset_reset="earliest",
                          consumer_timeout_ms=1500)
    assert [msg.offset for msg in again] == []  # everything was committed
    again.close()


# ---------------------------------------------------------------------- partial last batches
def test_fetches_ending_inside_a_batch_lose_and_repeat_nothing(sidecar: SidecarProcess, kcat: str) -> None:
    """The listener answers a fetch with a slice of the segment, as Kafka's brokers do: the first
    batch whole, then up to the partition's max bytes, so the last batch of an answer is mostly
    cut. Each client drops the cut batch and fetches it again from its offset: with a limit of
    about 1.3 batches, every answer here ends inside a batch."""
    bootstrap = sidecar.kafka_bootstrap
    # 20 records a batch, made here: left to a client, the batches follow its linger and what it
    # knows of the partition, and librdkafka twice sent the first records one a batch (172 bytes)
    # on a loaded machine (make test runs two workers), even with each group of 20 flushed
    now = int(time.time() * 1000)
    produce_batches(bootstrap, "slices", (
        build_batch([Record(i - first, now, f"k{i}".encode(), b"%03d" % i + b"v" * 97)
                     for i in range(first, first + 20)])
        for first in range(0, 400, 20)))
    sizes = []
    for path in sorted((sidecar.root / "d0" / "slices-0").glob("*.log")):
        segment = FileRecords(path, writable=False)
        sizes += [h.size for _, h in segment.headers_from(0)]
        segment.close()
    assert len(sizes) > 10 and max(sizes) < 3000 < 2 * min(sizes), sizes  # so 3000 bytes end inside a batch
    want = [(f"k{i}".encode(), b"%03d" % i + b"v" * 97) for i in range(400)]
    limit = {"fetch.max.bytes": 3000, "max.partition.fetch.bytes": 3000, "receive.message.max.bytes": 4000,
             "message.max.bytes": 3000}
    got = consume_all(bootstrap, "slices", 1, 400, **limit)
    assert [(m.key(), m.value()) for m in got] == want and [m.offset() for m in got] == list(range(400))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000, max_partition_fetch_bytes=3000, fetch_max_bytes=3000)
    consumer.assign([TopicPartition("slices", 0)])
    assert [(m.key, m.value) for m in consumer] == want
    consumer.close()
    lines = subprocess.run([kcat, "-b", bootstrap, "-C", "-t", "slices", "-o", "beginning", "-e", "-f", "%k\\n",
                            "-X", "fetch.max.bytes=3000", "-X", "max.partition.fetch.bytes=3000",
                            "-X", "message.max.bytes=3000"],
                           capture_output=True, text=True, timeout=60).stdout.split()
    assert lines == [k.decode() for k, _ in want]


# ------------------------------------------------------------------------- compacted topic
def test_compacted_topic_read_from_the_beginning_after_cleaning_shows_the_latest_value_per_key(
        sidecar: SidecarProcess) -> None:
    bootstrap = sidecar.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("compacted", 1, 1, config={k: str(v) for k, v in COMPACTED.items()})
                                  ]).values():
        f.result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    latest: dict[bytes, bytes | None] = {}
    for round_ in range(30):
        for k in range(20):
            key, value = f"key-{k}".encode(), f"round-{round_}-{k}".encode() * 3
            producer.produce("compacted", key=key, value=value)
            latest[key] = value
        producer.flush(30)
    producer.produce("compacted", key=b"key-3", value=None)  # a tombstone
    latest.pop(b"key-3")
    for k in range(20):  # roll past the tombstone so that it becomes cleanable
        producer.produce("compacted", key=f"key-{k}".encode() if k != 3 else b"key-x", value=b"last")
    producer.flush(30)
    latest.update({f"key-{k}".encode(): b"last" for k in range(20) if k != 3})
    latest[b"key-x"] = b"last"
    produced = 30 * 20 + 1 + 20
    deadline = time.monotonic() + 60
    while True:
        end = sidecar.client.json("GET", "/v1/topics/compacted/partitions/0/offsets")["log_end_offset"]
        records = consume_all(bootstrap, "compacted", 1, expect=end, timeout_s=5)
        if len(records) < produced / 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(records) < produced / 3, f"not cleaned: {len(records)} of {produced} records left"
    seen: dict[bytes, bytes | None] = {}
    for msg in records:
        seen[msg.key()] = msg.value()
    seen = {k: v for k, v in seen.items() if v is not None}
    assert seen == latest


# --------------------------------------------------------------------------- restart
def test_committed_offsets_survive_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "restart"
    with SidecarProcess(root, {"sidecar": dict(SIDECAR_KEYS), "topics": {"r": {"partitions": 1}}}) as proc:
        c = ck.Consumer({"bootstrap.servers": proc.kafka_bootstrap, "group.id": "survivor",
                         "enable.auto.commit": False})
        c.commit(offsets=[ck.TopicPartition("r", 0, 0)], asynchronous=False)  # offset 0: the log is empty
        producer = ck.Producer({"bootstrap.servers": proc.kafka_bootstrap})
        for i in range(5):
            producer.produce("r", value=b"x%d" % i)
        producer.flush(30)
        c.commit(offsets=[ck.TopicPartition("r", 0, 4, "meta")], asynchronous=False)
        c.close()
        assert proc.stop() == 0
        proc.start()
        c = ck.Consumer({"bootstrap.servers": proc.kafka_bootstrap, "group.id": "survivor",
                         "enable.auto.commit": False})
        (tp,) = c.committed([ck.TopicPartition("r", 0)], timeout=30)
        assert (tp.offset, tp.metadata) == (4, "meta")
        c.subscribe(["r"])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            got = c.poll(0.2)
            msg = got if got is not None and not got.error() else None
        c.close()
        assert msg is not None and (msg.offset(), msg.value()) == (4, b"x4")


# ------------------------------------------------------------------------ internal topics
def test_clients_cannot_produce_to_internal_topics_while_the_coordinator_still_writes(
        sidecar: SidecarProcess, kcat: str) -> None:
    bootstrap = sidecar.kafka_bootstrap
    group = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "internal-guard", "enable.auto.commit": False})
    group.commit(offsets=[ck.TopicPartition("kcat", 0, 1)], asynchronous=False)  # __consumer_offsets exists now
    errors: list[Any] = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    producer.produce("__consumer_offsets", key=b"forged", value=b"forged", partition=0,
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.produce("kcat", key=b"k", value=b"fine", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    forged = [e for e in errors if e is not None]
    assert len(errors) == 2 and len(forged) == 1 and forged[0].code() == ck.KafkaError.TOPIC_EXCEPTION, errors
    done = subprocess.run([kcat, "-b", bootstrap, "-P", "-t", "__consumer_offsets", "-p", "0"], input="forged\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Invalid topic" in done.stderr, (done.returncode, done.stderr)
    wire = WireClient(bootstrap)  # __transaction_state too, existing or not (librdkafka waits 30 s for a topic)
    for topic in ("__consumer_offsets", "__transaction_state"):
        refused = wire.call(m.PRODUCE, 9, _produce_body(b"forged", b"forged", topic))
        part = refused["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["error_message"]) == (17, f"Cannot append to internal topic {topic}")
    wire.close()
    group.commit(offsets=[ck.TopicPartition("kcat", 0, 2)], asynchronous=False)  # the coordinator's writes go on
    (tp,) = group.committed([ck.TopicPartition("kcat", 0)], timeout=30)
    group.close()
    assert tp.offset == 2
    reader = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "internal-reader", "enable.auto.commit": False})
    reader.assign([ck.TopicPartition("__consumer_offsets", 0, ck.OFFSET_BEGINNING)])
    keys: list[bytes] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msg = reader.poll(0.2)
        if msg is None:
            if keys:
                break
            continue
        if not msg.error():
            keys.append(msg.key() or b"")
    reader.close()
    assert keys and b"forged" not in keys


# ------------------------------------------------------------------------ raw protocol
def test_metrics_count_the_listeners_requests_bytes_and_connections(sidecar: SidecarProcess, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    batches = [build_batch([Record(i, now, f"m{b}-{i}".encode(), b"v" * 100) for i in range(20)])
               for b in range(5)]
    before = scrape(sidecar)
    produce_batches(sidecar.kafka_bootstrap, "metered", batches)
    wire = WireClient(sidecar.kafka_bootstrap)
    try:
        wire.send_raw(fetch_frame("metered", 1 << 20))
        frame = wire.read_frame()
        assert frame is not None and len(fetched_records(frame)) == sum(len(b) for b in batches)  # offsets assigned
        after = scrape(sidecar)
        assert after[("logkeeper_kafka_connections", ())] >= 1  # this one, still open
    finally:
        wire.close()

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    appended = sum(len(b) for b in batches)
    assert grew("logkeeper_kafka_record_bytes_in_total", topic="metered") == appended
    assert grew("logkeeper_kafka_record_bytes_out_total", topic="metered") == appended
    assert grew("logkeeper_kafka_request_duration_seconds_count", api="Produce") >= len(batches)
    assert grew("logkeeper_kafka_request_duration_seconds_count", api="Fetch") >= 1
    assert grew("logkeeper_kafka_fetch_reads_total", on="loop") + grew("logkeeper_kafka_fetch_reads_total",
                                                                        on="thread") >= 1
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * 4096)
    with probe.open("rb") as f:
        page_cache.cached(f.fileno(), 0, 4096)  # asks this kernel, as the sidecar's first fetch did
    assert after[("logkeeper_kafka_page_cache_queryable", ())] == (1.0 if page_cache.queryable() else 0.0)
    assert after[("logkeeper_kafka_pool_bytes", (("pool", "requests"), ("state", "capacity")))] == 100 * 1024 * 1024
    for event in ("connections_refused", "connections_idle_closed", "requests_oversized", "request_pool_waits",
                  "authentication_failures"):
        assert (f"logkeeper_kafka_{event}_total", ()) in after, event


def test_api_versions_and_unsupported_versions(sidecar: SidecarProcess) -> None:
    wire = WireClient(sidecar.kafka_bootstrap)
    got = wire.call(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert got["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in got["api_keys"]}
    assert ranges == {s.key: (s.min_version, s.max_version) for s in m.APIS.values()}
    # a too-new ApiVersions gets v0 with UNSUPPORTED_VERSION and the list
    frame = struct.pack(">hhi", m.API_VERSIONS, 99, 7) + struct.pack(">h", 1) + b"x" + b"\x00\x00\x00"
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    body = wire.read_frame()
    assert body is not None and body[:4] == struct.pack(">i", 7) and body[4:6] == struct.pack(">h", 35)
    # Produce v2 (message formats 0/1): UNSUPPORTED_VERSION per partition
    old = wire.call(m.PRODUCE, 2, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "wire", "partition_data": [{"index": 0, "records": build_batch([Record(0, 1, b"k", b"v")])}]}]})
    assert old["responses"][0]["partition_responses"][0]["error_code"] == 35
    wire.close()
    # an unknown API key closes the connection
    wire = WireClient(sidecar.kafka_bootstrap)
    frame = struct.pack(">hhi", 999, 0, 1) + struct.pack(">h", -1)
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    assert wire.is_closed_by_server()
    wire.close()


def _produce_body(key: bytes, value: bytes, topic: str = "wire") -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([Record(0, now, key, value)])}]}]}


def test_malformed_frames_close_the_connection_and_harm_no_data(sidecar: SidecarProcess) -> None:
    rng = random.Random(9)
    good = WireClient(sidecar.kafka_bootstrap)
    acked: list[tuple[bytes, bytes]] = []

    def produce_good(i: int) -> None:
        kv = (b"good-%d" % i, b"value-%d" % i)
        got = good.call(m.PRODUCE, 9, _produce_body(*kv))
        assert got["responses"][0]["partition_responses"][0]["error_code"] == 0
        acked.append(kv)

    produce_good(0)
    valid = request_frame(m.PRODUCE, 9, _produce_body(b"bad", b"never"), 5)
    cases: list[bytes] = [
        struct.pack(">i", -5), struct.pack(">i", 3) + b"abc", struct.pack(">i", 1 << 30),
        struct.pack(">i", 200 << 20) + b"\x00" * 16, b"\x00\x00\x00\x08" + b"\xff" * 8,
    ]
    cases += [struct.pack(">i", cut - 4) + valid[4:cut] for cut in range(12, len(valid) - 1, 7)]
    for _ in range(60):
        size = rng.randrange(8, 200)
        cases.append(struct.pack(">i", size) + struct.pack(">hh", rng.choice(list(m.APIS)), rng.randrange(0, 13))
                     + bytes(rng.randrange(256) for _ in range(size - 4)))
    closed = 0
    for i, data in enumerate(cases):
        bad = WireClient(sidecar.kafka_bootstrap, timeout_s=5)
        bad.send_raw(data)
        if len(data) >= 4 and struct.unpack(">i", data[:4])[0] > len(data) - 4 and \
                struct.unpack(">i", data[:4])[0] <= 100 << 20:
            bad.sock.shutdown(1)  # a truncated frame: the peer stops sending
        reply = bad.read_frame()
        closed += reply is None
        bad.close()
        if i % 10 == 0:
            produce_good(i + 1)
    assert closed >= len(cases) * 0.8
    end = sidecar.client.json("GET", "/v1/topics/wire/partitions/0/offsets")["log_end_offset"]
    records = consume_all(sidecar.kafka_bootstrap, "wire", 1, expect=end, timeout_s=10)
    pairs = [(msg.key(), msg.value()) for msg in records]
    assert [p for p in pairs if p[0].startswith(b"good-")] == acked
    assert all(p[1] != b"never" for p in pairs if p[0] == b"bad")
    produce_good(10_000)  # the listener still serves
    good.close()
    report = verify_path(sidecar.log_dirs[0] / "wire-0")
    assert report.ok, report
