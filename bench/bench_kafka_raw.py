"""The server's side of a fetch and of a produce, without Kafka's Java clients in the way: raw
Fetch and Produce requests against the sidecar and against Apache Kafka, side by side.

ConsumerPerformance (bench_kafka_perf.py) is limited by the client on this machine: its
figures say little about what a fetch costs the server. Here one plain socket asks each server
for the same topic (written by ProducerPerformance, ``--mb`` MB of 100-byte records in its default
16 KiB batches), one Fetch v11 at a time of at most ``--fetch-bytes`` for one partition, walking
from offset 0 to the end; the time of each is from sending the request to having the whole
response, and the server's CPU (user + system, /proc) is counted over the walk. The client's own
work is the same for both servers (it reads each response into one reused buffer and looks only
at the last batch's header).

Produce: ``--produce-requests`` requests of one batch of about 1 MiB (1,000-byte random values,
uncompressed, the same bytes for every server) for one partition, acks=1, ``PRODUCE_IN_FLIGHT``
in flight on one socket as the Java producer's max.in.flight.requests.per.connection (a thread
sends while the main thread reads the answers); a request's time from sending it to having its
answer. Then ``--small-produce-requests`` the same way of one 16 KiB batch, the Java producer's
default batch.size, where what a request costs beside its bytes weighs most.

Rows: the sidecar; the sidecar with glibc's allocator defaults (a ``GLIBC_TUNABLES`` that sets
nothing, which server/heap.py leaves to the user: the A of its change); Kafka. ``--rounds`` walks
each, the servers in turn, alternating which goes first; medians reported. Prints the
``side-by-side`` lines and writes bench/results/kafka_raw.md.

Run: ``.venv/bin/python bench/bench_kafka_raw.py [--mb 100] [--rounds 5] [--produce-requests 200]``
(``make bench-kafka``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.kafka_tools import ProducerCase, cpu_seconds, create_topic, per_mb, produce  # noqa: E402
from bench.side_by_side import date_and_commit, machine_line, parse_bench_args, side_by_side_line, svg_bars  # noqa: E402
from logkeeper.errors import LengthPastEndError, ShortBatchError  # noqa: E402
from logkeeper.protocol.messages import FETCH, FETCH_REQUEST, FETCH_RESPONSE, PRODUCE, PRODUCE_REQUEST, PRODUCE_RESPONSE  # noqa: E402
from logkeeper.protocol.primitives import Reader, Writer  # noqa: E402
from logkeeper.records.batch import BatchHeader  # noqa: E402
from logkeeper.records.builder import Record, build_batch  # noqa: E402
from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import Broker, fetch_kafka  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka_raw.md"
PLOT = RESULTS.with_suffix(".svg")
FETCH_VERSION = 11  # both serve it; the last version that names topics (13+ use topic ids)
PRODUCE_VERSION = 8  # both serve it; not flexible (a plain header)
PRODUCE_IN_FLIGHT = 5  # the Java producer's max.in.flight.requests.per.connection
SMALL_BATCH_BYTES = 16 << 10  # the Java producer's default batch.size
PRODUCE_TOPIC = "raw-produce"
WALK_LIMIT_S = 60.0  # a walk that has not reached the end by then is cut (and reported short)
GLIBC_DEFAULTS = "glibc.malloc.tcache_count=7"  # glibc's own default: the allocator as shipped
SIDECAR_CONF = {"sidecar": {"kafka.listen": ["127.0.0.1:0"], "group.initial.rebalance.delay.ms": 0}}


@dataclass(frozen=True)
class Requests:
    """One walk of fetches or one burst of produces against a server."""

    count: int
    bytes: int
    seconds: float  # a walk: the sum of its fetches' times (the client's bookkeeping between them left out)
    latencies_s: list[float]
    server_cpu_s: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds

    @property
    def cpu_ms_per_mb(self) -> float:
        return per_mb(self.server_cpu_s, self.bytes / 1e6)


def _header(api_key: int, version: int, correlation_id: int) -> Writer:
    w = Writer()
    w.buf += struct.pack(">hhih", api_key, version, correlation_id, len(b"bench")) + b"bench"
    return w


def _framed(w: Writer) -> bytes:
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def _request(correlation_id: int, topic: str, offset: int, fetch_bytes: int) -> bytes:
    w = _header(FETCH, FETCH_VERSION, correlation_id)
    FETCH_REQUEST.encode(w, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": fetch_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "log_start_offset": -1, "partition_max_bytes": fetch_bytes}]}]},
        FETCH_VERSION)
    return _framed(w)


def produce_batch(value_bytes: int = 1000, batch_bytes: int = 1 << 20) -> bytes:
    """One uncompressed batch of about ``batch_bytes``: random values, no keys (ProducerPerformance's shape)."""
    now = int(time.time() * 1000)
    count = batch_bytes // (value_bytes + 10)
    return build_batch([Record(i, now, None, os.urandom(value_bytes)) for i in range(count)])


def _produce_request(correlation_id: int, batch: bytes) -> bytes:
    w = _header(PRODUCE, PRODUCE_VERSION, correlation_id)
    PRODUCE_REQUEST.encode(w, {"transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topic_data": [
        {"name": PRODUCE_TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}, PRODUCE_VERSION)
    return _framed(w)


def _produce_error(frame: bytes) -> int:
    """The one partition's error code in a Produce response (the frame after its size)."""
    answer = PRODUCE_RESPONSE.decode(Reader(frame, 4), PRODUCE_VERSION)  # 4: the correlation id
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


def produce_burst(bootstrap: str, pid: int, batch: bytes, requests: int) -> Requests:
    """``requests`` Produce requests of ``batch``, PRODUCE_IN_FLIGHT at a time on one socket."""
    host, port = bootstrap.rsplit(":", 1)
    frames = [_produce_request(i, batch) for i in range(requests)]
    slots = threading.Semaphore(PRODUCE_IN_FLIGHT)
    sent: deque[float] = deque()
    latencies: list[float] = []
    failed: list[BaseException] = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(WALK_LIMIT_S)

        def send() -> None:
            try:
                for frame in frames:
                    if not slots.acquire(timeout=WALK_LIMIT_S):
                        raise TimeoutError(f"{bootstrap}: no answer for {WALK_LIMIT_S:.0f} s")
                    sent.append(time.perf_counter())
                    sock.sendall(frame)
            except BaseException as e:  # reported by the reading side
                failed.append(e)

        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        sender = threading.Thread(target=send, name="raw-produce-sender")
        sender.start()
        try:
            for i in range(requests):
                size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
                answer = sock.recv(size, socket.MSG_WAITALL)
                latencies.append(time.perf_counter() - sent.popleft())
                slots.release()
                if len(answer) != size or _produce_error(answer) != 0:
                    raise RuntimeError(f"{bootstrap}: request {i} answered {answer[:64].hex()}")
        finally:
            sender.join(WALK_LIMIT_S)
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu_before
    if failed:
        raise RuntimeError(f"{bootstrap}: sending failed") from failed[0]
    return Requests(requests, requests * len(batch), seconds, latencies, cpu)


def _next_offset(frame: memoryview) -> int | None:
    """The offset after the last whole batch of a fetch response for one partition (the frame after
    its size); None when it has none."""
    answer = FETCH_RESPONSE.decode(Reader(frame, 4), FETCH_VERSION)  # 4: the correlation id
    records = answer["responses"][0]["partitions"][0]["records"] or b""
    pos, following = 0, None
    while True:
        try:
            header = BatchHeader.parse(records, pos)
        except (ShortBatchError, LengthPastEndError):
            return following  # the end, or a partial batch: Kafka's slice may end inside one
        following, pos = header.next_offset, pos + header.size


def walk(bootstrap: str, pid: int, topic: str, end_offset: int, fetch_bytes: int) -> Requests:
    host, port = bootstrap.rsplit(":", 1)
    latencies: list[float] = []
    total = 0
    buf = memoryview(bytearray(fetch_bytes + (1 << 16)))
    cpu_before = cpu_seconds(pid)
    deadline = time.monotonic() + WALK_LIMIT_S
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offset, correlation_id = 0, 0
        while offset < end_offset and time.monotonic() < deadline:
            correlation_id += 1
            request = _request(correlation_id, topic, offset, fetch_bytes)
            started = time.perf_counter()
            sock.sendall(request)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            if size > len(buf):
                raise RuntimeError(f"{bootstrap}: a response of {size} bytes for a fetch of {fetch_bytes}")
            got = 0
            while got < size:
                n = sock.recv_into(buf[got:size])
                if n == 0:
                    raise RuntimeError(f"{bootstrap} closed the connection inside a response")
                got += n
            latencies.append(time.perf_counter() - started)
            total += size
            following = _next_offset(buf[:size])
            if following is None:
                raise RuntimeError(f"{bootstrap}: no whole batch at offset {offset} of {topic}")
            offset = following
    if offset < end_offset:
        raise RuntimeError(f"{bootstrap}: the walk reached offset {offset} of {end_offset} in {WALK_LIMIT_S:.0f} s")
    return Requests(len(latencies), total, sum(latencies), latencies, cpu_seconds(pid) - cpu_before)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="payload MB of 100-byte records written to each server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="a fetch's partition_max_bytes (the "
                    "consumer's default max.partition.fetch.bytes)")
    ap.add_argument("--produce-requests", type=int, default=200, help="Produce requests of ~1 MiB a round")
    ap.add_argument("--small-produce-requests", type=int, default=2000, help="Produce requests of ~16 KiB a round")
    args, command = parse_bench_args(ap, "bench_kafka_raw.py", argv)
    dist = fetch_kafka()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-raw-"))
    case = ProducerCase("1", 100, None)
    records = args.mb * 1_000_000 // case.record_bytes
    batches = {"1 MiB": (produce_batch(), args.produce_requests),
               "16 KiB": (produce_batch(batch_bytes=SMALL_BATCH_BYTES), args.small_produce_requests)}
    walks: dict[str, list[Requests]] = {}
    bursts: dict[tuple[str, str], list[Requests]] = {}  # (batch, server)
    started = time.monotonic()
    try:
        broker = Broker(dist, work / "kafka", {"num.partitions": 1})
        broker.format()
        broker.start()
        sidecar = SidecarProcess(work / "sidecar", SIDECAR_CONF).start()
        plain = SidecarProcess(work / "sidecar-glibc-defaults", SIDECAR_CONF,
                               env={"GLIBC_TUNABLES": GLIBC_DEFAULTS}).start()
        try:
            assert sidecar.proc is not None and plain.proc is not None and broker.proc is not None
            pids = {"logkeeper": sidecar.proc.pid, "logkeeper, glibc's allocator defaults": plain.proc.pid,
                    "kafka": broker.proc.pid}
            bootstrap = {"logkeeper": sidecar.kafka_bootstrap, "kafka": broker.bootstrap,
                         "logkeeper, glibc's allocator defaults": plain.kafka_bootstrap}
            for name in pids:
                create_topic(dist, bootstrap[name], case.topic)
                create_topic(dist, bootstrap[name], PRODUCE_TOPIC)
                produce(dist, bootstrap[name], case, records)
            order = list(pids)
            for r in range(-1, args.rounds):  # round -1 warms every server's paths up, not counted
                label = "warm-up" if r < 0 else f"round {r}"
                for name in order if r % 2 == 0 else order[::-1]:
                    w = walk(bootstrap[name], pids[name], case.topic, records, args.fetch_bytes)
                    if r >= 0:
                        walks.setdefault(name, []).append(w)
                    said = [f"fetch: {w.count} fetches, median {_ms(w.latencies_s):.2f} ms, {w.mb_per_s:.0f} MB/s, "
                            f"server CPU {w.cpu_ms_per_mb:.2f} ms/MB"]
                    for size, (batch, count) in batches.items():
                        b = produce_burst(bootstrap[name], pids[name], batch, count)
                        if r >= 0:
                            bursts.setdefault((size, name), []).append(b)
                        said.append(f"produce {size}: median {_ms(b.latencies_s):.2f} ms, {b.mb_per_s:.0f} MB/s, "
                                    f"server CPU {b.cpu_ms_per_mb:.2f} ms/MB")
                    print(f"{label}: {name}: " + "; ".join(said), flush=True)
        finally:
            sidecar.stop()
            plain.stop()
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = {size: len(batch) for size, (batch, _) in batches.items()}
    text, lines, bars = report(command, args, dist.version, sizes, walks, bursts, time.monotonic() - started)
    RESULTS.write_text(text)
    PLOT.write_text(svg_bars(f"logkeeper / Kafka {dist.version}, raw requests (MB/s ratio)", bars))
    print("\n".join(lines))
    print(f"(written to {RESULTS.relative_to(REPO)}, {PLOT.relative_to(REPO)})")
    return 0


def _ms(latencies_s: list[float], q: float = 0.5) -> float:
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def report(command: str, args: argparse.Namespace, version: str, batch_bytes: dict[str, int],
           walks: dict[str, list[Requests]], bursts: dict[tuple[str, str], list[Requests]],
           seconds: float) -> tuple[str, list[str], list[tuple[str, float]]]:
    """The results file's text, its side-by-side lines and the plot's bars (each line's ratio)."""
    def med(runs: list[Requests], f: str) -> float:
        return float(statistics.median(getattr(x, f) for x in runs))

    def med_ms(runs: list[Requests], q: float = 0.5) -> float:
        return statistics.median(_ms(x.latencies_s, q) for x in runs)

    fetch_rows = [f"| {name} | {ws[0].count} | {med_ms(ws):.2f} | {med(ws, 'mb_per_s'):.0f} "
                  f"| {med(ws, 'cpu_ms_per_mb'):.2f} | " + ", ".join(f"{w.mb_per_s:.0f}" for w in ws) + " |"
                  for name, ws in walks.items()]
    produce_rows = [f"| {size} | {name} | {med_ms(bs):.2f} | {med_ms(bs, 0.99):.2f} | {med(bs, 'mb_per_s'):.0f} "
                    f"| {med(bs, 'cpu_ms_per_mb'):.2f} "
                    f"| {statistics.median(b.server_cpu_s / b.count for b in bs) * 1e6:.0f} | "
                    + ", ".join(f"{b.mb_per_s:.0f}" for b in bs) + " |"
                    for size in batch_bytes for (of, name), bs in bursts.items() if of == size]
    cases = [(f"raw fetch {args.fetch_bytes >> 10} KiB", med(walks["logkeeper"], "mb_per_s"),
              med(walks["kafka"], "mb_per_s")),
             *((f"raw produce {size} batches, {PRODUCE_IN_FLIGHT} in flight",
                med(bursts[(size, "logkeeper")], "mb_per_s"), med(bursts[(size, "kafka")], "mb_per_s"))
               for size in batch_bytes)]
    lines = [side_by_side_line(*case) for case in cases]
    bars = [(name.removeprefix("raw "), ours / theirs if theirs else 0.0) for name, ours, theirs in cases]
    text = "\n".join([
        "# The server's side: raw Fetch and Produce requests against the sidecar and against Apache Kafka",
        "",
        "![ratios](kafka_raw.svg)",
        "",
        f"- command: `{command}` (`make bench-kafka`)",
        date_and_commit(),
        f"- machine: {machine_line()}",
        f"- broker: Apache Kafka {version}, one KRaft node on 127.0.0.1 (make interop's); the sidecars as "
        "bench_kafka_perf's; the \"glibc's allocator defaults\" sidecar is started with "
        f"`GLIBC_TUNABLES={GLIBC_DEFAULTS}` (glibc's own default), which server/heap.py leaves alone",
        f"- fetch: one partition holding {args.mb} MB of 100-byte records written by ProducerPerformance (acks=1, "
        f"linger.ms 5, default 16 KiB batches); one socket, Fetch v{FETCH_VERSION}, partition_max_bytes "
        f"{args.fetch_bytes:,}, from offset 0 to the end, one request at a time; a fetch's time from sending it "
        "to having its whole response",
        f"- produce: {args.produce_requests} Produce v{PRODUCE_VERSION} requests a round of one "
        f"{batch_bytes['1 MiB']:,}-byte batch, then {args.small_produce_requests} of one "
        f"{batch_bytes['16 KiB']:,}-byte "
        f"batch (1,000-byte random values, uncompressed) for one partition, acks=1, {PRODUCE_IN_FLIGHT} in flight on "
        "one socket; a request's time from sending it to having its answer",
        f"- the server's CPU from /proc over each walk or burst; a warm-up of each, then {args.rounds} rounds, the "
        f"servers in turn (alternating which goes first); medians; whole run {seconds:.0f} s",
        "",
        "| fetch: server | fetches a walk | median fetch ms | MB/s while fetching | server CPU ms per MB "
        "| every round's MB/s |",
        "|---|---:|---:|---:|---:|---|",
        *fetch_rows,
        "",
        "| produce: batch | server | median request ms | p99 ms | MB/s | server CPU ms per MB "
        "| server CPU us a request | every round's MB/s |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        *produce_rows,
        "",
        "```",
        *lines,
        "```",
        "",
    ])
    return text, lines, bars


if __name__ == "__main__":
    raise SystemExit(main())
