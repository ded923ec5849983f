"""Interop with kafka-python, a peer implementation of the v2 record batch format.

Both directions, for every codec:

* batches that kafka-python builds (``MemoryRecordsBuilder`` / ``DefaultRecordBatchBuilder``)
  are appended to a Log (offsets assigned, or carried by the batches), stored byte for byte,
  read back and dumped with the offsets, timestamps, keys, values and headers that went in;
* batches that logkeeper writes — data, header-only, control markers, delete-horizon and
  LogAppendTime batches — decode in kafka-python (``MemoryRecords``/``DefaultRecordBatch``)
  with valid CRCs and the same records;
* a partition directory holding only ``.log`` files is recovered, verified and dumped, and the
  rebuilt ``.index``, ``.timeindex`` (and ``.txnindex``) files equal, byte for byte, those the
  log wrote while appending.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from logkeeper.cli import main
from logkeeper.log import names
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import (
    ControlType,
    Record,
    build_batch,
    build_empty_batch,
    build_marker_batch,
)
from logkeeper.records.compression import Codec
from logkeeper.records.reader import iter_batches, read_records
from logkeeper.tools.dump import dump_file

NOW_MS = 1_700_000_000_000
CODECS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}
CODEC_IDS = list(CODECS)
HeaderList = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Rec:
    """A record as it went in: offset, timestamp, key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: HeaderList = field(default_factory=list)


@dataclass(frozen=True)
class BatchInfo:
    """What the JSON dump reports of a record's batch."""

    base_offset: int
    compression: str
    transactional: bool
    control: bool
    producer_id: int


def clock() -> int:
    return NOW_MS


def make_log(directory: Path, **props: object) -> Log:
    return Log(directory, LogConfig.from_props(props), clock_ms=clock)


def sample(n: int, *, tag: str, ts: int = NOW_MS - 60_000) -> list[Rec]:
    """Records with every shape: null keys, empty keys, tombstones, empty values, headers with
    null values and non-ASCII names, timestamps that go back and forth. Values repeat enough
    for every codec to shrink them (kafka-python sends a batch uncompressed otherwise)."""
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else (b"" if i % 7 == 3 else f"key-{tag}-{i}".encode())
        value = None if i % 5 == 1 else (b"" if i % 9 == 2 else f"value-{tag}-{i}-".encode() * 12)
        headers: HeaderList = [("h1", b"x" * i), ("null-value", None), ("ünï-κ", b"\x00\xff")][: i % 4]
        out.append(Rec(i, ts + (i * 37) % 50 - 25, key, value, headers))
    return out


def kafka_python_batch(recs: list[Rec], codec: Codec, *, producer: tuple[int, int, int] | None = None,
                       transactional: bool = False) -> bytes:
    """A batch as kafka-python's producer builds it (base offset 0, offset deltas 0, 1, ...)."""
    pid, epoch, seq = producer or (-1, -1, -1)
    builder = MemoryRecordsBuilder(2, int(codec), 1 << 22, transactional=transactional, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq)
    for r in recs:
        assert builder.append(r.timestamp, r.key, r.value, r.headers) is not None
    builder.close()
    data = bytes(builder.buffer())
    assert BatchHeader.parse(data).codec == codec, "kafka-python sent the batch uncompressed"
    return data


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """Real offsets on a batch: baseOffset sits before the CRC'd range, so no new CRC."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def shift(recs: list[Rec], base_offset: int) -> list[Rec]:
    return [Rec(base_offset + r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]


def as_tuples(recs: Iterable[object]) -> list[tuple[object, ...]]:
    """(offset, timestamp, key, value, headers) of logkeeper's, kafka-python's or our records."""
    out = []
    for r in recs:
        headers = [(k, v) for k, v in r.headers]  # type: ignore[attr-defined]
        out.append((r.offset, r.timestamp, r.key, r.value, headers))  # type: ignore[attr-defined]
    return out


def kafka_python_read(data: bytes) -> list[tuple[DefaultRecordBatch, list[object]]]:
    """Every batch of ``data`` through kafka-python, CRC checked first."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), f"kafka-python finds a bad CRC in the batch at offset {batch.base_offset}"
        out.append((batch, list(batch)))
    assert records.valid_bytes() == len(data)
    return out


