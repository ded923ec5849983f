"""Oracle test: random workloads cleaned by logkeeper, compared batch by batch and record by record with a
plain-Python model of Kafka's retention rules written here, independently of the implementation.

Workloads mix keyed records, tombstones, unkeyed records, headers, the five codecs, LogAppendTime
batches, idempotent producers, committed, aborted and empty transactions, epoch bumps, rolls and
several rounds in virtual time (so delete horizons and producer expiry pass). Each round cleans
the range that Kafka's selection gives (checkpoint .. first uncleanable offset); the model gets the
same range and the segment layout (inputs, not outputs) and computes the whole log afterwards.
Every segment must scan cleanly with valid CRCs, and decode in kafka-python.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from logkeeper.cleaner import filter as filter_module
from logkeeper.cleaner import map_builder
from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean, cleanable_offsets
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import TimestampType
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from tests.cleaner_logs import batch_records, ensure_valid_segments, log_batches

HOUR = 3_600_000
START_MS = 1_700_000_000_000
RETENTION_MS = 2 * HOUR
EXPIRATION_MS = 6 * HOUR
CODECS = [Codec.NONE] * 6 + [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


# ------------------------------------------------------------------------------------------------ model
@dataclass
class MRec:
    offset: int
    ts: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class MBatch:
    base: int
    last: int
    pid: int
    epoch: int
    seq: int
    codec: int
    txn: bool
    control: bool
    lat: bool
    horizon: int | None
    base_ts: int
    max_ts: int
    records: list[MRec] = field(default_factory=list)
    control_type: int | None = None

    def record_ts(self, r: MRec) -> int:
        return self.max_ts if self.lat else r.ts

    def attributes(self) -> int:
        return (self.codec | (0x08 if self.lat else 0) | (0x10 if self.txn else 0) | (0x20 if self.control else 0)
                | (0x40 if self.horizon is not None else 0))


@dataclass
class Model:
    batches: list[MBatch] = field(default_factory=list)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # pid, first offset, marker offset

    def is_aborted(self, b: MBatch) -> bool:
        return b.txn and not b.control and any(
            pid == b.pid and first <= b.last and b.base < marker for pid, first, marker in self.aborted)

    def active_producers(self, now: int) -> dict[int, tuple[int | None, int]]:
        state: dict[int, dict[str, object]] = {}
        for b in self.batches:
            if b.pid < 0:
                continue
            s = state.get(b.pid)
            if s is None or s["epoch"] != b.epoch:
                s = {"epoch": b.epoch, "last_data": None, "ongoing": False, "last_ts": b.max_ts}
                state[b.pid] = s
            if b.control:
                s["ongoing"] = False
            else:
                s["last_data"] = b.last
                if b.txn:
                    s["ongoing"] = True
            s["last_ts"] = b.max_ts
        out: dict[int, tuple[int | None, int]] = {}
        for pid, s in state.items():
            last_ts = s["last_ts"]
            assert isinstance(last_ts, int)
            if s["ongoing"] or now - last_ts < EXPIRATION_MS:
                out[pid] = (s["last_data"], s["epoch"])  # type: ignore[assignment]
        return out

    def clean_round(self, start: int, upper: int, segment_bases: list[int], now: int, max_entries: int) -> int:
        """Kafka's round on the model: map of [start, upper), then recopy of the segments below its end."""
        key_map: dict[bytes, int] = {}
        latest = -1
        full = False
        dirty_bases = [s for s in segment_bases if s < upper]
        first_dirty_seg = max([s for s in dirty_bases if s <= start], default=dirty_bases[0] if dirty_bases else 0)
        dirty_bases = [s for s in dirty_bases if s >= first_dirty_seg]
        for i, seg in enumerate(dirty_bases):
            nxt = dirty_bases[i + 1] if i + 1 < len(dirty_bases) else upper
            for b in (b for b in self.batches if seg <= b.base < nxt):
                if not b.control and not self.is_aborted(b):
                    for r in b.records:
                        if r.key is not None and r.offset >= start:
                            if len(key_map) >= max_entries:
                                full = True
                                break
                            key_map[r.key] = r.offset
                            latest = r.offset
                if full:
                    break
                if b.last >= start:
                    latest = b.last
            if full:
                break
            latest = nxt - 1
        end = latest + 1
        cleaned_bases = [s for s in segment_bases if s < end]
        limit = segment_bases[segment_bases.index(cleaned_bases[-1]) + 1] if cleaned_bases and \
            segment_bases.index(cleaned_bases[-1]) + 1 < len(segment_bases) else None
        active = self.active_producers(now)
        committed_seen: set[int] = set()
        out: list[MBatch] = []
        for b in self.batches:
            if not cleaned_bases or (limit is not None and b.base >= limit):
                out.append(b)
                continue
            # transaction state: may the batch be discarded?
            if b.control:
                if not b.records:
                    can_discard = True
                elif b.control_type == ControlType.ABORT:
                    txn = next(((f, m) for pid, f, m in self.aborted if pid == b.pid and m == b.base), None)
                    seen = txn is not None and any(
                        x.pid == b.pid and x.txn and not x.control and txn[0] <= x.last and x.base < txn[1]
                        for x in self.batches if x.base < b.base)
                    can_discard = not seen
                elif b.control_type == ControlType.COMMIT:
                    can_discard = b.pid not in committed_seen
                    committed_seen.discard(b.pid)
                else:
                    can_discard = False
            else:
                can_discard = self.is_aborted(b)
                if b.txn and not can_discard:
                    committed_seen.add(b.pid)
            horizon_passed = b.horizon is not None and b.horizon <= now
            discard_records = can_discard and (horizon_passed or not b.control)
            last_of_producer = False
            if b.pid >= 0 and b.pid in active:
                last_data, epoch = active[b.pid]
                last_of_producer = (b.last == last_data) if last_data is not None else (b.control and b.epoch == epoch)
            retain_empty = last_of_producer or b.last + 1 == upper
            if discard_records and not retain_empty:
                continue
            kept: list[MRec] = []
            for r in b.records:
                if discard_records:
                    keep = False
                elif b.control or r.offset > end - 1:
                    keep = True
                elif r.key is None:
                    keep = False
                else:
                    keep = r.offset >= key_map.get(r.key, -1) and (
                        r.value is not None or b.horizon is None or now < b.horizon)
                if keep:
                    kept.append(r)
            marker_for_empty_txn = can_discard and b.control
            if kept:
                stamp = (any(r.value is None for r in kept) or marker_for_empty_txn) and b.horizon is None
                if len(kept) == len(b.records) and not stamp:
                    out.append(b)
                else:
                    out.append(_rebuilt(b, kept, now + RETENTION_MS if stamp else b.horizon))
            elif retain_empty:
                out.append(replace(b, records=[], codec=0, horizon=None, base_ts=-1))
        self.batches = out
        return end


