"""Step 1: Kafka's DumpLogSegments reads the segments logkeeper wrote, and sees what logkeeper sees.

logkeeper writes, through its Log API, partitions that cover the format's corners: every codec,
LogAppendTime, null keys, headers (with a null value), tombstones; transactions committed and
aborted with their markers (so .txnindex files); batches with explicit offsets leaving gaps
between and inside batches, header-only (empty) batches, stamped delete horizons; and a log
compacted by ``logkeeper clean``. Then, on every file:

- ``DumpLogSegments --deep-iteration --print-data-log`` exits 0, reports no invalid bytes, and
  the only thing on its stderr is the "Non-consecutive offsets" report, which must list exactly
  the gaps logkeeper's records have; each record it prints equals ``logkeeper dump-log --json``
  (offset, timestamp, key, value, header keys, control marker type and coordinator epoch) and
  so do the batch fields both print (baseOffset, compresscodec, isTransactional, isControl,
  producerId); logkeeper's own text dump prints the same batch lines, character for character;
- ``--verify-index-only`` on the .index and .timeindex files prints no mismatch (one report is
  accepted, checked case by case, as Kafka's own files can show it: a time index entry naming a
  header-only batch that the cleaner kept; see ``_index_problems``);
- ``--index-sanity-check`` says each index passed (the check a broker runs at startup);
- the offset and time index entries Kafka lists equal logkeeper's ``dump-log`` of them;
- the .txnindex files list exactly the aborted transactions written.
"""

from __future__ import annotations

import base64
import itertools
import re
import struct
import time
from pathlib import Path

import pytest

from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.builder import ControlType, Record, build_batch, build_empty_batch, build_marker_batch
from logkeeper.records.compression import Codec
from tests.kafka.kafka_harness import (
    DumpedFile,
    KafkaDist,
    dump_log_segments,
    logkeeper,
    logkeeper_json,
    parse_dump,
)
from tests.kafka.workloads import append_workload, keyed_workload

STEP = "step 1"
NOW = int(time.time() * 1000) - 60_000  # a minute ago: CreateTime checks accept it


def _config(**props: object) -> LogConfig:
    base: dict[str, object] = {"segment.bytes": 48 * 1024, "index.interval.bytes": 700}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return LogConfig.from_props(base)


def write_codecs(root: Path) -> None:
    """Every codec, several segments, headers, null keys, tombstones, timestamps out of order."""
    log = Log(root / "codecs-0", _config())
    items = keyed_workload(3000, keys=400, seed=1, run=120, tombstone_share=0.05, header_share=0.2)
    append_workload(log, items, batch_records=37, now_ms=NOW)
    for codec in Codec:  # null keys and decreasing timestamps inside a batch
        recs = [Record(i, NOW - 10 * i, None if i % 3 == 0 else b"nk-%d" % i, b"nv-%d" % i) for i in range(9)]
        log.append(build_batch(recs, codec=codec))
    log.close()
    lat = Log(root / "appendtime-0", _config(**{"message.timestamp.type": "LogAppendTime"}))
    for codec in Codec:
        recs = [Record(i, NOW + i, b"lat-%d" % i, b"v-%d" % i) for i in range(25)]
        lat.append(build_batch(recs, codec=codec))
    lat.close()