def dump_json(path: Path) -> list[dict[str, object]]:
    out = io.StringIO()
    dump_file(path, out, as_json=True)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def dump_dir_json(directory: Path) -> list[dict[str, object]]:
    return [row for path in sorted(directory.glob("*" + names.LOG_SUFFIX)) for row in dump_json(path)]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def expected_json(rec: Rec, info: BatchInfo) -> dict[str, object]:
    return {
        "offset": rec.offset, "timestamp": rec.timestamp, "key": b64(rec.key), "value": b64(rec.value),
        "headers": [{"key": k, "value": b64(v)} for k, v in rec.headers],
        "baseOffset": info.base_offset, "compression": info.compression,
        "isTransactional": info.transactional, "isControl": info.control, "producerId": info.producer_id,
    }


def segment_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*" + names.LOG_SUFFIX)))


# ------------------------------------------------------------------------------------------
# kafka-python writes, logkeeper stores, reads and dumps
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("assign_offsets", [True, False], ids=["assigned", "carried"])
@pytest.mark.parametrize("codec_name", CODEC_IDS)
def test_kafka_python_batches_round_trip(tmp_path: Path, codec_name: str, assign_offsets: bool) -> None:
    codec = CODECS[codec_name]
    plain = sample(12, tag="plain")
    idempotent = sample(9, tag="idem")
    txn = sample(7, tag="txn")
    specs = [  # records, producer (id, epoch, base sequence), transactional
        (plain, None, False),
        (idempotent, (4242, 7, 100), False),
        (txn, (777, 3, 2_147_483_645), True),  # the sequence wraps inside the batch
    ]
    log = make_log(tmp_path / "t-0")
    # carried offsets start past 0 and leave gaps, as a compacted log's do
    bases = [0, 12, 21] if assign_offsets else [5, 30, 1000]
    expected: list[tuple[Rec, BatchInfo]] = []
    stored: list[bytes] = []
    for (recs, producer, transactional), base in zip(specs, bases):
        data = kafka_python_batch(recs, codec, producer=producer, transactional=transactional)
        if assign_offsets:
            info = log.append(data)
        else:
            data = with_base_offset(data, base)
            info = log.append(data, assign_offsets=False)
        assert (info.first_offset, info.last_offset) == (base, base + len(recs) - 1)
        assert info.max_timestamp == max(r.timestamp for r in recs)
        stored.append(with_base_offset(data, base))
        batch_info = BatchInfo(base, codec_name, transactional, False, producer[0] if producer else -1)
        expected += [(r, batch_info) for r in shift(recs, base)]
    # the transaction ends with a COMMIT marker from the coordinator (not a client append)
    marker_offset = log.log_end_offset
    marker = build_marker_batch(ControlType.COMMIT, offset=marker_offset, timestamp=NOW_MS, producer_id=777,
                                producer_epoch=3, coordinator_epoch=11)
    log.append(marker, assign_offsets=False)
    assert log.last_stable_offset == log.log_end_offset == marker_offset + 1
    want = [r for r, _ in expected]

    # stored byte for byte (only the base offset differs from what kafka-python built)
    fetched = log.read(0, 1 << 20)
    assert fetched.records == b"".join(stored) + marker
    assert fetched.first_offset == bases[0]
    # read back by logkeeper and by kafka-python: what went in
    assert as_tuples(read_records(fetched.records)[:-1]) == as_tuples(want)
    batches = kafka_python_read(fetched.records)
    assert as_tuples(r for _, recs in batches[:-1] for r in recs) == as_tuples(want)
    for (batch, _), (recs, producer, transactional), base in zip(batches, specs, bases):
        assert (batch.base_offset, batch.last_offset, batch.compression_type) == (base, base + len(recs) - 1, codec)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (producer or (-1, -1, -1))
        assert batch.is_transactional == transactional
        assert batch.max_timestamp == max(r.timestamp for r in recs)
    control_batch, control_records = batches[-1]
    assert control_batch.is_control_batch and control_batch.is_transactional
    assert [(type(r), r.commit, r.offset) for r in control_records] == [(ControlRecord, True, marker_offset)]
    # the idempotent batch's last sequence, and the wrap of the transactional one
    assert batches[1][0].last_sequence == 108
    assert batches[2][0].last_sequence == (2_147_483_645 + 6) % (1 << 31)
    # a read from inside the second batch starts at that batch
    middle = log.read(bases[1] + 3, 1 << 20)
    assert middle.first_offset == bases[1]
    assert read_records(middle.records)[0].offset == bases[1]
    log.close()

    # dumped: one JSON object a record, with the batch's fields
    rows = dump_dir_json(tmp_path / "t-0")
    assert rows[:-1] == [expected_json(r, info) for r, info in expected]
    assert rows[-1]["isControl"] is True and rows[-1]["offset"] == marker_offset


