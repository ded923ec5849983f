"""Compiled walkers over v2 record batches: the batch scan, the CRC check and the record walk.

Every fast path (recovery, verify, the cleaner, dump) starts here. The loops live in
:mod:`logkeeper.records.scan_kernels` (compiled kernels, see :mod:`logkeeper.aot`); this module holds
the typed wrappers, the column tables and the error mapping. No file I/O: ``buf`` is a 1-D uint8
numpy array, possibly a view over an mmap; every position is absolute in ``buf``.

Batch header (the layout is batch_format.py's) and the BatchTable column each field fills::

    byte  field                 type     BatchTable column (dtype)
    0     baseOffset            int64    base_offset (int64)
    8     batchLength           int32    size (int32) = 12 + batchLength
    12    partitionLeaderEpoch  int32    partition_leader_epoch (int32)
    16    magic                 int8     magic (int8)
    17    crc                   uint32   crc (uint32): CRC-32C of bytes [21, size)
    21    attributes            int16    attributes (int16): bits 0-2 codec, 0x08 log-append
                                         time, 0x10 transactional, 0x20 control, 0x40 delete horizon
    23    lastOffsetDelta       int32    last_offset_delta (int32)
    27    baseTimestamp         int64    base_timestamp (int64)
    35    maxTimestamp          int64    max_timestamp (int64)
    43    producerId            int64    producer_id (int64)
    51    producerEpoch         int16    producer_epoch (int16)
    53    baseSequence          int32    base_sequence (int32)
    57    recordCount           int32    record_count (int32)
    61    records (one compressed block when the codec bits are set)
    plus  position (int64): where the batch starts in buf

Scanning stops at the first of (``ScanStop``): END (exactly at ``end``), SHORT_TAIL (< 17 bytes
left, or a declared size running past ``end``: Kafka's FileLogInputStream reads both as end of
data), BAD_SIZE (size < 61, checked before the past-end test as Kafka does), BAD_MAGIC (magic != 2),
LIMIT (``max_batches`` rows read before ``end``). ``stop_position`` is where the unread bytes start.

Record (inside an uncompressed area, or a decompressed one)::

    field            encoding                       RecordTable column (dtype)
    length           varint (bytes after itself)    record_pos (int64), record_size (int32,
                                                    including the length varint)
    attributes       int8 (0)
    timestampDelta   varlong                        timestamp (int64) = baseTimestamp + delta
    offsetDelta      varint                         offset (int64) = baseOffset + delta
    keyLength        varint (-1 = null)             key_len (int32, -1 null)
    key              bytes                          key_pos (int64, -1 null)
    valueLength      varint (-1 = null: tombstone)  value_len (int32, -1 null)
    value            bytes                          value_pos (int64, -1 null)
    headerCount      varint                         header_count (int32)
    headers          per header: keyLength varint,  headers_pos (int64, the first header)
                     UTF-8 key, valueLength varint
                     (-1 null), value
    plus             batch (int32): row of the area (= batch row for walk_batches)

Varints are zigzag + LEB128 (at most 5 bytes; varlong 10). ``timestamp`` is always
baseTimestamp + delta; for LogAppendTime batches (attribute 0x08) Kafka reports maxTimestamp
instead, which the caller applies. Deliberately stricter than Kafka: a key/value/header-value
length below -1 is an InvalidRecordError (Kafka reads any negative length as null).

Compile cost: none with the kernels compiled ahead of time (``make setup``). Under numba's JIT
(``LOGKEEPER_KERNELS=jit``) the first scan+walk call in a fresh process compiles or loads the
kernels, far slower with a cold numba cache than a warm one (bench/bench_walk.py; its figures:
bench/results/walk.md).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from logkeeper.errors import (
    BadVarintError,
    CorruptRecordError,
    CrcMismatchError,
    InvalidRecordError,
    LengthPastEndError,
)
from logkeeper.records import crc_kernels as _crc
from logkeeper.records import scan_kernels as _k
from logkeeper.records.batch import crc32c
from logkeeper.records.batch_format import ATTRIBUTES_OFFSET, CODEC_MASK, HEADER_SIZE, MIN_RECORD_SIZE

__all__ = [
    "BatchTable",
    "RecordTable",
    "ScanStop",
    "ensure_valid",
    "first_crc_mismatch",
    "headers_of",
    "scan_batches",
    "walk_batches",
    "walk_error",
    "walk_records",
]


I8 = npt.NDArray[np.int8]
I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
U8 = npt.NDArray[np.uint8]


class ScanStop(enum.IntEnum):
    """Why :func:`scan_batches` stopped."""

    END = _k.STOP_END
    SHORT_TAIL = _k.STOP_SHORT_TAIL
    BAD_MAGIC = _k.STOP_BAD_MAGIC
    BAD_SIZE = _k.STOP_BAD_SIZE
    LIMIT = _k.STOP_LIMIT

    @property
    def words(self) -> str:
        """The reason as messages say it: "short tail", "bad magic"."""
        return self.name.lower().replace("_", " ")


@dataclass(frozen=True, eq=False)
class BatchTable:
    """One row per complete batch found by :func:`scan_batches` (see the module docstring)."""

    position: I64
    size: I32
    base_offset: I64
    partition_leader_epoch: I32
    magic: I8
    crc: U32
    attributes: I16
    last_offset_delta: I32
    base_timestamp: I64
    max_timestamp: I64
    producer_id: I64
    producer_epoch: I16
    base_sequence: I32
    record_count: I32
    stop_position: int
    stop_reason: ScanStop

    @functools.cached_property
    def last_offset(self) -> I64:
        """Each batch's last offset: computed once a table (callers index it a row at a time)."""
        return self.base_offset + self.last_offset_delta

    @property
    def count(self) -> int:
        return int(self.position.shape[0])

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, eq=False)
class RecordTable:
    """One row per record found by :func:`walk_records` (see the module docstring)."""

    batch: I32
    offset: I64
    timestamp: I64
    key_pos: I64
    key_len: I32
    value_pos: I64
    value_len: I32
    headers_pos: I64
    header_count: I32
    record_pos: I64
    record_size: I32

    @property
    def count(self) -> int:
        return int(self.offset.shape[0])

    def __len__(self) -> int:
        return self.count


