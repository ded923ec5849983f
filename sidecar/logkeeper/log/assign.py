"""Offset assignment for ``Log.append``: the offsets a request's batches get, and the bytes written.

A client's batches arrive with base offset 0 and get the next offsets of the log. What changes
in their headers, and what that costs:

- baseOffset and partitionLeaderEpoch lie before the CRC'd range: patched, no new CRC;
- maxTimestamp (LogAppendTime, or a CreateTime header that disagrees with its records, which
  Kafka rewrites) lies inside it: patched, and the CRC computed again.

A request of one batch where only the base offset changes (an idempotent producer's, say) is
written as a new 61-byte header followed by the body as it came, with no copy of the body; any
other request is copied once and patched in place.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import InvalidRecordError
from ..records.batch import set_base_offset, set_max_timestamp, set_partition_leader_epoch
from ..records.batch_format import HEADER_SIZE
from .validator import ValidatedBatch

# a batch's first field, its base offset, as written (the common request's whole new header)
pack_base_offset = struct.Struct(">q").pack


class LogAppendInfo(NamedTuple):
    """What an append did: the offsets assigned, and what was written."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    num_batches: int
    num_records: int
    valid_bytes: int
    duplicate: bool = False  # an idempotent producer's retry of a batch already appended: nothing written


def new_header(data: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """The first batch's 61 header bytes with ``base_offset`` (outside the CRC'd range)."""
    return pack_base_offset(base_offset) + data[8:HEADER_SIZE]


def base_offsets(batches: list[ValidatedBatch], log_end_offset: int, *, assign: bool, log_name: str) -> list[int]:
    """Each batch's base offset: the next ones from ``log_end_offset`` when ``assign``;
    otherwise the batches' own, which must not go below the log end offset or overlap."""
    if assign:
        bases, next_offset = [], log_end_offset
        for b in batches:
            bases.append(next_offset)
            next_offset += b.header.last_offset_delta + 1
        return bases
    floor = log_end_offset
    for b in batches:
        if b.header.base_offset < floor:
            raise InvalidRecordError(b.position, (
                f"batch base offset {b.header.base_offset} is below {floor}, the log end offset of "
                f"{log_name} or the end of the previous batch"))
        floor = b.header.last_offset + 1
    return [b.header.base_offset for b in batches]


def assigned_bytes(data: bytes | bytearray | memoryview, batches: list[ValidatedBatch], bases: list[int], *,
                   append_time: int, leader_epoch: int) -> tuple[bytes | bytearray | memoryview, bytes | None]:
    """(bytes to write, header replacing their first 61 bytes or None) for a client's request
    whose batches get ``bases``; ``append_time`` >= 0 under LogAppendTime, ``leader_epoch`` >= 0
    to stamp the leader's epoch."""
    first = batches[0]
    if len(batches) == 1 and append_time < 0 and leader_epoch < 0 and \
            first.max_timestamp == first.header.max_timestamp:
        return data, new_header(data, bases[0])
    out = bytearray(data)
    for b, base in zip(batches, bases):
        set_base_offset(out, b.position, base)
        if leader_epoch >= 0:
            set_partition_leader_epoch(out, b.position, leader_epoch)
        if append_time >= 0:
            set_max_timestamp(out, b.position, b.header.size, append_time, True)
        elif b.max_timestamp != b.header.max_timestamp:
            set_max_timestamp(out, b.position, b.header.size, b.max_timestamp, False)
    return out, None