def test_kafka_python_batch_builder_with_explicit_offsets(tmp_path: Path) -> None:
    """DefaultRecordBatchBuilder directly, as a replica would receive batches: several in one
    append, carrying their offsets."""
    datas, want = [], []
    base = 0
    for n, codec in enumerate(CODECS.values()):
        builder = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 22)
        recs = sample(6 + n, tag=f"b{n}")
        for r in recs:
            assert builder.append(r.offset, r.timestamp, r.key, r.value, r.headers) is not None
        datas.append(with_base_offset(bytes(builder.build()), base))
        want += shift(recs, base)
        base += len(recs) + 3  # gaps between batches
    log = make_log(tmp_path / "t-0")
    info = log.append(b"".join(datas), assign_offsets=False)
    assert (info.num_batches, info.num_records) == (5, len(want))
    log.close()
    assert segment_bytes(tmp_path / "t-0") == b"".join(datas)
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in dump_dir_json(tmp_path / "t-0")] == [
        (r.offset, r.timestamp, b64(r.key), b64(r.value)) for r in want]


# ------------------------------------------------------------------------------------------
# logkeeper writes, kafka-python reads
# ------------------------------------------------------------------------------------------
def lk_records(recs: list[Rec]) -> list[Record]:
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in recs]


@pytest.mark.parametrize("codec_name", CODEC_IDS)
def test_logkeeper_batches_decode_in_kafka_python(tmp_path: Path, codec_name: str) -> None:
    codec = CODECS[codec_name]
    specs = [
        (sample(10, tag="a"), {}),
        (sample(5, tag="b"), {"producer_id": 99, "producer_epoch": 1, "base_sequence": 0}),
        (sample(8, tag="c"), {"producer_id": 100, "producer_epoch": 0, "base_sequence": 5, "is_transactional": True}),
        (sample(1, tag="d"), {}),
    ]
    log = make_log(tmp_path / "t-0")
    want = []
    for recs, kw in specs:
        info = log.append(build_batch(lk_records(recs), codec=codec, **kw))  # type: ignore[arg-type]
        want += shift(recs, info.first_offset)
    log.close()
    data = segment_bytes(tmp_path / "t-0")

    batches = kafka_python_read(data)
    assert len(batches) == len(specs)
    assert as_tuples(r for _, recs in batches for r in recs) == as_tuples(want)
    base = 0
    for (batch, records), (recs, kw) in zip(batches, specs):
        assert batch.compression_type == codec
        assert (batch.base_offset, batch.last_offset_delta, batch.records_count) == (base, len(recs) - 1, len(recs))
        assert batch.first_timestamp == recs[0].timestamp
        assert batch.max_timestamp == max(r.timestamp for r in recs)
        assert batch.timestamp_type == 0
        assert batch.producer_id == kw.get("producer_id", -1)
        assert batch.producer_epoch == kw.get("producer_epoch", -1)
        assert batch.base_sequence == kw.get("base_sequence", -1)
        assert batch.is_transactional == kw.get("is_transactional", False)
        assert not batch.is_control_batch
        assert all(r.timestamp_type == 0 for r in records)
        base += len(recs)


