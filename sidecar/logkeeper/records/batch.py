"""The v2 record batch header (magic 2): parsing and in-place patches.

The layout (offsets, sizes, attribute bits) is batch_format.py's.
"""

from __future__ import annotations

import mmap
import os
import struct
from enum import IntEnum
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import BadMagicError, CrcMismatchError, LengthPastEndError, ShortBatchError
from . import batch_format as bf
from .crc_kernels import HAVE_HW_CRC, crc32c_range

HEADER = struct.Struct(bf.HEADER_FORMAT)
assert HEADER.size == bf.HEADER_SIZE

_BE_INT64 = struct.Struct(">q")
_BE_INT32 = struct.Struct(">i")
_BE_UINT32 = struct.Struct(">I")
_BE_INT16 = struct.Struct(">h")


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``: the CPU's instruction through the compiled kernel, or the
    C-backed ``crc32c`` package on a CPU without it. The package is imported only then: its import
    reads package metadata (importlib.metadata), a noticeable cost at the start of every process
    (bench/results/design_figures.md: batch, crc32c import)."""
    if HAVE_HW_CRC:
        return int(crc32c_range(np.frombuffer(data, np.uint8), 0, len(data)))
    import crc32c as package

    return int(package.crc32c(data))


def file_crc32c(path: Path) -> tuple[int, int]:
    """(size, CRC-32C) of a whole file."""
    crc = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                try:
                    crc = crc32c(view)
                finally:
                    view.release()
    return size, crc


class BatchHeader(NamedTuple):
    """The 13 header fields in order (a NamedTuple: built straight from ``HEADER.unpack_from``,
    which keeps parsing on the append path under a microsecond)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(
        cls, buf: bytes | bytearray | memoryview, pos: int = 0, *, available: int | None = None
    ) -> BatchHeader:
        """Parse the header at ``pos``; raise the specific error for a short or foreign batch.

        ``available`` is how many bytes the source holds from ``pos`` on, when ``buf`` is only
        a prefix of it (a header read from a file); it defaults to the rest of ``buf``.
        """
        remaining = len(buf) - pos if available is None else available
        if remaining < bf.HEADER_SIZE_UP_TO_MAGIC:
            raise ShortBatchError(pos, f"{remaining} bytes left, a batch header needs {bf.HEADER_SIZE}")
        magic = buf[pos + bf.MAGIC_OFFSET]
        if magic != bf.MAGIC:
            raise BadMagicError(pos, f"magic {magic}, expected {bf.MAGIC}")
        if min(remaining, len(buf) - pos) < bf.HEADER_SIZE:
            raise ShortBatchError(pos, f"{remaining} bytes left, a batch header needs {bf.HEADER_SIZE}")
        header = cls._make(HEADER.unpack_from(buf, pos))
        if header.size < bf.HEADER_SIZE:
            raise ShortBatchError(pos, f"batch length {header.batch_length} is below the header size")
        if header.size > remaining:
            raise LengthPastEndError(pos, f"batch of {header.size} bytes, {remaining} bytes left")
        return header

    def pack(self) -> bytes:
        return HEADER.pack(*self)

    @property
    def size(self) -> int:
        return bf.LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def codec(self) -> int:
        return self.attributes & bf.CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & bf.TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & bf.TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & bf.CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & bf.DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > bf.NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == bf.NO_SEQUENCE:
            return bf.NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + bf.ATTRIBUTES_OFFSET : pos + size])


def crc_mismatch(pos: int, stored: int, computed: int) -> CrcMismatchError:
    """The error for a batch at ``pos`` whose bytes do not match its stored CRC."""
    return CrcMismatchError(pos, f"stored crc {stored:#010x}, computed {computed:#010x}")


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets in place: baseOffset is outside the CRC'd range."""
    _BE_INT64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _BE_INT32.pack_into(buf, pos + bf.PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, size: int, max_timestamp_ms: int,
                      log_append_time: bool) -> None:
    """Set the batch's max timestamp (and the LogAppendTime bit when asked); new CRC."""
    (attributes,) = _BE_INT16.unpack_from(buf, pos + bf.ATTRIBUTES_OFFSET)
    if log_append_time:
        _BE_INT16.pack_into(buf, pos + bf.ATTRIBUTES_OFFSET, attributes | bf.TIMESTAMP_TYPE_MASK)
    _BE_INT64.pack_into(buf, pos + bf.MAX_TIMESTAMP_OFFSET, max_timestamp_ms)
    _BE_UINT32.pack_into(buf, pos + bf.CRC_OFFSET, compute_crc(buf, pos, size))
