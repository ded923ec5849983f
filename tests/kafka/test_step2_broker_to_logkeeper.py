"""Step 2: logkeeper reads what a real broker wrote.

A single-node KRaft broker (formatted with Kafka's StorageTool, on loopback) takes a keyed
workload from Kafka's Java producers into a compacted topic: five codecs (one idempotent producer
each), tombstones, headers, enough data for several 1 MiB segments; in the middle, a
transactional producer writes transactions, some committed and some aborted (so the broker's
transaction coordinator writes the markers, and the broker its .txnindex). The broker's cleaner
is off so that what the consumer reads is what stays on disk. Kafka's consumer reads the
partition back (read_uncommitted and read_committed); the broker stops cleanly. Then:

- ``logkeeper verify`` on the broker's data log directory passes (the topic's partition and the
  broker's own ``__transaction_state`` partition, Kafka's checkpoint files beside them);
- ``logkeeper dump-log --json`` of the partition's segments equals what the consumer read:
  offsets, keys, values, headers and timestamps, record for record (control records aside);
- the markers logkeeper reads (COMMIT/ABORT) are the transactions' outcomes, and the records
  they leave committed are exactly what the read_committed consumer read;
- every producer snapshot the broker wrote (``.snapshot``) reads with logkeeper's codec, and a
  log loaded from the latest (a copy of the partition) has the producer state a scan of every
  segment gives, field for field: the coordinator epochs too, which a scan reads from the
  broker's markers and Kafka's snapshot holds as its transaction coordinator wrote them.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from logkeeper.log import producer_snapshot
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from tests.kafka.conftest import BrokerFactory
from tests.kafka.kafka_harness import logkeeper, logkeeper_json
from tests.kafka.workloads import KV, committed_view, diff_kv, keyed_workload

STEP = "step 2"
TOPIC = "accounts"
TRANSACTIONS = [(i % 3 != 1, [(b"txn-key-%03d" % (i * 7 + j), b"txn-%d-%d" % (i, j)) for j in range(40)])
                for i in range(6)]


def _unb64(s: object) -> bytes | None:
    return None if s is None else base64.b64decode(str(s))


def _fail(what: str, *outputs: str) -> None:
    pytest.fail(f"{STEP}: {what}\n" + "\n".join(outputs), pytrace=False)


def _producer_entries(partition: Path, copy: Path, *, keep_snapshots: bool) -> list[producer_snapshot.SnapshotEntry]:
    """Producer state of a copy of ``partition`` loaded by logkeeper (from Kafka's latest snapshot,
    or from a scan of every segment), as snapshot entries."""
    shutil.copytree(partition, copy)
    if not keep_snapshots:
        for p in copy.glob("*.snapshot"):
            p.unlink()
    lg = Log(copy, LogConfig.from_props({"cleanup.policy": "compact"}))
    try:
        return producer_snapshot.entries_of(lg.producer_state)
    finally:
        lg.close()


def _check_snapshots(partition: Path, work: Path) -> int:
    found = producer_snapshot.snapshots(partition)
    if not found:
        _fail(f"the broker wrote no producer snapshot in {partition}")
    for path in found.values():
        producer_snapshot.decode(path.read_bytes(), path)  # raises on a byte logkeeper reads otherwise
    scanned = _producer_entries(partition, work / "scanned" / partition.name, keep_snapshots=False)
    loaded = _producer_entries(partition, work / "loaded" / partition.name, keep_snapshots=True)
    if loaded != scanned or not scanned:
        _fail(f"the producer state from Kafka's snapshot {found[max(found)].name} differs from a scan's:\n"
              f"snapshot {loaded}\nscan     {scanned}")
    if not any(e.coordinator_epoch >= 0 for e in loaded):  # else the comparison above proves nothing of it
        _fail(f"no producer of Kafka's snapshot {found[max(found)].name} has a coordinator epoch: {loaded}")
    return len(found)


def test_logkeeper_loads_a_brokers_log(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = broker_factory("step2", {"log.cleaner.enable": "false", "transaction.state.log.num.partitions": 1})
    broker.start()
    broker.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": 1024 * 1024})
    items = keyed_workload(40_000, keys=5_000, seed=22, value_bytes=80, run=2_000)
    half = len(items) // 2
    first = broker.produce(TOPIC, 0, [(it.codec, it.key, it.value, it.headers) for it in items[:half]])
    txn_offsets = broker.produce_transactions(TOPIC, 0, "lz4", TRANSACTIONS)
    second = broker.produce(TOPIC, 0, [(it.codec, it.key, it.value, it.headers) for it in items[half:]])
    assert first == list(range(half)), f"{STEP}: the broker assigned offsets {first[:5]}..."
    assert second == list(range(second[0], second[0] + len(items) - half)), f"{STEP}: offsets {second[:5]}..."
    (start, end), consumed, consumer_run = broker.consume(TOPIC, 0)
    (_, _), consumed_committed, committed_run = broker.consume(TOPIC, 0, "read_committed")
    broker.stop()
    produced = len(items) + len(txn_offsets)
    if start != 0 or len(consumed) != produced:
        _fail(f"the consumer read {len(consumed)} records in [{start}, {end}), {produced} were produced",
              consumer_run.describe())

    verify = logkeeper("verify", broker.data_dir, check=False)
    if verify.returncode != 0:
        _fail("logkeeper verify fails on the broker's log directory", verify.describe())
    partition = broker.data_dir / f"{TOPIC}-0"
    segments = sorted(partition.glob("*.log"))
    assert len(segments) >= 3, f"{STEP}: expected several segments, the broker wrote {segments}"
    lk = logkeeper_json(segments)
    data, committed, markers = committed_view(lk)
    diff = diff_kv([KV(r.offset, r.key, r.value) for r in consumed], data,
                   "the Kafka consumer's read (read_uncommitted)", "logkeeper dump-log --json")
    if diff:
        _fail(f"logkeeper reads the broker's segments differently\n{diff}")
    lk_data = [r for r in lk if not r["isControl"]]
    for r, c in zip(lk_data, consumed):
        headers = [(h["key"], _unb64(h["value"])) for h in r["headers"]]  # type: ignore[attr-defined]
        if headers != c.headers or r["timestamp"] != c.timestamp:
            _fail(f"offset {c.offset}: consumer headers {c.headers} timestamp {c.timestamp}, "
                  f"logkeeper {headers} {r['timestamp']}")
    outcomes = {"COMMIT": sum(c for c, _ in TRANSACTIONS), "ABORT": sum(not c for c, _ in TRANSACTIONS)}
    if markers != outcomes:
        _fail(f"logkeeper reads markers {markers}, the producer ended its transactions {outcomes}")
    diff = diff_kv([KV(r.offset, r.key, r.value) for r in consumed_committed], committed,
                   "the Kafka consumer's read (read_committed)", "logkeeper's records less the aborted")
    if diff:
        _fail(f"the committed view differs\n{diff}", committed_run.describe(2000))
    txn_index = sorted(partition.glob("*.txnindex"))
    assert txn_index, f"{STEP}: the broker wrote no .txnindex for its aborted transactions"
    codecs = {r["compression"] for r in lk}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}, f"{STEP}: codecs on disk {codecs}"
    assert sum(r["value"] is None for r in lk) > 100, f"{STEP}: too few tombstones to mean anything"
    n_snapshots = _check_snapshots(partition, tmp_path)
    print(f"{STEP}: {produced} records, {len(segments)} segments, markers {markers}, {n_snapshots} producer "
          f"snapshots; {verify.stdout.strip()}")