def write_transactions(root: Path) -> list[tuple[int, int, int]]:
    """Two transactional producers, commits and aborts, an idempotent producer, plain data.
    Returns the aborted transactions as (producerId, firstOffset, lastOffset)."""
    log = Log(root / "txn-0", _config(**{"segment.bytes": 6000}))
    aborted: list[tuple[int, int, int]] = []
    seq = {1000: 0, 2000: 0, 3000: 0}

    def data(pid: int, epoch: int, n: int, codec: Codec, txn: bool = True) -> tuple[int, int]:
        recs = [Record(i, NOW + i, b"%d-k%d" % (pid, (seq[pid] + i) % 7), b"%d-v%d" % (pid, seq[pid] + i))
                for i in range(n)]
        info = log.append(build_batch(recs, codec=codec, producer_id=pid, producer_epoch=epoch,
                                      base_sequence=seq[pid], is_transactional=txn))
        seq[pid] += n
        return info.first_offset, info.last_offset

    def marker(kind: ControlType, pid: int, epoch: int) -> int:
        offset = log.log_end_offset
        log.append(build_marker_batch(kind, offset=offset, timestamp=NOW, producer_id=pid, producer_epoch=epoch,
                                      coordinator_epoch=7), assign_offsets=False)
        return offset

    plain = [Record(i, NOW, b"plain-%d" % i, b"p%d" % i) for i in range(10)]
    log.append(build_batch(plain))
    for round_ in range(4):
        f1, _ = data(1000, 0, 5, Codec.GZIP)
        f2, _ = data(2000, 3, 4, Codec.ZSTD)
        data(1000, 0, 3, Codec.NONE)
        data(3000, 1, 6, Codec.LZ4, txn=False)  # idempotent, not transactional
        data(2000, 3, 2, Codec.SNAPPY)
        last1 = marker(ControlType.COMMIT if round_ % 2 == 0 else ControlType.ABORT, 1000, 0)
        if round_ % 2:
            aborted.append((1000, f1, last1))
        log.append(build_batch([Record(0, NOW, b"plain-x", b"between markers")]))
        last2 = marker(ControlType.ABORT if round_ % 2 == 0 else ControlType.COMMIT, 2000, 3)
        if round_ % 2 == 0:
            aborted.append((2000, f2, last2))
    log.close()
    return aborted


def write_gapped(root: Path) -> None:
    """Batches at explicit offsets: gaps between batches and inside them, header-only batches,
    stamped delete horizons (tombstones kept until the horizon), a segment after a large gap."""
    log = Log(root / "gapped-0", LogConfig.from_props({"cleanup.policy": "compact", "index.interval.bytes": 200}))

    def put(batch: bytes) -> None:
        log.append(batch, assign_offsets=False)

    put(build_batch([Record(o, NOW + o, b"g-%d" % o, b"val-%d" % o) for o in (0, 1, 4, 9)], codec=Codec.GZIP))
    put(build_empty_batch(base_offset=10, last_offset=14, max_timestamp=NOW, producer_id=77, producer_epoch=2,
                          base_sequence=40))
    put(build_batch([Record(o, NOW + o, b"g-%d" % o, None if o % 2 else b"val-%d" % o) for o in (15, 18, 19, 30)],
                    delete_horizon_ms=NOW + 86_400_000, codec=Codec.ZSTD))
    put(build_batch([Record(o, NOW - o, b"h-%d" % o, b"x" * 300) for o in range(40, 80, 3)], codec=Codec.NONE))
    put(build_batch([Record(o, NOW, b"t-%d" % o, None) for o in (81, 82)], delete_horizon_ms=NOW + 5))
    log.roll(200)  # the next segment starts after a gap of more than a hundred offsets
    put(build_batch([Record(o, NOW + o, b"g-%d" % (o % 5), b"late-%d" % o) for o in range(200, 260, 2)],
                    codec=Codec.SNAPPY))
    put(build_batch([Record(o, NOW, b"g-%d" % o, b"lz-%d" % o) for o in (261, 270)], codec=Codec.LZ4,
                    producer_id=77, producer_epoch=2, base_sequence=45))
    log.close()


