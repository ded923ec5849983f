"""`logkeeper dump-log FILE...`: segment and index files as text, in the manner of Kafka's
DumpLogSegments, or as JSON lines.

Text (``.log``): one line a batch (``baseOffset: ... crc: ... isvalid: true``); with
``--deep-iteration`` also one ``| offset: ...`` line a record, with keys and payloads.
``.index``: ``offset: O position: P`` lines; ``.timeindex``: ``timestamp: T offset: O`` lines.

``--json`` (``.log`` only): one JSON object a record: offset, timestamp, key and value as base64
(null when null), headers ([{key, value}], value base64 or null), and the batch's baseOffset,
compression, isTransactional, isControl, producerId.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from pathlib import Path
from typing import TextIO

import numpy as np

from ..errors import CorruptRecordError
from ..log import names
from ..records.batch import TimestampType
from ..records.builder import Record
from ..records.reader import DecodedBatch, decode_records, header_of
from ..records.scan import ScanStop, first_crc_mismatch, scan_batches
from .verify import STOP_REASONS

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


def record_json(batch: DecodedBatch, record: Record) -> dict[str, object]:
    h = batch.header
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers],
        "baseOffset": h.base_offset,
        "compression": CODEC_NAMES.get(h.codec, str(h.codec)),
        "isTransactional": h.is_transactional,
        "isControl": h.is_control,
        "producerId": h.producer_id,
    }


def _batch_line(b: DecodedBatch, *, valid: bool = True) -> str:
    h = b.header
    ts_type = "LogAppendTime" if h.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    horizon = f"OptionalLong[{h.delete_horizon_ms}]" if h.has_delete_horizon else "OptionalLong.empty"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
        f"deleteHorizonMs: {horizon} position: {b.position} {ts_type}: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {CODEC_NAMES.get(h.codec, h.codec)} crc: {h.crc} "
        f"isvalid: {str(valid).lower()}"
    )


def _record_line(b: DecodedBatch, r: Record, i: int) -> str:
    h = b.header
    ts_type = "LogAppendTime" if h.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    seq = -1 if h.base_sequence < 0 else (h.base_sequence + (r.offset - h.base_offset)) % (1 << 31)
    key_size = -1 if r.key is None else len(r.key)
    value_size = -1 if r.value is None else len(r.value)
    line = (f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {key_size} valueSize: {value_size} "
            f"sequence: {seq} headerKeys: [{','.join(k for k, _ in r.headers)}]")
    if h.is_control and r.key is not None and len(r.key) >= 4:
        ctype = struct.unpack_from(">h", r.key, 2)[0]
        kind = {0: "ABORT", 1: "COMMIT"}.get(ctype, f"type {ctype}")
        epoch = struct.unpack_from(">i", r.value, 2)[0] if r.value is not None and len(r.value) >= 6 else -1
        return f"{line} endTxnMarker: {kind} coordinatorEpoch: {epoch}"
    # as Kafka's DumpLogSegments: a null key or value is left out, not printed as "null"
    if r.key is not None:
        line += f" key: {_text(r.key)}"
    if r.value is not None:
        line += f" payload: {_text(r.value)}"
    return line


def dump_log_file(path: Path, out: TextIO, err: TextIO, *, deep: bool, as_json: bool) -> int:
    """Print every batch; return the number of problems (each one line on ``err``).

    As kafka-dump-log: a batch whose CRC or records are bad is reported (``isvalid: false``)
    and the dump goes on with the next one, which its length field locates; a length or magic
    that cannot be trusted ends the file's dump, as nothing after it can be located.
    """
    data = np.fromfile(path, dtype=np.uint8)
    if not as_json:
        out.write(f"Dumping {path}\n")
        out.write(f"Log starting offset: {names.offset_from_file_name(path.name)}\n")
    table = scan_batches(data, 0, data.shape[0])
    problems = 0
    bad_crc = first_crc_mismatch(data, table)
    for row in range(len(table)):
        batch = DecodedBatch(int(table.position[row]), header_of(table, row), [])
        problem = None
        if row == bad_crc:
            bad_crc = first_crc_mismatch(data, table, row + 1)
            problem = (f"{path} at position {batch.position}: CRC mismatch in the batch at base offset "
                       f"{batch.header.base_offset}")
        else:
            try:
                batch = DecodedBatch(batch.position, batch.header, decode_records(data, batch.position, batch.header))
            except CorruptRecordError as e:
                problem = f"{path} at position {e.position}: {e.fault} in the batch at base offset " \
                          f"{batch.header.base_offset}{': ' + e.detail if e.detail else ''}"
        if problem is not None:
            problems += 1
            err.write(f"logkeeper dump-log: {problem}\n")
        if as_json:
            for r in batch.records:
                out.write(json.dumps(record_json(batch, r)) + "\n")
            continue
        out.write(_batch_line(batch, valid=problem is None) + "\n")
        if deep:
            for i, r in enumerate(batch.records):
                out.write(_record_line(batch, r, i) + "\n")
    if table.stop_reason != ScanStop.END:
        problems += 1
        what = STOP_REASONS.get(table.stop_reason, "unreadable bytes")
        err.write(f"logkeeper dump-log: {path} at position {table.stop_position}: {what}; the rest of the file "
                  f"({data.shape[0] - table.stop_position} bytes) cannot be read as batches\n")
    return problems


def dump_index_file(path: Path, out: TextIO) -> None:
    base = names.offset_from_file_name(path.name)
    out.write(f"Dumping {path}\n")
    data = path.read_bytes()
    if path.name.endswith(names.INDEX_SUFFIX):
        for pos in range(0, len(data) - len(data) % 8, 8):
            rel, position = struct.unpack_from(">ii", data, pos)
            if pos > 0 and rel == 0 and position == 0:
                break  # preallocated tail of an active index
            out.write(f"offset: {base + rel} position: {position}\n")
    else:
        for pos in range(0, len(data) - len(data) % 12, 12):
            ts, rel = struct.unpack_from(">qi", data, pos)
            if pos > 0 and ts == 0 and rel == 0:
                break
            out.write(f"timestamp: {ts} offset: {base + rel}\n")


def dump_file(path: Path, out: TextIO, err: TextIO | None = None, *, deep: bool = False,
              as_json: bool = False) -> int:
    """Dump one file (its kind checked by the caller); the number of problems found, each a line
    on ``err`` (default stderr)."""
    err = err if err is not None else sys.stderr
    if path.name.endswith(names.LOG_SUFFIX):
        return dump_log_file(path, out, err, deep=deep, as_json=as_json)
    dump_index_file(path, out)
    return 0
