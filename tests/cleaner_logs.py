"""Helpers for the cleaner's tests: writing logs and reading them back (test code: not in the package).

Reading decodes every record in Python (fine for tests); the
writers go through ``Log.append`` so that offsets, indexes and transaction state are the log's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.cleaner.txn import collect_aborted
from logkeeper.index.txn_index import AbortedTxn
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import BatchHeader
from logkeeper.records.batch_format import HEADER_SIZE, TIMESTAMP_TYPE_MASK
from logkeeper.records.builder import ControlType, Headers, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec, decompress
from logkeeper.records.scan import headers_of, scan_batches, walk_records

KV = tuple[bytes | None, bytes | None]

START_MS = 1_700_000_000_000
INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
RETENTION_MS = 86_400_000  # delete.retention.ms in Kafka's cleaner tests
LARGE_TS = LONG_MAX - RETENTION_MS - 1  # a timestamp far ahead, as Kafka's LogCleanerTest uses


class Clock:
    """The cleaner tests' clock: it reads ``now``, which a test sets or moves."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass(frozen=True)
class ReadRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    batch: BatchHeader


def append_kvs(log: Log, kvs: Sequence[KV], *, timestamp: int | None = None, codec: Codec = Codec.NONE,
               headers: Headers = (), producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False, as_client: bool = True) -> int:
    """Append ``kvs`` as one batch; return its first offset."""
    ts = log.now_ms() if timestamp is None else timestamp
    base = 0 if as_client else log.log_end_offset
    records = [Record(base + i, ts, k, v, headers) for i, (k, v) in enumerate(kvs)]
    data = build_batch(records, codec=codec, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, is_transactional=transactional)
    return log.append(data, assign_offsets=as_client).first_offset


def append_with_offsets(log: Log, kvs: Sequence[KV], offsets: Sequence[int], *, timestamp: int | None = None,
                        codec: Codec = Codec.NONE) -> int:
    """Append one batch whose records carry the given (increasing, possibly sparse) offsets."""
    ts = log.now_ms() if timestamp is None else timestamp
    records = [Record(o, ts, k, v) for (k, v), o in zip(kvs, offsets)]
    return log.append(build_batch(records, codec=codec), assign_offsets=False).first_offset


def append_marker(log: Log, control: ControlType, producer_id: int, producer_epoch: int = 0, *,
                  timestamp: int | None = None, coordinator_epoch: int = 0) -> int:
    ts = log.now_ms() if timestamp is None else timestamp
    offset = log.log_end_offset
    data = build_marker_batch(control, offset=offset, timestamp=ts, producer_id=producer_id,
                              producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch)
    return log.append(data, assign_offsets=False).first_offset


class TxnProducer:
    """A transactional producer: each call appends one batch with the next sequence. Appended as
    replication does (offsets from the log end, no sequence checks), as Kafka's cleaner tests do,
    so that tests may reuse a producer id and sequences as a restarted producer would."""

    def __init__(self, log: Log, producer_id: int, producer_epoch: int = 0) -> None:
        self.log = log
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence = 0

    def append(self, keys: Iterable[int | bytes], *, value: bytes | None = b"v", timestamp: int | None = None,
               codec: Codec = Codec.NONE) -> int:
        kvs = [(k if isinstance(k, bytes) else str(k).encode(), value) for k in keys]
        first = append_kvs(self.log, kvs, timestamp=timestamp, codec=codec, producer_id=self.producer_id,
                           producer_epoch=self.producer_epoch, base_sequence=self.sequence, transactional=True,
                           as_client=False)
        self.sequence += len(kvs)
        return first

    def commit(self, timestamp: int | None = None) -> int:
        return append_marker(self.log, ControlType.COMMIT, self.producer_id, self.producer_epoch, timestamp=timestamp)

    def abort(self, timestamp: int | None = None) -> int:
        return append_marker(self.log, ControlType.ABORT, self.producer_id, self.producer_epoch, timestamp=timestamp)


