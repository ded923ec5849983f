"""The server's side of a fetch, without a Java consumer in the way: raw Fetch requests against
the sidecar and against Apache Kafka, side by side.

ConsumerPerformance (bench_kafka_perf.py) is limited by the client on this machine: its
figures say little about what a fetch costs the server. Here one plain socket asks each server
for the same topic (written by ProducerPerformance, ``--mb`` MB of 100-byte records in its default
16 KiB batches), one Fetch v11 at a time of at most ``--fetch-bytes`` for one partition, walking
from offset 0 to the end; the time of each is from sending the request to having the whole
response, and the server's CPU (user + system, /proc) is counted over the walk. The client's own
work is the same for both servers (it reads each response into one reused buffer and looks only
at the last batch's header).

Rows: the sidecar; the sidecar with glibc's allocator defaults (a ``GLIBC_TUNABLES`` that sets
nothing, which server/heap.py leaves to the user: the A of its change); Kafka. ``--rounds`` walks
each, the servers in turn, alternating which goes first; medians reported. Prints the
``side-by-side`` line and writes bench/results/kafka_fetch.md.

Run: ``.venv/bin/python bench/bench_kafka_fetch.py [--mb 100] [--rounds 5]`` (``make bench-kafka``).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_kafka_perf import ProducerCase, cpu_seconds, create_topic, produce  # noqa: E402
from bench.side_by_side import date_and_commit, machine_line, parse_bench_args, side_by_side_line  # noqa: E402
from logkeeper.protocol.messages import FETCH, FETCH_REQUEST  # noqa: E402
from logkeeper.protocol.primitives import Writer  # noqa: E402
from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import Broker, fetch_kafka  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka_fetch.md"
FETCH_VERSION = 11  # both serve it; the last version that names topics (13+ use topic ids)
WALK_LIMIT_S = 60.0  # a walk that has not reached the end by then is cut (and reported short)
GLIBC_DEFAULTS = "glibc.malloc.tcache_count=7"  # glibc's own default: the allocator as shipped
SIDECAR_CONF = {"sidecar": {"kafka.listen": ["127.0.0.1:0"], "group.initial.rebalance.delay.ms": 0}}


@dataclass(frozen=True)
class Walk:
    fetches: int
    bytes: int
    latencies_s: list[float]
    server_cpu_s: float

    @property
    def mb_per_s(self) -> float:
        """MB of responses a second of fetching (the client's bookkeeping between fetches left out)."""
        return self.bytes / 1e6 / sum(self.latencies_s)

    @property
    def cpu_ms_per_mb(self) -> float:
        return self.server_cpu_s * 1000 / (self.bytes / 1e6)


def _request(correlation_id: int, topic: str, offset: int, fetch_bytes: int) -> bytes:
    w = Writer()
    w.buf += struct.pack(">hhih", FETCH, FETCH_VERSION, correlation_id, len(b"bench")) + b"bench"
    FETCH_REQUEST.encode(w, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": fetch_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "log_start_offset": -1, "partition_max_bytes": fetch_bytes}]}]},
        FETCH_VERSION)
    return struct.pack(">i", len(w.buf)) + bytes(w.buf)


def _next_offset(frame: memoryview) -> int | None:
    """The offset after the last whole batch of a v11 response for one partition; None when it has none."""
    p = 4 + 4 + 2 + 4  # correlation id, throttle, error, session
    p += 4
    p += 2 + struct.unpack_from(">h", frame, p)[0]  # topics count, topic name
    p += 4 + 4 + 2 + 8 + 8 + 8  # partitions count, index, error, high watermark, last stable, log start
    aborted = struct.unpack_from(">i", frame, p)[0]
    p += 4 + max(0, aborted) * 16 + 4  # aborted transactions, preferred read replica
    end = p + 4 + struct.unpack_from(">i", frame, p)[0]
    q, last = p + 4, None
    while q + 12 <= end:
        base, length = struct.unpack_from(">qi", frame, q)
        if q + 12 + length > end:
            break  # a partial batch: Kafka's slice may end inside one
        last = base + struct.unpack_from(">i", frame, q + 23)[0]
        q += 12 + length
    return None if last is None else last + 1


def walk(bootstrap: str, pid: int, topic: str, end_offset: int, fetch_bytes: int) -> Walk:
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
    return Walk(len(latencies), total, latencies, cpu_seconds(pid) - cpu_before)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="payload MB of 100-byte records written to each server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="a fetch's partition_max_bytes (the "
                    "consumer's default max.partition.fetch.bytes)")
    args, command = parse_bench_args(ap, "bench_kafka_fetch.py", argv)
    dist = fetch_kafka()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-fetch-"))
    case = ProducerCase("1", 100, None)
    records = args.mb * 1_000_000 // case.record_bytes
    walks: dict[str, list[Walk]] = {}
    started = time.monotonic()
    try:
        broker = Broker(dist, work / "kafka", {"num.partitions": 1})
        broker.format()
        broker.start()
        sidecar = SidecarProcess(work / "sidecar", SIDECAR_CONF).start()
        plain = SidecarProcess(work / "sidecar-glibc-defaults", SIDECAR_CONF,
                               env={"GLIBC_TUNABLES": GLIBC_DEFAULTS}).start()
        try:
            servers = {"logkeeper": sidecar, "logkeeper, glibc's allocator defaults": plain, "kafka": broker}
            bootstrap = {"logkeeper": sidecar.kafka_bootstrap, "kafka": broker.bootstrap,
                         "logkeeper, glibc's allocator defaults": plain.kafka_bootstrap}
            for name in servers:
                create_topic(dist, bootstrap[name], case.topic)
                produce(dist, bootstrap[name], case, records)
            order = list(servers)
            for r in range(-1, args.rounds):  # round -1 warms every server's read path up, not counted
                for name in order if r % 2 == 0 else order[::-1]:
                    proc = servers[name].proc
                    assert proc is not None
                    w = walk(bootstrap[name], proc.pid, case.topic, records, args.fetch_bytes)
                    if r >= 0:
                        walks.setdefault(name, []).append(w)
                    print(f"{'warm-up' if r < 0 else f'round {r}'}: {name}: {w.fetches} fetches, "
                          f"median {statistics.median(w.latencies_s) * 1000:.2f} ms, {w.mb_per_s:.0f} MB/s, "
                          f"server CPU {w.cpu_ms_per_mb:.2f} ms/MB", flush=True)
        finally:
            sidecar.stop()
            plain.stop()
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text, line = report(command, args, dist.version, walks, time.monotonic() - started)
    RESULTS.write_text(text)
    print(line)
    print(f"(written to {RESULTS.relative_to(REPO)})")
    return 0


