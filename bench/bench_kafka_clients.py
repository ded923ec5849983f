"""The same Kafka client against the sidecar's Kafka listener and against a real Kafka broker,
side by side in one run: produce and consume throughput.

Both servers run on this machine, on loopback, one at a time under load (the other idle):

- the sidecar as a subprocess (server/process.py) with ``kafka.listen`` on 127.0.0.1;
- Apache Kafka (the release ``make interop`` fetches: interop/fetch_kafka.sh) as a single KRaft
  node started by tests/kafka/kafka_harness.py, as make interop starts it.

The client is confluent-kafka (librdkafka), with the same settings for both: a topic of
``--partitions`` partitions created through the AdminClient; a producer of ``--records`` records
(16-byte keys, ``--value-bytes`` values, no compression, linger.ms 5, librdkafka's default
batch size) timed from the first produce() to the end of flush(), once with
acks=1 and once with acks=all (idempotent); then a consumer assigned to every partition from the
beginning, timed until it has read every record. Each measurement is repeated ``--rounds``
times, alternating the servers; the table shows the median, the ratio is sidecar / Kafka.
Client and server share the machine's cores.

Results: bench/results/kafka_clients.md (command, date, machine, figures).

Run: ``.venv/bin/python bench/bench_kafka_clients.py [--records 1000000] [--rounds 3]``
(``make bench-kafka`` runs Kafka's own perf tools instead: bench_kafka_perf.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from side_by_side import command_and_date, machine, parse_bench_args, side_by_side_line, svg_bars  # noqa: E402

from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import Broker, fetch_kafka  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka_clients.md"
PLOT = RESULTS.with_suffix(".svg")
TOPIC = "bench"


def create_topic(bootstrap: str, partitions: int, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} not visible on {bootstrap}")


def produce(bootstrap: str, topic: str, records: int, value_bytes: int, acks: str) -> float:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                            "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}
    if acks == "all":
        conf["enable.idempotence"] = True
    p = ck.Producer(conf)
    value = b"v" * value_bytes
    keys = [b"key-%012d" % i for i in range(1000)]
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, key=keys[i % 1000], value=value, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"produce to {bootstrap}: {left} undelivered, errors {errors[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < records and time.perf_counter() < deadline:
        for msg in c.consume(10_000, 0.5):
            if not msg.error():
                got += 1
    elapsed = time.perf_counter() - started
    c.close()
    if got < records:
        raise RuntimeError(f"consumed {got} of {records} records from {bootstrap}")
    return elapsed


def machine_with_client() -> str:
    return machine(f"confluent-kafka {importlib.metadata.version('confluent-kafka')} (librdkafka {ck.libversion()[0]})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args, command = parse_bench_args(ap, "bench_kafka_clients.py", argv)
    dist = fetch_kafka()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    results: dict[tuple[str, str], list[float]] = {}
    try:
        broker = Broker(dist, work / "kafka", {"num.partitions": args.partitions})
        broker.format()
        broker.start()
        sidecar = SidecarProcess(work / "sidecar", {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}}).start()
        try:
            targets = {"logkeeper sidecar": sidecar.kafka_bootstrap, f"Apache Kafka {dist.version}": broker.bootstrap}
            for r in range(args.rounds):
                order = list(targets.items()) if r % 2 == 0 else list(reversed(targets.items()))
                for name, bootstrap in order:
                    for acks in ("1", "all"):
                        topic = f"{TOPIC}-{r}-{acks}"
                        create_topic(bootstrap, args.partitions, topic)
                        secs = produce(bootstrap, topic, args.records, args.value_bytes, acks)
                        results.setdefault((name, f"produce acks={acks}"), []).append(secs)
                        print(f"round {r}: {name}: produce acks={acks}: {args.records / secs:,.0f} records/s",
                              flush=True)
                        if acks == "1":
                            secs = consume(bootstrap, topic, args.partitions, args.records)
                            results.setdefault((name, "consume"), []).append(secs)
                            print(f"round {r}: {name}: consume: {args.records / secs:,.0f} records/s", flush=True)
        finally:
            sidecar.stop()
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text, bars = report(args, command, list(targets), results)
    RESULTS.write_text(text)
    PLOT.write_text(svg_bars(f"logkeeper / Kafka {dist.version}, one Python client loop (MB/s ratio)", bars))
    print(text)
    return 0


def report(args: argparse.Namespace, command: str, names: list[str],
           results: dict[tuple[str, str], list[float]]) -> tuple[str, list[tuple[str, float]]]:
    """The results file's text and the plot's bars (each operation's ratio)."""
    record_bytes = 16 + args.value_bytes
    ops = ["produce acks=1", "produce acks=all", "consume"]
    lines = [
        "# bench_kafka_clients: the same Kafka client against the sidecar and against Apache Kafka",
        "",
        "![ratios](kafka_clients.svg)",
        "",
        *command_and_date(command),
        f"- machine: {machine_with_client()}",
        f"- load: {args.records:,} records of {record_bytes} bytes (16-byte key, {args.value_bytes}-byte value), "
        f"{args.partitions} partitions, no compression, linger.ms 5; median of {args.rounds} rounds, servers "
        "alternating; client and server on the same cores, loopback",
        "",
        "| | " + " | ".join(f"{n} records/s (MB/s)" for n in names) + " | sidecar / Kafka |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    sides, bars = [], []
    for op in ops:
        cells, rates = [], []
        for n in names:
            secs = statistics.median(results[(n, op)])
            rate = args.records / secs
            rates.append(rate)
            cells.append(f"{rate:,.0f} ({rate * record_bytes / 1e6:.1f})")
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {rates[0] / rates[1]:.2f} |")
        mb_s = [rate * record_bytes / 1e6 for rate in rates]
        sides.append(side_by_side_line(f"python client {op}", mb_s[0], mb_s[1]))
        bars.append((op, rates[0] / rates[1]))
    lines += ["", "The client competes with the server for the 2 cores, and each measurement lasts seconds: "
              "rounds of the same server differ by up to 2x (the JVM's warm-up among it), so read the ratios as "
              "orders of magnitude. Both servers come close to what the Python client loop itself reaches here "
              "(one produce() or poll() call a record), so these figures bound the sidecar from below rather than "
              "measure its ceiling. Kafka fsyncs nothing per request either (flush by the OS), as the sidecar.",
              "", "Every round (seconds):", ""]
    for (n, op), secs in sorted(results.items()):
        lines.append(f"- {n}, {op}: " + ", ".join(f"{s:.2f}" for s in secs))
    lines += ["", "```", *sides, "```"]
    return "\n".join(lines) + "\n", bars


if __name__ == "__main__":
    raise SystemExit(main())