def test_special_batches_decode_in_kafka_python(tmp_path: Path) -> None:
    """Header-only batches, COMMIT and ABORT markers and delete-horizon batches (all with
    their offsets, as the cleaner and the coordinator write them)."""
    log = make_log(tmp_path / "t-0")
    data_recs = sample(4, tag="txn")
    log.append(build_batch(lk_records(data_recs), producer_id=7, producer_epoch=2, base_sequence=0,
                           is_transactional=True))
    empty = build_empty_batch(base_offset=4, last_offset=9, max_timestamp=NOW_MS - 5, producer_id=7,
                              producer_epoch=2, base_sequence=4, is_transactional=True)
    log.append(empty, assign_offsets=False)
    commit = build_marker_batch(ControlType.COMMIT, offset=10, timestamp=NOW_MS - 4, producer_id=7,
                                producer_epoch=2, coordinator_epoch=5)
    log.append(commit, assign_offsets=False)
    log.append(build_batch(lk_records(shift(sample(3, tag="abort"), 11)), producer_id=8, producer_epoch=0,
                           base_sequence=0, is_transactional=True), assign_offsets=False)
    abort = build_marker_batch(ControlType.ABORT, offset=14, timestamp=NOW_MS - 3, producer_id=8,
                               producer_epoch=0, coordinator_epoch=6)
    log.append(abort, assign_offsets=False)
    horizon = NOW_MS + 86_400_000
    horizon_recs = [Rec(20, NOW_MS - 100, b"k1", None, [("h", None)]), Rec(22, NOW_MS - 90, b"k2", b"v2")]
    horizon_batches = [build_batch(lk_records(shift(horizon_recs, 10 * n)), codec=codec, delete_horizon_ms=horizon)
                       for n, codec in enumerate(CODECS.values())]
    for b in horizon_batches:
        log.append(b, assign_offsets=False)
    assert log.last_stable_offset == log.log_end_offset == 63
    log.close()
    data = segment_bytes(tmp_path / "t-0")
    assert data == b"".join([data[:len(data) - sum(map(len, horizon_batches))], *horizon_batches])

    batches = kafka_python_read(data)
    assert len(batches) == 5 + len(horizon_batches)
    (_d, d_recs), (e, e_recs), (c, c_recs), (_a_data, _), (a, a_recs) = batches[:5]
    assert as_tuples(d_recs) == as_tuples(data_recs)
    # header-only: no record, but the offset range and the producer's sequence
    assert (e.records_count, e_recs, e.base_offset, e.last_offset) == (0, [], 4, 9)
    assert (e.producer_id, e.producer_epoch, e.base_sequence, e.last_sequence) == (7, 2, 4, 9)
    assert e.is_transactional and not e.is_control_batch
    assert (e.first_timestamp, e.max_timestamp) == (-1, NOW_MS - 5)
    # markers: control records with the type in the key and the coordinator epoch in the value
    for batch, records, commit_wanted, offset, epoch in ((c, c_recs, True, 10, 5), (a, a_recs, False, 14, 6)):
        assert batch.is_control_batch and batch.is_transactional
        assert batch.base_sequence == -1
        (rec,) = records
        assert isinstance(rec, ControlRecord)
        assert (rec.commit, rec.abort, rec.version, rec.offset) == (commit_wanted, not commit_wanted, 0, offset)
        assert rec.value == struct.pack(">hi", 0, epoch)
    # delete horizon (attribute 0x40, unknown to kafka-python): baseTimestamp holds the horizon
    # and the record timestamps, stored as deltas from it, still come out right
    for n, (batch, records) in enumerate(batches[5:]):
        assert batch.attributes & 0x40
        assert batch.compression_type == list(CODECS.values())[n]
        assert batch.first_timestamp == horizon
        assert batch.max_timestamp == NOW_MS - 90
        assert as_tuples(records) == as_tuples(shift(horizon_recs, 10 * n))