def report(command: str, args: argparse.Namespace, version: str, walks: dict[str, list[Walk]],
           seconds: float) -> tuple[str, str]:
    def med(name: str, f: str) -> float:
        return statistics.median(getattr(w, f) for w in walks[name])

    def med_latency(name: str) -> float:
        return statistics.median(statistics.median(w.latencies_s) for w in walks[name]) * 1000

    rows = [f"| {name} | {walks[name][0].fetches} | {med_latency(name):.2f} | {med(name, 'mb_per_s'):.0f} "
            f"| {med(name, 'cpu_ms_per_mb'):.2f} | " + ", ".join(f"{w.mb_per_s:.0f}" for w in walks[name]) + " |"
            for name in walks]
    line = side_by_side_line(f"raw fetch {args.fetch_bytes >> 10} KiB", med("logkeeper", "mb_per_s"),
                             med("kafka", "mb_per_s"))
    text = "\n".join([
        "# A fetch's server side: raw Fetch requests against the sidecar and against Apache Kafka",
        "",
        f"- command: `{command}` (`make bench-kafka`)",
        date_and_commit(),
        f"- machine: {machine_line()}",
        f"- broker: Apache Kafka {version}, one KRaft node on 127.0.0.1 (make interop's); the sidecars as "
        f"bench_kafka_perf's; one partition each, {args.mb} MB of 100-byte records written by ProducerPerformance "
        "(acks=1, linger.ms 5, default 16 KiB batches)",
        f"- client: one socket, Fetch v{FETCH_VERSION}, partition_max_bytes {args.fetch_bytes:,}, from offset 0 to "
        "the end, one request at a time; a fetch's time from sending it to having its whole response; the "
        f"server's CPU from /proc over the walk; a warm-up walk of each, then {args.rounds} rounds, the servers in "
        f"turn (alternating which goes first); medians; whole run {seconds:.0f} s",
        "",
        "| server | fetches a walk | median fetch ms | MB/s while fetching | server CPU ms per MB "
        "| every round's MB/s |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
        "",
        "```",
        line,
        "```",
        "",
    ])
    return text, line


if __name__ == "__main__":
    raise SystemExit(main())