def _rebuilt(b: MBatch, kept: list[MRec], horizon: int | None) -> MBatch:
    tss = [b.record_ts(r) for r in kept]
    recs = [replace(r, ts=b.record_ts(r)) for r in kept]
    return replace(b, records=recs, horizon=horizon, base_ts=horizon if horizon is not None else tss[0],
                   max_ts=b.max_ts if b.lat else max([-1, *tss]))


# ------------------------------------------------------------------------------------------------ workload
class Workload:
    def __init__(self, log: Log, model: Model, rng: random.Random, clock: list[int], keys: int) -> None:
        self.log, self.model, self.rng, self.clock, self.keys = log, model, rng, clock, keys
        self.txn_open: dict[int, int | None] = {1: None, 2: None, 3: None}  # pid -> first offset of open txn
        self.epochs = {1: 0, 2: 0, 3: 0, 100: 0, 101: 0}
        self.seqs = {1: 0, 2: 0, 3: 0, 100: 0, 101: 0}

    def _kv(self) -> MRec:
        rng = self.rng
        key = None if rng.random() < 0.05 else str(rng.randrange(self.keys)).encode()
        value = None if rng.random() < 0.15 else rng.randbytes(rng.randrange(0, 20))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if rng.random() < 0.2:
            headers = (("h", rng.randbytes(3)), ("n", None))
        return MRec(0, self.clock[0] - rng.randrange(1000), key, value, headers)

    def _append(self, recs: list[MRec], *, pid: int = -1, txn: bool = False, lat: bool = False) -> None:
        rng = self.rng
        codec = rng.choice(CODECS)
        base = self.log.log_end_offset
        epoch = self.epochs.get(pid, -1) if pid >= 0 else -1
        seq = self.seqs[pid] if pid >= 0 else -1
        records = [Record(base + i, r.ts, r.key, r.value, r.headers) for i, r in enumerate(recs)]
        append_time = self.clock[0]
        data = build_batch(records, base_offset=base, codec=codec, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, is_transactional=txn,
                           timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
                           log_append_time_ms=append_time if lat else -1)
        self.log.append(data, assign_offsets=False)
        if pid >= 0:
            self.seqs[pid] += len(recs)
        for i, r in enumerate(recs):
            r.offset = base + i
        self.model.batches.append(MBatch(
            base, base + len(recs) - 1, pid, epoch, seq, int(codec), txn, False, lat, None, recs[0].ts,
            append_time if lat else max(r.ts for r in recs), recs))

    def _marker(self, pid: int, ctype: ControlType) -> None:
        offset = self.log.log_end_offset
        ts = self.clock[0]
        self.log.append(build_marker_batch(ctype, offset=offset, timestamp=ts, producer_id=pid,
                                           producer_epoch=self.epochs[pid]), assign_offsets=False)
        first = self.txn_open[pid]
        if ctype == ControlType.ABORT and first is not None:
            self.model.aborted.append((pid, first, offset))
        self.txn_open[pid] = None
        self.model.batches.append(MBatch(offset, offset, pid, self.epochs[pid], -1, 0, True, True, False, None, ts, ts,
                                         [MRec(offset, ts, b"ctl", b"val")], int(ctype)))

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            lat = rng.random() < 0.05
            self._append([self._kv() for _ in range(rng.randrange(1, 6))], lat=lat)
        elif roll < 0.6:
            pid = rng.choice([100, 101])
            recs = [self._kv() for _ in range(rng.randrange(1, 4))]
            for r in recs:
                if r.key is None:
                    r.key = b"k"
            self._append(recs, pid=pid)
        elif roll < 0.9:
            pid = rng.choice([1, 2, 3])
            if self.txn_open[pid] is None:
                if rng.random() < 0.1:
                    self.epochs[pid] += 1
                    self.seqs[pid] = 0
                if rng.random() < 0.03:
                    self._marker(pid, rng.choice([ControlType.COMMIT, ControlType.ABORT]))  # an empty transaction
                    return
                self.txn_open[pid] = self.log.log_end_offset
            recs = [self._kv() for _ in range(rng.randrange(1, 4))]
            for r in recs:
                if r.key is None:
                    r.key = b"t"
            self._append(recs, pid=pid, txn=True)
            if rng.random() < 0.4:
                self._marker(pid, ControlType.COMMIT if rng.random() < 0.6 else ControlType.ABORT)
        elif roll < 0.97:
            self.log.roll()
        else:
            for pid, first in self.txn_open.items():
                if first is not None:
                    self._marker(pid, ControlType.ABORT)

    def unkeyed_batch(self) -> None:
        recs = [self._kv() for _ in range(self.rng.randrange(1, 3))]
        for r in recs:
            r.key = None
        self._append(recs)

    def close_transactions(self, leave_one_open: bool) -> None:
        for pid, first in list(self.txn_open.items()):
            if first is not None and not (leave_one_open and pid == 3):
                self._marker(pid, ControlType.COMMIT if self.rng.random() < 0.5 else ControlType.ABORT)