def segment_batches(path: Path) -> list[tuple[BatchHeader, bytes]]:
    """(header, whole batch bytes) of every batch of a ``.log`` file."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        header = BatchHeader.parse(data, pos)
        out.append((header, data[pos:pos + header.size]))
        pos += header.size
    return out


def batch_records(header: BatchHeader, raw: bytes) -> list[ReadRecord]:
    area = raw[HEADER_SIZE:]
    if header.codec:
        area = decompress(Codec(header.codec), area)
    buf = np.frombuffer(area or b"\x00", dtype=np.uint8)
    t = walk_records(buf, [0], [len(area)], [header.record_count], [header.base_offset], [header.base_timestamp])
    out = []
    for i in range(t.count):
        kp, kl, vp, vl = int(t.key_pos[i]), int(t.key_len[i]), int(t.value_pos[i]), int(t.value_len[i])
        ts = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else int(t.timestamp[i])
        hdrs = tuple(headers_of(buf, int(t.headers_pos[i]), int(t.header_count[i])))
        out.append(ReadRecord(int(t.offset[i]), ts, area[kp:kp + kl] if kl >= 0 else None,
                              area[vp:vp + vl] if vl >= 0 else None, hdrs, header))
    return out


def log_batches(log: Log) -> list[tuple[BatchHeader, bytes]]:
    out: list[tuple[BatchHeader, bytes]] = []
    for seg in log.segments.values():
        out.extend(segment_batches(seg.log.path))
    return out


def read_log(log: Log) -> list[ReadRecord]:
    out: list[ReadRecord] = []
    for header, raw in log_batches(log):
        out.extend(batch_records(header, raw))
    return out


def keys_in_log(log: Log) -> list[bytes | None]:
    """Keys of the data records, in offset order (Kafka's LogTestUtils.keysInLog)."""
    return [r.key for r in read_log(log) if not r.batch.is_control and r.value is not None]


def offsets_in_log(log: Log) -> list[int]:
    """Offsets of data records with a key and a value (Kafka's offsetsInLog)."""
    return [r.offset for r in read_log(log) if r.key is not None and r.value is not None]


def last_offsets_per_batch(log: Log) -> list[int]:
    return [h.last_offset for h, _raw in log_batches(log)]


def ensure_valid_segments(log: Log) -> None:
    """Every segment scans to its end and every batch has a valid CRC (raises otherwise)."""
    from logkeeper.errors import CorruptRecordError
    from logkeeper.records.scan import ScanStop, ensure_valid

    for seg in log.segments.values():
        data = seg.log.path.read_bytes()
        buf = np.frombuffer(data or b"\x00", dtype=np.uint8)[:len(data)]
        t = scan_batches(buf, 0, len(data))
        if t.stop_reason != ScanStop.END:
            raise CorruptRecordError(t.stop_position, f"scan stopped: {t.stop_reason.name}", str(seg.log.path))
        ensure_valid(buf, t, str(seg.log.path))


def make_log(tmp_path: Path, clock: Clock, name: str = "test-0", **props: object) -> Log:
    """A compacted log as Kafka's LogCleanerTest makes one: 1 KiB segments and indexes, replaced
    files removed at once; ``props`` override its config (``segment_bytes`` for segment.bytes)."""
    config = {"segment.bytes": 1024, "segment.index.bytes": 1024, "cleanup.policy": "compact",
              "file.delete.delay.ms": 0}
    config.update({k.replace("_", "."): v for k, v in props.items()})
    return Log(tmp_path / name, LogConfig.from_props(config), clock_ms=clock)


def make_cleaner(clock: Clock, capacity: int = INT_MAX, *, map_type: type[SipHashOffsetMap] = SipHashOffsetMap,
                 check_done: object = None, max_message_size: int = 64 * 1024) -> Cleaner:
    """Kafka's LogCleanerTest cleaner: an offset map of ``capacity`` slots at load factor 0.75 and
    I/O buffers of ``max_message_size``."""
    kwargs: dict[str, object] = {}
    if check_done is not None:
        kwargs["check_done"] = check_done
    return Cleaner(0, map_type(slots=capacity, load_factor=0.75), io_buffer_size=max_message_size,
                   max_io_buffer_size=max_message_size, load_factor=0.75, clock_ms=clock, **kwargs)  # type: ignore[arg-type]


def ltc(log: Log, start: int, end: int | None = None) -> LogToClean:
    """The log to clean from ``start`` to ``end`` (the active segment's base by default)."""
    return LogToClean(log, start, log.active_segment.base_offset if end is None else end)


def ikeys(log: Log) -> list[int]:
    """The log's keys, read as integers (null keys left out)."""
    return [int(k) for k in keys_in_log(log) if k is not None]


class FakeOffsetMap(SipHashOffsetMap):
    """As Kafka's LogCleanerTest.FakeOffsetMap: ``clear`` keeps the latest offset, so a round with
    an empty dirty section still recopies the log up to it (the tests rely on that to re-clean)."""

    def clear(self) -> None:
        latest = self.latest_offset
        super().clear()
        self.update_latest_offset(latest)


def aborted(log: Log) -> list[AbortedTxn]:
    """Every aborted transaction of the log, from its transaction indexes."""
    return collect_aborted(log, 0, log.log_end_offset)


def record(log: Log, key: int, value: int | None, **kw: object) -> int:
    """Append one record whose key and value are the decimal strings of ``key`` and ``value`` (None: a
    tombstone); its offset."""
    return append_kvs(log, [(str(key).encode(), None if value is None else str(value).encode())], **kw)  # type: ignore[arg-type]