_BATCH_COLUMNS = (
    "position", "size", "base_offset", "partition_leader_epoch", "magic", "crc", "attributes",
    "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
    "base_sequence", "record_count",
)

_RECORD_COLUMNS: tuple[tuple[str, type[np.signedinteger[Any]]], ...] = (
    ("batch", np.int32), ("offset", np.int64), ("timestamp", np.int64), ("key_pos", np.int64),
    ("key_len", np.int32), ("value_pos", np.int64), ("value_len", np.int32),
    ("headers_pos", np.int64), ("header_count", np.int32), ("record_pos", np.int64),
    ("record_size", np.int32),
)


def _as_buffer(buf: npt.NDArray[np.uint8]) -> U8:
    if buf.ndim != 1 or buf.dtype != np.uint8:
        raise ValueError(f"buf must be a 1-D uint8 array, got {buf.ndim}-D {buf.dtype}")
    return np.ascontiguousarray(buf)


def scan_batches(
    buf: npt.NDArray[np.uint8], start: int = 0, end: int | None = None, max_batches: int = -1
) -> BatchTable:
    """Header columns of the complete v2 batches in buf[start:end], stopping at the first stop."""
    buf = _as_buffer(buf)
    stop_at = buf.shape[0] if end is None else end
    if not 0 <= start <= stop_at <= buf.shape[0]:
        raise ValueError(f"bad range [{start}, {stop_at}) for a buffer of {buf.shape[0]} bytes")
    out = _k.scan_kernel(buf, np.int64(start), np.int64(stop_at), np.int64(max_batches))
    columns = dict(zip(_BATCH_COLUMNS, out[:14], strict=True))
    return BatchTable(**columns, stop_position=int(out[14]), stop_reason=ScanStop(int(out[15])))


def _crc_of(view: memoryview, position: int, size: int) -> int:
    return int(crc32c(view[position + ATTRIBUTES_OFFSET : position + size]))


def first_crc_mismatch(buf: npt.NDArray[np.uint8], table: BatchTable, from_row: int = 0) -> int:
    """Row of the first batch (from ``from_row``) whose stored crc is wrong, or -1.

    One compiled call over every batch where the CPU has a CRC-32C instruction
    (``crc_kernels``); otherwise one call of the ``crc32c`` package a batch.
    """
    buf = _as_buffer(buf)
    if _crc.HAVE_HW_CRC:
        return int(_crc.first_bad_crc(buf, table.position, table.size, table.crc, from_row, len(table)))
    view = buf.data
    positions, sizes, crcs = table.position.tolist(), table.size.tolist(), table.crc.tolist()
    for row in range(from_row, len(positions)):
        p = positions[row]
        if crc32c(view[p + ATTRIBUTES_OFFSET : p + sizes[row]]) != crcs[row]:
            return row
    return -1


def ensure_valid(buf: npt.NDArray[np.uint8], table: BatchTable, file: str | None = None) -> None:
    """Raise CrcMismatchError naming the position of the first batch whose CRC is wrong."""
    row = first_crc_mismatch(buf, table)
    if row >= 0:
        position = int(table.position[row])
        computed = _crc_of(_as_buffer(buf).data, position, int(table.size[row]))
        raise CrcMismatchError(
            position,
            f"batch at base offset {int(table.base_offset[row])} stores crc "
            f"{int(table.crc[row]):#010x}, computed {computed:#010x}",
            file,
        )