def write_cleaned(root: Path) -> Path:
    """A keyed log with tombstones and transactions, compacted by `logkeeper clean`."""
    log_dir = root / "cleaned"
    log = Log(log_dir / "compacted-0", LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 40_000,
                                                             "index.interval.bytes": 1024}))
    items = keyed_workload(4000, keys=300, seed=2, run=300, tombstone_share=0.08)
    append_workload(log, items[:2000], batch_records=50, now_ms=NOW)
    recs = [Record(i, NOW, b"key-%06d" % i, b"txn-%d" % i) for i in range(5)]
    info = log.append(build_batch(recs, producer_id=500, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append(build_marker_batch(ControlType.ABORT, offset=info.last_offset + 1, timestamp=NOW, producer_id=500,
                                  producer_epoch=0), assign_offsets=False)
    append_workload(log, items[2000:], batch_records=50, now_ms=NOW)
    log.close()
    logkeeper("clean", log_dir, "--config", "min.cleanable.dirty.ratio=0.01")
    return log_dir / "compacted-0"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], list[tuple[int, int, int]]]:
    root = tmp_path_factory.mktemp("logkeeper-written")
    write_codecs(root)
    aborted = write_transactions(root)
    write_gapped(root)
    cleaned = write_cleaned(root)
    partitions = {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and p.name != "cleaned"}
    partitions[cleaned.name] = cleaned
    return root, partitions, aborted


def _fail(what: str, *outputs: str) -> None:
    pytest.fail(f"{STEP}: {what}\n" + "\n".join(outputs), pytrace=False)


def _unb64(s: object) -> bytes | None:
    return None if s is None else base64.b64decode(str(s))


def _expected_gaps(records: list[dict[str, object]]) -> list[tuple[int, int]]:
    offsets = [int(str(r["offset"])) for r in records]
    return [(a, b) for a, b in itertools.pairwise(offsets) if b != a + 1]


def _reported_gaps(stderr: str) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    current: list[tuple[int, int]] | None = None
    for line in stderr.splitlines():
        m = re.match(r"Non-consecutive offsets in (\S+)", line)
        if m:
            current = out.setdefault(str(Path(m[1]).resolve()), [])
            continue
        m = re.match(r"\s+(-?\d+) is followed by (-?\d+)", line)
        if m and current is not None:
            current.append((int(m[1]), int(m[2])))
            continue
        if line.strip():
            _fail(f"unexpected line on DumpLogSegments' stderr: {line!r}", stderr)
    for pairs in out.values():
        pairs.sort()  # Kafka reports them latest first
    return out


def _compare_file(path: Path, dumped: DumpedFile, lk: list[dict[str, object]]) -> None:
    kafka_records = [(b, r) for b in dumped.batches for r in b.records]
    if len(kafka_records) != len(lk):
        _fail(f"{path.name}: DumpLogSegments printed {len(kafka_records)} records, logkeeper {len(lk)}",
              "\n".join(dumped.lines[:40]))
    for (batch, kr), lr in zip(kafka_records, lk):
        problems = []
        f = batch.fields
        expect = {
            "offset": (kr.offset, lr["offset"]),
            "timestamp": (kr.timestamp, lr["timestamp"]),
            "baseOffset": (int(f["baseOffset"]), lr["baseOffset"]),
            "compression": (f["compresscodec"], lr["compression"]),
            "isTransactional": (f["isTransactional"] == "true", lr["isTransactional"]),
            "isControl": (f["isControl"] == "true", lr["isControl"]),
            "producerId": (int(f["producerId"]), lr["producerId"]),
            "headerKeys": (kr.header_keys, [h["key"] for h in lr["headers"]]),  # type: ignore[attr-defined]
        }
        key, value = _unb64(lr["key"]), _unb64(lr["value"])
        expect["keySize"] = (kr.key_size, -1 if key is None else len(key))
        expect["valueSize"] = (kr.value_size, -1 if value is None else len(value))
        if lr["isControl"]:
            assert key is not None and value is not None
            kind = {0: "ABORT", 1: "COMMIT"}[struct.unpack(">hh", key)[1]]
            expect["marker"] = (kr.control, (kind, struct.unpack(">hi", value)[1]))
        else:
            expect["key"] = (kr.key, None if key is None else key.decode())
            expect["value"] = (kr.value, None if value is None else value.decode())
        for name, (k, v) in expect.items():
            if k != v:
                problems.append(f"{name}: Kafka {k!r}, logkeeper {v!r}")
        if problems:
            _fail(f"{path.name} offset {kr.offset}: " + "; ".join(problems), f"Kafka's batch line: {batch.line}")


