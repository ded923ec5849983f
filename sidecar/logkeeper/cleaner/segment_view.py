"""A segment's ``.log`` as the cleaner reads it: mapped whole, its batch headers as columns, and
windows of batches whose record areas the compiled loops walk.

The file is mapped read-only (``FileRecords.mapped``: the kernels read it in place; one mapping
of a file version serves the load, the offset map and the cleaning pass). Batches are found with
``records.scan.scan_batches`` from a start position; any stop other than the end of the file
(a torn or corrupt tail, a bad magic or size) is a CorruptRecordError naming the file and
position, as Kafka's cleaner fails on a segment it cannot read to its end.

A window is a run of consecutive batches of at most ``max_bytes`` (at least one batch).
``RecordAreas`` gives each batch of a window its record area: the bytes after the 61-byte header
in the mapping for an uncompressed batch, or its decompressed records, concatenated into one
read-only buffer ``dbuf`` per window, for a compressed one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import numpy.typing as npt

from ..errors import CorruptRecordError
from ..log.segment import LogSegment
from ..records.batch_format import CODEC_MASK, HEADER_SIZE
from ..records.codec_pool import codec_map
from ..records.compression import Codec, decompress
from ..records.scan import BatchTable, ScanStop, scan_batches
from .inflated import InflatedBatches

_EMPTY = np.frombuffer(b"\x00", dtype=np.uint8)

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]


class SegmentView:
    """Context manager: ``buf`` (the mapped file) and ``table`` (its batches from ``start``, up
    to ``end_position`` when given: a batch boundary, or the end of the file)."""

    def __init__(self, segment: LogSegment, start_position: int = 0, end_position: int | None = None) -> None:
        self.segment = segment
        self.path = str(segment.log.path)
        self.size = segment.size_in_bytes
        self.start_position = start_position
        self.end_position = self.size if end_position is None else min(end_position, self.size)
        self._hold = ExitStack()
        self.buf: U8 = _EMPTY
        self.table: BatchTable = scan_batches(np.zeros(0, dtype=np.uint8))

    def __enter__(self) -> SegmentView:
        if self.size > 0:
            self.buf = self._hold.enter_context(self.segment.log.mapped())[:self.size]
        start = min(self.start_position, self.end_position)
        if self.size:
            shared = self._shared_table(start)
            self.table = shared if shared is not None else scan_batches(self.buf, start, self.end_position)
        if self.size and self.table.stop_reason != ScanStop.END:
            reason = self.table.stop_reason.words
            raise CorruptRecordError(
                self.table.stop_position, f"{reason}: the cleaner cannot read the segment to its end",
                self.path)
        return self

    def _shared_table(self, start: int) -> BatchTable | None:
        """For a view of the whole file, the table its log's other readers share (FileRecords.scan)
        when it covers exactly the mapped bytes (not a file grown since the view was made)."""
        if start != 0 or self.end_position != self.size:
            return None
        table = self.segment.log.scan()
        return table if table.stop_position == self.size and table.stop_reason == ScanStop.END else None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.buf = _EMPTY
        self._hold.close()

    @property
    def count(self) -> int:
        return self.table.count

    def windows(self, max_bytes: int, from_row: int = 0) -> Iterator[tuple[int, int]]:
        """(first row, end row) of consecutive batch runs of about ``max_bytes``."""
        n = self.table.count
        if n == 0:
            return
        ends = self.table.position + self.table.size.astype(np.int64)
        row = from_row
        while row < n:
            limit = int(self.table.position[row]) + max_bytes
            end = max(row + 1, int(np.searchsorted(ends, limit, side="right")))
            yield row, min(end, n)
            row = end

    def raw(self, position: int, size: int) -> bytes:
        return bytes(self.buf[position:position + size])


@dataclass(frozen=True, eq=False)
class RecordAreas:
    """Where the records of each batch of a window lie (see the module docstring)."""

    dbuf: U8
    in_dbuf: npt.NDArray[np.bool_]
    start: I64
    end: I64


def record_areas(view: SegmentView, lo: int, hi: int, skip: npt.NDArray[np.bool_] | None = None, *,
                 keep_into: InflatedBatches | None = None, take_from: InflatedBatches | None = None) -> RecordAreas:
    """Record areas of rows [lo, hi); compressed batches are decompressed, except where ``skip``
    (one flag a row of the window) is set. ``keep_into``: the decompressed records are offered to
    it; ``take_from``: a batch's records kept there are used instead of decompressing it
    (inflated.py: the map's build keeps, the cleaning pass takes)."""
    table = view.table
    positions = table.position[lo:hi]
    start = positions + HEADER_SIZE
    end = positions + table.size[lo:hi].astype(np.int64)
    codecs = table.attributes[lo:hi] & CODEC_MASK
    in_dbuf = codecs != 0
    if skip is not None:
        in_dbuf &= ~skip
    rows = np.flatnonzero(in_dbuf)
    if rows.size == 0:
        return RecordAreas(_EMPTY, in_dbuf, start, end)
    cursor = 0
    mm_view = view.buf.data
    row_list = rows.tolist()
    records = view.segment.log

    def inflate(i: int) -> bytes:
        pos = int(positions[i])
        if take_from is not None:
            kept = take_from.take(records, pos)
            if kept is not None:
                return kept
        try:
            return decompress(Codec(int(codecs[i])), mm_view[pos + HEADER_SIZE:int(end[i])], pos)
        except CorruptRecordError as e:
            raise e.in_file(view.path) from None
        except ValueError as e:  # an id that is no codec
            raise CorruptRecordError(pos, str(e), view.path) from None

    parts = codec_map(inflate, row_list)  # on every core (records/codec_pool.py); the first error in row order
    for i, data in zip(row_list, parts, strict=True):
        if keep_into is not None:
            keep_into.keep(records, int(positions[i]), data)
        start[i] = cursor
        cursor += len(data)
        end[i] = cursor
    dbuf = np.frombuffer(b"".join(parts) or b"\x00", dtype=np.uint8)
    return RecordAreas(dbuf, in_dbuf, start, end)