def walk_error(code: int, position: int, area: int, detail: int) -> CorruptRecordError:
    where = f"(record area {area})"
    if code == _k.ERR_VARINT_PAST_END:
        return BadVarintError(position, f"varint runs past the end of its record area {where}")
    if code == _k.ERR_VARINT_TOO_LONG:
        return BadVarintError(position, f"varint longer than its maximum size {where}")
    if code == _k.ERR_LENGTH_PAST_END:
        return LengthPastEndError(position, f"length {detail} runs past the record end {where}")
    if code == _k.ERR_NEGATIVE_LENGTH:
        return InvalidRecordError(position, f"invalid negative length or count {detail} {where}")
    if code == _k.ERR_SIZE_MISMATCH:
        return InvalidRecordError(
            position, f"record fields do not fill its declared length {detail} {where}"
        )
    if code == _k.ERR_TOO_FEW_RECORDS:
        return InvalidRecordError(
            position, f"record area ends after {detail} records, fewer than recordCount {where}"
        )
    return InvalidRecordError(
        position, f"{detail} bytes left after recordCount records: more records than counted {where}"
    )


def walk_records(
    buf: npt.NDArray[np.uint8],
    area_start: npt.ArrayLike,
    area_end: npt.ArrayLike,
    record_count: npt.ArrayLike,
    base_offset: npt.ArrayLike,
    base_timestamp: npt.ArrayLike,
) -> RecordTable:
    """Walk the records of each area [area_start[i], area_end[i]) of buf in one compiled call.

    Raises BadVarintError, LengthPastEndError or InvalidRecordError with the absolute position.
    """
    buf = _as_buffer(buf)
    starts = np.ascontiguousarray(area_start, dtype=np.int64)
    ends = np.ascontiguousarray(area_end, dtype=np.int64)
    counts = np.ascontiguousarray(record_count, dtype=np.int32)
    bases = np.ascontiguousarray(base_offset, dtype=np.int64)
    stamps = np.ascontiguousarray(base_timestamp, dtype=np.int64)
    n = starts.shape[0]
    if not all(a.shape == (n,) for a in (ends, counts, bases, stamps)):
        raise ValueError("area_start, area_end, record_count, base_offset, base_timestamp differ in shape")
    if n and (starts.min() < 0 or ends.max() > buf.shape[0] or bool(np.any(ends < starts))):
        raise ValueError("record areas must lie within buf")
    # A corrupt header can claim billions of records: bound each count by the area's bytes.
    bad = np.flatnonzero((counts < 0) | (counts.astype(np.int64) > (ends - starts) // MIN_RECORD_SIZE))
    if bad.size:
        i = int(bad[0])
        raise InvalidRecordError(
            int(starts[i]),
            f"recordCount {int(counts[i])} impossible in a {int(ends[i] - starts[i])}-byte record area "
            f"(record area {i})",
        )
    total = int(counts.sum(dtype=np.int64))
    columns = {name: np.empty(total, dtype) for name, dtype in _RECORD_COLUMNS}
    out = _k.walk_kernel(buf, starts, ends, counts, bases, stamps, *columns.values())
    err, err_pos, err_area, detail = (int(x) for x in out[:4])
    if err != _k.ERR_NONE:
        raise walk_error(err, err_pos, err_area, detail)
    return RecordTable(**columns)


def walk_batches(buf: npt.NDArray[np.uint8], table: BatchTable) -> RecordTable:
    """Walk every record of the (uncompressed) batches of ``table``; ``batch`` is the table row."""
    compressed = np.flatnonzero(table.attributes & CODEC_MASK)
    if compressed.size:
        row = int(compressed[0])
        raise ValueError(
            f"batch at position {int(table.position[row])} is compressed (codec "
            f"{int(table.attributes[row]) & CODEC_MASK}): decompress it and use walk_records"
        )
    starts = table.position + HEADER_SIZE
    ends = table.position + table.size.astype(np.int64)
    return walk_records(buf, starts, ends, table.record_count, table.base_offset, table.base_timestamp)


def _py_varint(view: memoryview, p: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        if p >= len(view) or shift > 28:
            raise BadVarintError(p, "bad header varint")
        b = view[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), p


def headers_of(
    buf: npt.NDArray[np.uint8] | bytes | bytearray | memoryview, headers_pos: int, header_count: int
) -> list[tuple[str, bytes | None]]:
    """Decode a record's headers (plain Python; for tools, not for hot paths)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, np.ndarray) else _as_buffer(buf).data
    p = int(headers_pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(int(header_count)):
        key_len, p = _py_varint(view, p)
        if key_len < 0 or p + key_len > len(view):
            raise LengthPastEndError(p, f"header key length {key_len}")
        key = bytes(view[p : p + key_len]).decode("utf-8")
        p += key_len
        value_len, p = _py_varint(view, p)
        value: bytes | None = None
        if value_len >= 0:
            if p + value_len > len(view):
                raise LengthPastEndError(p, f"header value length {value_len}")
            value = bytes(view[p : p + value_len])
            p += value_len
        headers.append((key, value))
    return headers