def test_dump_log_segments_reads_logkeeper_segments(kafka: KafkaDist, written: tuple) -> None:
    _, partitions, _ = written
    logs = [f for p in partitions.values() for f in sorted(p.glob("*.log"))]
    result = dump_log_segments(kafka, logs, "--deep-iteration", "--print-data-log")
    if result.returncode != 0:
        _fail("DumpLogSegments --deep-iteration --print-data-log failed", result.describe())
    dumps = parse_dump(result.stdout)
    invalid = [line for d in dumps.values() for line in d.lines if line.startswith("Found ")]
    if invalid:
        _fail("DumpLogSegments found invalid bytes", *invalid, result.describe())
    gaps = _reported_gaps(result.stderr)
    for path in logs:
        dumped = dumps.get(str(path))
        if dumped is None:
            _fail(f"DumpLogSegments printed nothing for {path}", result.describe())
            return
        lk = logkeeper_json([path])
        _compare_file(path, dumped, lk)
        expected_gaps = _expected_gaps(lk)
        reported = gaps.get(str(path.resolve()), [])
        if reported != expected_gaps:
            _fail(f"{path}: Kafka reports non-consecutive offsets {reported}, "
                  f"logkeeper's records have gaps {expected_gaps}", result.stderr)
        text = logkeeper("dump-log", "--deep-iteration", path).stdout.splitlines()
        lk_batches = [line for line in text if line.startswith("baseOffset: ")]
        kafka_batches = [b.line for b in dumped.batches]
        if lk_batches != kafka_batches:
            diff = [f"Kafka:     {k}\nlogkeeper: {v}" for k, v in zip(kafka_batches, lk_batches) if k != v][:5]
            _fail(f"{path.name}: batch lines differ ({len(kafka_batches)} from Kafka, {len(lk_batches)} "
                  "from logkeeper dump-log)", *diff)
    # the corners are really there
    every = [b.fields for d in dumps.values() for b in d.batches]
    seen_codecs = {f["compresscodec"] for f in every}
    assert seen_codecs == {"none", "gzip", "snappy", "lz4", "zstd"}, f"{STEP}: codecs seen {seen_codecs}"
    assert any(f["deleteHorizonMs"].startswith("OptionalLong[") for f in every), f"{STEP}: no delete horizon seen"
    assert any(f["count"] == "0" for f in every), f"{STEP}: no empty batch seen"
    assert any(f["isControl"] == "true" for f in every), f"{STEP}: no control batch seen"
    assert any(f["compresscodec"] != "none" and f["isTransactional"] == "true" for f in every)
    cleaned = [line for d in dumps.values() if "compacted-0" in d.path for line in d.lines]
    assert cleaned, f"{STEP}: the cleaned log was not dumped"


def _index_problems(kafka: KafkaDist, stderr: str) -> list[str]:
    """The problems in --verify-index-only's stderr, less one that Kafka's own files can show.

    A cleaner keeps the last batch of a producer as a header-only batch that keeps its header's
    max timestamp (Kafka's MemoryRecords.filterTo). Kafka's LogSegment indexes header max
    timestamps — in the cleaner's append (from the filter result, empty batches included) and in
    recover — so its time index may name such a batch's last offset, as logkeeper's does.
    DumpLogSegments instead takes the max timestamp from the batch's records, finds none and
    reports "log timestamp: -1". Such a line is accepted only when the time index entry with that
    timestamp names the last offset of a header-only batch whose header carries exactly that max
    timestamp (checked on Kafka's own dump of the segment).
    """
    problems: list[str] = []
    current: Path | None = None
    for line in stderr.splitlines():
        m = re.match(r"Found timestamp mismatch in :(\S+)$", line)
        if m:
            current = Path(m[1])
            continue
        m = re.match(r"\s+Index timestamp: (-?\d+), log timestamp: -1$", line)
        if m and current is not None and _points_at_empty_batch(kafka, current, int(m[1])):
            continue
        if line.strip():
            problems.append(line.strip() if current is None else f"{current.name}: {line.strip()}")
    return problems