# ------------------------------------------------------------------------------------------------ comparison
def real_snapshot(log: Log) -> list[tuple[object, ...]]:
    out = []
    for h, raw in log_batches(log):
        recs = tuple((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch_records(h, raw)) \
            if not h.is_control else tuple((r.offset, r.timestamp) for r in batch_records(h, raw))
        out.append((h.base_offset, h.last_offset, h.record_count, h.attributes, h.base_timestamp, h.max_timestamp,
                    h.producer_id, h.producer_epoch, h.base_sequence, recs))
    return out


def model_snapshot(model: Model) -> list[tuple[object, ...]]:
    out = []
    for b in model.batches:
        recs = tuple((r.offset, b.record_ts(r), r.key, r.value, r.headers) for r in b.records) \
            if not b.control else tuple((r.offset, r.ts) for r in b.records)
        base_ts = b.base_ts
        out.append((b.base, b.last, len(b.records), b.attributes(), base_ts, b.max_ts, b.pid, b.epoch, b.seq, recs))
    return out


def check_kafka_python(log: Log) -> None:
    for seg in log.segments.values():
        data = seg.log.path.read_bytes()
        pos = 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
            batch = DefaultRecordBatch(data[pos:pos + size])
            assert batch.validate_crc()
            ours = batch_records(*log_batches_at(data, pos, size))
            theirs = list(batch)
            assert len(theirs) == len(ours)
            for a, b in zip(ours, theirs):
                assert (a.offset, a.key, a.value) == (b.offset, b.key, b.value)
                assert a.timestamp == b.timestamp
            pos += size


def log_batches_at(data: bytes, pos: int, size: int) -> tuple[object, bytes]:
    from logkeeper.records.batch import BatchHeader

    return BatchHeader.parse(data, pos), data[pos:pos + size]


@pytest.mark.parametrize("seed", range(8))
def test_cleaning_matches_the_model(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    if seed % 2:  # small windows: segments are read and written in many pieces
        monkeypatch.setattr(filter_module, "WINDOW_BYTES", 300)
        monkeypatch.setattr(map_builder, "WINDOW_BYTES", 500)
    clock = [START_MS]
    config = LogConfig.from_props({
        "segment.bytes": rng.choice([700, 1500, 4000]), "cleanup.policy": "delete", "file.delete.delay.ms": 0,
        "delete.retention.ms": RETENTION_MS, "index.interval.bytes": rng.choice([1, 4096]),
        "message.timestamp.before.max.ms": 10 * HOUR})
    log = Log(tmp_path / "topic-0", config, clock_ms=lambda: clock[0])
    model = Model()
    work = Workload(log, model, rng, clock, keys=rng.choice([8, 30, 200]))
    max_entries = rng.choice([1 << 20, 1 << 20, 7, 25])
    cleaner = Cleaner(0, SipHashOffsetMap(slots=int(max_entries / 0.75) + 1, load_factor=0.75),
                      clock_ms=lambda: clock[0], load_factor=0.75, producer_expiration_ms=EXPIRATION_MS)
    checkpoint: int | None = None
    for round_no in range(6):
        for _ in range(rng.randrange(20, 80)):
            work.step()
        work.close_transactions(leave_one_open=rng.random() < 0.3)
        if rng.random() < 0.4:  # a last batch that cleaning empties: kept as a header at the round's bound
            work.unkeyed_batch()
        log.roll()
        clock[0] += rng.choice([0, HOUR // 2, HOUR, RETENTION_MS, 3 * HOUR, 8 * HOUR])
        offsets = cleanable_offsets(log, checkpoint, clock[0])
        ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
        if ltc.cleanable_bytes == 0:
            continue
        bases = log.segments.base_offsets()
        expected_end = model.clean_round(offsets.first_dirty_offset, ltc.first_uncleanable_offset, bases, clock[0],
                                         cleaner.offset_map.max_entries)
        end, stats = cleaner.do_clean(ltc, clock[0])
        assert end == expected_end, f"round {round_no}"
        assert real_snapshot(log) == model_snapshot(model), f"round {round_no}"
        assert stats.messages_written <= stats.messages_read
        checkpoint = end
        ensure_valid_segments(log)
    check_kafka_python(log)
    # the cleaned log reloads (after a crash-free close) to the same content
    log.close()
    reloaded = Log(tmp_path / "topic-0", config, clock_ms=lambda: clock[0], had_clean_shutdown=False)
    assert real_snapshot(reloaded) == model_snapshot(model)
    reloaded.close()