@pytest.mark.parametrize("source", ["logkeeper", "kafka-python"])
def test_log_append_time_decodes_in_kafka_python(tmp_path: Path, source: str) -> None:
    """A LogAppendTime topic stamps the append time as maxTimestamp, sets 0x08 and recomputes
    the CRC; readers report the append time for every record."""
    log = make_log(tmp_path / "t-0", **{"message.timestamp.type": "LogAppendTime"})
    want = []
    for codec in CODECS.values():
        recs = sample(6, tag=str(int(codec)), ts=NOW_MS - 10**9)  # far outside the CreateTime window
        data = (build_batch(lk_records(recs), codec=codec) if source == "logkeeper"
                else kafka_python_batch(recs, codec))
        info = log.append(data)
        assert info.log_append_time_ms == NOW_MS
        want += [Rec(r.offset, NOW_MS, r.key, r.value, r.headers) for r in shift(recs, info.first_offset)]
    log.close()
    data = segment_bytes(tmp_path / "t-0")
    batches = kafka_python_read(data)
    for batch, records in batches:
        assert batch.timestamp_type == 1
        assert batch.max_timestamp == NOW_MS
        assert all(r.timestamp_type == 1 for r in records)
    assert as_tuples(r for _, recs in batches for r in recs) == as_tuples(want)
    assert as_tuples(read_records(data)) == as_tuples(want)


# ------------------------------------------------------------------------------------------
# a directory of bare .log files: recover, verify, dump; indexes rebuilt byte for byte
# ------------------------------------------------------------------------------------------
def write_mixed_log(directory: Path) -> int:
    """Several segments of kafka-python and logkeeper batches, every codec, transactions that
    commit and abort. Default index.interval.bytes (what `logkeeper recover` uses) with
    segments of ~16 KB, so every closed segment has index entries."""
    log = make_log(directory, **{"segment.bytes": 16_000})
    codecs = list(CODECS.values())
    for n in range(400):
        codec = codecs[n % len(codecs)]
        recs = sample(1 + n % 6, tag=str(n), ts=NOW_MS - 50_000 + n * 7)
        if n % 10 == 3:  # a transaction: data then a marker, COMMIT or ABORT in turn
            pid = 500 + n
            log.append(build_batch(lk_records(recs), codec=codec, producer_id=pid, producer_epoch=0,
                                   base_sequence=0, is_transactional=True))
            kind = ControlType.ABORT if n % 20 == 3 else ControlType.COMMIT
            log.append(build_marker_batch(kind, offset=log.log_end_offset, timestamp=recs[-1].timestamp + 1,
                                          producer_id=pid, producer_epoch=0), assign_offsets=False)
        elif n % 2:
            log.append(build_batch(lk_records(recs), codec=codec))
        else:
            log.append(kafka_python_batch(recs, codec) if codec != Codec.NONE or len(recs) > 1
                       else build_batch(lk_records(recs)))
    segments = len(log.segments)
    log.close()
    return segments


def test_bare_log_files_are_recovered_verified_and_dumped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = tmp_path / "original" / "t-0"
    segments = write_mixed_log(original)
    assert segments >= 4
    copy = tmp_path / "copy" / "t-0"
    copy.mkdir(parents=True)
    for path in original.glob("*" + names.LOG_SUFFIX):
        shutil.copy2(path, copy / path.name)
    assert all(p.suffix == names.LOG_SUFFIX for p in copy.iterdir())

    assert main(["recover", str(copy)]) == 0
    out = capsys.readouterr().out
    assert out.count("indexes rebuilt") == segments
    assert "cut" not in out

    assert main(["verify", str(copy)]) == 0
    out = capsys.readouterr().out
    plural = "s" if segments != 1 else ""
    assert out.startswith(f"OK: checked 1 partition, {segments} segment{plural}, ")

    assert dump_dir_json(copy) == dump_dir_json(original)
    for suffix, entry_size in ((names.INDEX_SUFFIX, 8), (names.TIME_INDEX_SUFFIX, 12), (names.TXN_INDEX_SUFFIX, 34)):
        written = sorted(original.glob("*" + suffix))
        assert len(written) == segments
        assert all(p.stat().st_size >= 2 * entry_size for p in written[:-1]), f"too few {suffix} entries"
        for path in written:
            assert (copy / path.name).read_bytes() == path.read_bytes(), f"{path.name} differs"
    for path in original.glob("*" + names.LOG_SUFFIX):
        assert (copy / path.name).read_bytes() == path.read_bytes()

    # every batch of the recovered copy still decodes in kafka-python with a valid CRC
    data = segment_bytes(copy)
    decoded = kafka_python_read(data)
    lk = [b for b in iter_batches(np.frombuffer(data, dtype=np.uint8))]
    assert [b.base_offset for b, _ in decoded] == [b.header.base_offset for b in lk]
