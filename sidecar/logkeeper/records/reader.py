"""Decoding whole batches into Python records (tools, tests, the HTTP fetch path).

Built on the compiled walkers of ``scan.py``: one ``walk_records`` call a batch area (the
records of a compressed batch are decompressed first), then Python objects per record — which
is why nothing on a measured hot path uses this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import BadMagicError, CorruptRecordError, LengthPastEndError, ShortBatchError
from .batch import BatchHeader, TimestampType
from .batch_format import HEADER_SIZE
from .builder import Record
from .compression import Codec, decompress
from .scan import BatchTable, ScanStop, ensure_valid, first_crc_mismatch, headers_of, scan_batches, walk_records


@dataclass(frozen=True)
class DecodedBatch:
    position: int
    header: BatchHeader
    records: list[Record]


def header_of(table: BatchTable, row: int) -> BatchHeader:
    return BatchHeader(
        int(table.base_offset[row]), int(table.size[row]) - 12, int(table.partition_leader_epoch[row]),
        int(table.magic[row]), int(table.crc[row]), int(table.attributes[row]),
        int(table.last_offset_delta[row]), int(table.base_timestamp[row]), int(table.max_timestamp[row]),
        int(table.producer_id[row]), int(table.producer_epoch[row]), int(table.base_sequence[row]),
        int(table.record_count[row]),
    )


def decode_records(buf: np.ndarray, position: int, header: BatchHeader) -> list[Record]:
    """The records of the batch at ``position`` (offsets and timestamps absolute)."""
    start, end = position + HEADER_SIZE, position + header.size
    area = buf
    if header.codec != Codec.NONE:
        raw = decompress(Codec(header.codec), buf[start:end].data, position)
        area, start, end = np.frombuffer(raw, dtype=np.uint8), 0, len(raw)
    try:
        table = walk_records(area, [start], [end], [header.record_count], [header.base_offset],
                             [header.base_timestamp])
    except CorruptRecordError as e:
        if header.codec != Codec.NONE:
            raise type(e)(position, f"in the compressed records of this batch: {e.detail}") from None
        raise
    data = area.data
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    out = []
    for i in range(table.count):
        kl, vl = int(table.key_len[i]), int(table.value_len[i])
        kp, vp = int(table.key_pos[i]), int(table.value_pos[i])
        hc = int(table.header_count[i])
        out.append(Record(
            int(table.offset[i]),
            header.max_timestamp if log_append else int(table.timestamp[i]),
            bytes(data[kp:kp + kl]) if kl >= 0 else None,
            bytes(data[vp:vp + vl]) if vl >= 0 else None,
            tuple(headers_of(area, int(table.headers_pos[i]), hc)) if hc else (),
        ))
    return out


def iter_batches(buf: np.ndarray, *, start: int = 0, end: int | None = None, check_crc: bool = True,
                 file: str | None = None, strict: bool = True) -> Iterator[DecodedBatch]:
    """Every batch of ``buf[start:end]`` with its records, up to the first bad one.

    The batches before a CRC mismatch, a torn tail or a foreign magic are yielded first (as
    Kafka's DumpLogSegments prints them); then ``strict`` raises the specific error naming the
    position, and non-strict iteration just stops there, as Kafka's readers do at a torn tail.
    """
    table = scan_batches(buf, start, end)
    bad_row = first_crc_mismatch(buf, table) if check_crc else -1
    good = bad_row if bad_row >= 0 else len(table)
    for row in range(good):
        header = header_of(table, row)
        position = int(table.position[row])
        try:
            records = decode_records(buf, position, header)
        except CorruptRecordError as e:
            raise e.in_file(file, 0) if file else e from None
        yield DecodedBatch(position, header, records)
    if not strict:
        return
    if bad_row >= 0:
        ensure_valid(buf, table, file)  # raises CrcMismatchError with both CRCs and the position
    if table.stop_reason != ScanStop.END:
        cls = {ScanStop.BAD_MAGIC: BadMagicError, ScanStop.BAD_SIZE: ShortBatchError}.get(
            table.stop_reason, LengthPastEndError)
        detail = "the data ends inside a batch" if table.stop_reason == ScanStop.SHORT_TAIL else ""
        raise cls(table.stop_position, detail, file)


def read_records(data: bytes | bytearray | memoryview) -> list[Record]:
    """All records of a buffer of whole batches (tests, tools)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    return [r for batch in iter_batches(buf) for r in batch.records]
