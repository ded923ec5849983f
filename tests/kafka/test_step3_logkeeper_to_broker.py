"""Step 3: a real broker loads a partition logkeeper wrote and compacted, and serves it.

logkeeper writes partition ``ledger-0`` through its Log API as a leader would (leader epoch 0): a
keyed workload in five codecs with tombstones and headers, transactions committed and aborted
with their markers; ``logkeeper clean`` compacts it (offset gaps, stamped tombstones, header-only
batches); more data and an aborted transaction follow in the active segment, then a transaction
left open and more data after it. logkeeper closes the log cleanly, which writes its producer
snapshot at the log end offset.

The broker creates topic ``ledger`` (its cleaner off, so nothing rewrites the files while the
consumer reads) and stops; the partition's segment files and producer snapshots are replaced by
logkeeper's, its snapshot included (``partition.metadata`` and ``leader-epoch-checkpoint`` stay Kafka's); in the data
log directory ``recovery-point-offset-checkpoint`` gets the partition's log end offset and
``log-start-offset-checkpoint`` its log start offset (the other entries, and
``replication-offset-checkpoint``, stay as the broker wrote them). The broker starts again.

Its server.log of that start (log4j2, INFO) must then show:
- "Skipping recovery of N logs from <data dir> since clean shutdown file was found", and
  "Completed load of Log(dir=<partition dir>, ...logEndOffset=<LEO>) with <K> segments" for
  logkeeper's log end offset and segment count;
- no line mentioning the partition that matches (case-insensitive) ``recover``, ``corrupt``,
  ``truncat``, ``rebuild``, ``invalid`` or ``delet`` once two benign fragments are cut from it:
  Kafka's every-start "Producer state recovery took Nms for snapshot load and Nms for segment
  recovery" and "Reloading from producer snapshot and rebuilding producer state from offset N"
  (a log with a snapshot), and the controller's "leaderRecoveryState=RECOVERED";
- no line anywhere naming ``CorruptRecordException``, ``CorruptIndexException``,
  ``InvalidRecordException`` or ``KafkaStorageException``, and no ERROR line.

Kafka's consumer then reads exactly logkeeper's data records (read_uncommitted), and exactly
those below the open transaction less the aborted transactions' records (read_committed, which
needs logkeeper's .txnindex files, and its producer snapshot for the open transaction: Kafka
takes a clean shutdown without a snapshot to mean no producer state, and would serve the open
transaction's records). After a clean stop, the broker has not rewritten any of logkeeper's .log
files.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time
from pathlib import Path

import pytest

from logkeeper.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from tests.kafka.conftest import BrokerFactory
from tests.kafka.kafka_harness import Broker, logkeeper, logkeeper_json
from tests.kafka.workloads import (
    KV,
    append_workload,
    committed_view,
    diff_kv,
    keyed_workload,
    replace_segments,
    set_checkpoint,
)

STEP = "step 3"
TOPIC = "ledger"
TP = TopicPartition(TOPIC, 0)
LEADER_EPOCH = 0  # the epoch a new single-replica topic's leader has
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 256 * 1024}
BAD = re.compile(r"recover|corrupt|truncat|rebuild|invalid|delet", re.I)
# benign fragments, cut from a line before BAD is searched: Kafka's every-start line for each log,
# and the partition's leader recovery state in the controller's metadata records
BENIGN = re.compile(r"Producer state recovery took \d+ms for snapshot load and \d+ms for segment recovery"
                    r"|Reloading from producer snapshot and rebuilding producer state from offset \d+"
                    r"|leaderRecoveryState=RECOVERED")
NEVER = re.compile(r"CorruptRecordException|CorruptIndexException|InvalidRecordException|KafkaStorageException")


def _transaction(log: Log, pid: int, epoch: int, seq: int, n: int, kind: ControlType | None, codec: Codec) -> int:
    """Two batches of a transaction, then its marker (none when ``kind`` is None: left open)."""
    now = int(time.time() * 1000)
    for part in range(2):
        recs = [Record(i, now, b"key-%06d" % (pid + i + part), b"txn-%d-%d-%d" % (pid, seq, i)) for i in range(n)]
        log.append(build_batch(recs, codec=codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                               is_transactional=True), leader_epoch=LEADER_EPOCH)
        seq += n
    if kind is None:
        return seq
    log.append(build_marker_batch(kind, offset=log.log_end_offset, timestamp=now, producer_id=pid,
                                  producer_epoch=epoch, partition_leader_epoch=LEADER_EPOCH), assign_offsets=False)
    return seq


def write_partition(log_dir: Path) -> tuple[int, int, int]:
    """logkeeper writes, compacts and extends ``ledger-0``; returns (log start offset, log end offset,
    first offset of the open transaction)."""
    items = keyed_workload(24_000, keys=3_000, seed=33, value_bytes=50, run=1_500)
    log = Log(log_dir / f"{TOPIC}-0", LogConfig.from_props(CONFIG))
    append_workload(log, items[:8_000], batch_records=100, leader_epoch=LEADER_EPOCH)
    seq = _transaction(log, 9001, 0, 0, 20, ControlType.COMMIT, Codec.GZIP)
    append_workload(log, items[8_000:16_000], batch_records=100, leader_epoch=LEADER_EPOCH)
    seq = _transaction(log, 9001, 0, seq, 15, ControlType.ABORT, Codec.ZSTD)
    append_workload(log, items[16_000:], batch_records=100, leader_epoch=LEADER_EPOCH)
    log.close()
    logkeeper("clean", log_dir, "--config", "min.cleanable.dirty.ratio=0.01")
    log = Log(log_dir / f"{TOPIC}-0", LogConfig.from_props(CONFIG),
              log_start_offset=OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read().get(TP, 0))
    append_workload(log, keyed_workload(500, keys=3_000, seed=34, run=100), batch_records=50,
                    leader_epoch=LEADER_EPOCH)
    _transaction(log, 9002, 1, 0, 10, ControlType.ABORT, Codec.LZ4)
    append_workload(log, keyed_workload(300, keys=3_000, seed=35, run=100), batch_records=50,
                    leader_epoch=LEADER_EPOCH)
    first_open = log.log_end_offset
    _transaction(log, 9003, 0, 0, 10, None, Codec.NONE)
    append_workload(log, keyed_workload(200, keys=3_000, seed=36, run=100), batch_records=50,
                    leader_epoch=LEADER_EPOCH)
    assert log.last_stable_offset == first_open
    start, end = log.log_start_offset, log.log_end_offset
    log.flush()
    log.close(clean_shutdown=True)
    return start, end, first_open


def _load_problems(broker: Broker, partition: str, strays: list[int]) -> list[str]:
    """Lines of the broker's log about recovery or damage; ``strays``: the snapshots its load may
    delete as Kafka's own loads do (at no segment's base offset, below the latest)."""
    lines = broker.log_text().splitlines()
    stray = re.compile("|".join(rf"Deleted producer state snapshot \S*/{o:020d}\.snapshot" for o in strays) or "$^")
    bad = [line for line in lines if partition in line and BAD.search(stray.sub("", BENIGN.sub("", line)))]
    bad += [line for line in lines if NEVER.search(line) or re.match(r"\[[^\]]*\] ERROR ", line)]
    return bad


def _digests(partition_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(partition_dir.glob("*.log"))}


def test_broker_serves_a_partition_logkeeper_wrote(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    lk_dir = tmp_path / "logkeeper"
    start_offset, end_offset, first_open = write_partition(lk_dir)
    lk_partition = lk_dir / f"{TOPIC}-0"
    # the clean close's snapshot at the log end (the one Kafka reads), below it the rolls' and
    # the first clean close's, which Kafka's load deletes as a stray
    snapshots = sorted(int(p.name[:20]) for p in lk_partition.glob("*.snapshot"))
    assert snapshots[-1] == end_offset and len(snapshots) > 1
    strays = [o for o in snapshots[:-1] if o not in {int(p.name[:20]) for p in lk_partition.glob("*.log")}]
    records = logkeeper_json(sorted(lk_partition.glob("*.log")))
    everything, _, _ = committed_view(records, open_ok=True)
    _, committed, _ = committed_view([r for r in records if int(str(r["offset"])) < first_open])
    assert len(committed) < len([kv for kv in everything if kv.offset < first_open])
    assert len(committed) < len(everything), f"{STEP}: the workload has no aborted records left to skip"
    offsets = [kv.offset for kv in everything]
    assert any(b - a > 1 for a, b in itertools.pairwise(offsets)), f"{STEP}: the compacted log has no offset gaps"

    broker = broker_factory("step3", {"log.cleaner.enable": "false"})
    broker.start()
    broker.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
    broker.stop()
    partition = broker.data_dir / f"{TOPIC}-0"
    kept = sorted(p.name for p in partition.iterdir() if p.name in ("partition.metadata", "leader-epoch-checkpoint"))
    assert kept == ["leader-epoch-checkpoint", "partition.metadata"], f"{STEP}: the broker's partition has {kept}"
    copied = replace_segments(lk_partition, partition)
    set_checkpoint(broker.data_dir, RECOVERY_POINT_CHECKPOINT, TP, end_offset)
    set_checkpoint(broker.data_dir, LOG_START_OFFSET_CHECKPOINT, TP, start_offset)
    before = _digests(partition)
    segments = len(before)

    broker.start()
    text = broker.log_text()
    problems = _load_problems(broker, f"{TOPIC}-0", strays)
    if problems:
        pytest.fail(f"{STEP}: the broker's log shows recovery or corruption when loading logkeeper's files "
                    f"({copied}):\n" + "\n".join(problems), pytrace=False)
    if not re.search(rf"Skipping recovery of \d+ logs from {re.escape(str(broker.data_dir))} since clean "
                     "shutdown file was found", text):
        pytest.fail(f"{STEP}: no 'Skipping recovery ... clean shutdown file was found' line\n{broker.describe()}",
                    pytrace=False)
    loaded = re.search(rf"Completed load of Log\(dir={re.escape(str(partition))},.*?logEndOffset=(\d+)\) with "
                       r"(\d+) segments", text)
    if loaded is None or (int(loaded[1]), int(loaded[2])) != (end_offset, segments):
        pytest.fail(f"{STEP}: expected the broker to load log end offset {end_offset} in {segments} segments; "
                    f"its line: {loaded[0] if loaded else None}\n{broker.describe()}", pytrace=False)

    (lo, hi), uncommitted, run1 = broker.consume(TOPIC, 0, "read_uncommitted")
    (_, stable), read_committed, run2 = broker.consume(TOPIC, 0, "read_committed")
    broker.stop()
    if (lo, hi) != (start_offset, end_offset):
        pytest.fail(f"{STEP}: the broker serves offsets [{lo}, {hi}), logkeeper's log is "
                    f"[{start_offset}, {end_offset})\n{run1.describe()}", pytrace=False)
    if stable != first_open:
        pytest.fail(f"{STEP}: the broker's last stable offset is {stable}; logkeeper left a transaction open "
                    f"at {first_open} (its producer snapshot not loaded?)\n{run2.describe()}", pytrace=False)
    for name, got, want, run in (("read_uncommitted", uncommitted, everything, run1),
                                 ("read_committed", read_committed, committed, run2)):
        diff = diff_kv(want, [KV(r.offset, r.key, r.value) for r in got], "logkeeper's log", f"Kafka's {name} read")
        if diff or len(got) != len(want):
            pytest.fail(f"{STEP}: a Kafka consumer ({name}) reads other records than logkeeper wrote\n{diff}\n"
                        f"{run.describe(2000)}", pytrace=False)
    if _digests(partition) != before:
        pytest.fail(f"{STEP}: the broker rewrote logkeeper's segments: {before} -> {_digests(partition)}",
                    pytrace=False)
    print(f"{STEP}: {segments} segments, offsets [{start_offset}, {end_offset}), {len(everything)} data records, "
          f"{len(everything) - len(committed)} aborted; loaded with no recovery")