def _points_at_empty_batch(kafka: KafkaDist, time_index: Path, timestamp: int) -> bool:
    entries = logkeeper("dump-log", time_index).stdout
    offsets = [int(m[1]) for m in re.finditer(rf"^timestamp: {timestamp} offset: (\d+)$", entries, re.M)]
    segment = time_index.with_suffix(".log")
    batches = parse_dump(dump_log_segments(kafka, [segment]).stdout).get(str(segment))
    if not offsets or batches is None:
        return False
    return any(int(b.fields["lastOffset"]) == offsets[0] and b.fields["count"] == "0"
               and re.search(rf" (CreateTime|LogAppendTime): {timestamp} ", b.line) for b in batches.batches)


def test_indexes_pass_kafka_checks(kafka: KafkaDist, written: tuple) -> None:
    _, partitions, _ = written
    indexes = [f for p in partitions.values() for f in sorted(p.iterdir()) if f.suffix in (".index", ".timeindex")]
    verify = dump_log_segments(kafka, indexes, "--verify-index-only")
    unexpected = [line for line in verify.stdout.splitlines()
                  if line.strip() and not line.startswith("Dumping ") and not line.endswith(" is empty.")]
    if verify.returncode != 0 or unexpected or _index_problems(kafka, verify.stderr):
        _fail("DumpLogSegments --verify-index-only reports problems: "
              + "; ".join(_index_problems(kafka, verify.stderr)), verify.describe())
    sanity = dump_log_segments(kafka, indexes, "--index-sanity-check")
    passed = {Path(m[1]).name for m in re.finditer(r"^(\S+) passed sanity check\.$", sanity.stdout, re.M)}
    empty = {Path(m[1]).name for m in re.finditer(r"^(\S+) is empty\.$", sanity.stdout, re.M)}
    missing = [f.name for f in indexes if f.name not in passed and f.name not in empty]
    if sanity.returncode != 0 or missing or sanity.stderr.strip():
        _fail(f"DumpLogSegments --index-sanity-check: not passed: {missing}", sanity.describe())
    # the entries themselves, as Kafka and logkeeper list them
    listing = dump_log_segments(kafka, indexes)
    if listing.returncode != 0 or _index_problems(kafka, listing.stderr):
        _fail("DumpLogSegments on the index files failed", listing.describe())
    kafka_entries = {k: [line for line in d.lines if line.startswith(("offset: ", "timestamp: "))]
                     for k, d in parse_dump(listing.stdout).items()}
    total = 0
    for f in indexes:
        lk = [line for line in logkeeper("dump-log", f).stdout.splitlines()
              if line.startswith(("offset: ", "timestamp: "))]
        total += len(lk)
        if kafka_entries.get(str(f), []) != lk:
            _fail(f"{f}: index entries differ", f"Kafka: {kafka_entries.get(str(f))}", f"logkeeper: {lk}")
    assert total > 50, f"{STEP}: only {total} index entries in all; the test should exercise more"


def test_transaction_index_lists_the_aborted(kafka: KafkaDist, written: tuple) -> None:
    _, partitions, aborted = written
    txn_files = sorted(partitions["txn-0"].glob("*.txnindex"))
    if not txn_files:
        _fail("logkeeper wrote no .txnindex for a log with aborted transactions",
              str(sorted(p.name for p in partitions["txn-0"].iterdir())))
    result = dump_log_segments(kafka, txn_files)
    if result.returncode != 0 or result.stderr.strip():
        _fail("DumpLogSegments on .txnindex failed", result.describe())
    listed = [(int(m[1]), int(m[2]), int(m[3])) for m in
              re.finditer(r"version: 0 producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: \d+",
                          result.stdout)]
    if sorted(listed) != sorted(aborted):
        _fail(f"aborted transactions: Kafka lists {listed}, written {aborted}", result.describe())
