"""Reading the keys of one chunk of a segment (the map side of the Spark job; no pyspark here).

A chunk is a run of whole batches of one segment's ``.log`` ([start position, end position)),
read by path by a Python worker (the file is mapped; Spark never carries its bytes). Every
keyed record of a data batch whose offset lies in [lo, hi) is emitted as

    column   type     value
    key      bytes    the record's key, all of its bytes (no hash: equal keys are equal bytes)
    offset   int64    the record's offset

Skipped: control batches, and the batches whose positions the plan lists (aborted transactional
data, as map_builder.MapBuilder.batch_modes finds them). Compressed batches are decompressed a
window (WINDOW_BYTES of source) at a time. The compiled loop writes the keys of a window into
one byte buffer with int32 offsets, the layout of an Arrow binary column, so the caller wraps
the three arrays without copying them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..aot import kernel
from ..cleaner.segment_view import SegmentView, record_areas
from ..log.segment import LogSegment
from ..records.batch_format import CONTROL_FLAG
from ..records.scan import walk_error
from ..records.scan_kernels import ERR_EXTRA_BYTES, ERR_NONE, ERR_TOO_FEW_RECORDS, record_key

WINDOW_BYTES = 16 * 1024 * 1024


class KeyColumns(NamedTuple):
    """Keys as an Arrow binary column's buffers (``data``, ``starts``: n + 1 int32) and offsets."""

    data: npt.NDArray[np.uint8]
    starts: npt.NDArray[np.int32]
    offsets: npt.NDArray[np.int64]

    @property
    def rows(self) -> int:
        return int(self.offsets.shape[0])

    def key(self, i: int) -> bytes:
        return bytes(self.data[int(self.starts[i]):int(self.starts[i + 1])])


@kernel("u1[], u1[], b[], i8[], i8[], i4[], i8[], b[], i8, i8, u1[], i4[], i8[] -> (i8, i8, i8, i8, i8, i8)")
def extract_kernel(  # type: ignore[no-untyped-def]
    buf, dbuf, in_dbuf, area_start, area_end, record_count, base_offset, skip, lo, hi,
    key_data, key_starts, offsets,
):
    """Keys and offsets of the keyed records with lo <= offset < hi; returns
    (error, error position, error row, detail, records written, key bytes written)."""
    n = 0
    w = 0
    key_starts[0] = 0
    for r in range(area_start.shape[0]):
        if skip[r]:
            continue
        src = dbuf if in_dbuf[r] else buf
        p = area_start[r]
        e = area_end[r]
        base = base_offset[r]
        for j in range(record_count[r]):
            if p >= e:
                return ERR_TOO_FEW_RECORDS, p, r, np.int64(j), n, w
            err, detail, rec_end, delta, q, key_len = record_key(src, p, e)
            if err != ERR_NONE:
                return err, p, r, detail, n, w
            offset = base + delta
            if key_len >= 0 and lo <= offset < hi:
                key_data[w:w + key_len] = src[q:q + key_len]
                w += key_len
                offsets[n] = offset
                n += 1
                key_starts[n] = w
            p = rec_end
        if p != e:
            return ERR_EXTRA_BYTES, p, r, e - p, n, w
    return ERR_NONE, np.int64(0), np.int64(-1), np.int64(0), n, w


def extract_keys(segment: LogSegment, start_position: int, end_position: int, lo: int, hi: int,
                 skip_positions: npt.NDArray[np.int64]) -> Iterator[KeyColumns]:
    """The keys of the chunk [start_position, end_position) of ``segment``, a window at a time."""
    with SegmentView(segment, start_position, end_position) as view:
        t = view.table
        if t.count == 0:
            return
        skip_all = (t.attributes & CONTROL_FLAG) != 0
        if skip_positions.size:
            skip_all |= np.isin(t.position, skip_positions)
        for a, b in view.windows(WINDOW_BYTES):
            skip = skip_all[a:b]
            areas = record_areas(view, a, b, skip=skip)
            live = ~skip
            n_max = int(t.record_count[a:b][live].sum(dtype=np.int64))
            bytes_max = int((areas.end - areas.start)[live].sum())
            key_data = np.empty(max(bytes_max, 1), dtype=np.uint8)
            key_starts = np.empty(n_max + 1, dtype=np.int32)
            offsets = np.empty(n_max, dtype=np.int64)
            err, err_pos, err_row, detail, n, w = extract_kernel(
                view.buf, areas.dbuf, areas.in_dbuf, areas.start, areas.end, t.record_count[a:b],
                t.base_offset[a:b], skip, np.int64(lo), np.int64(hi), key_data, key_starts, offsets)
            if err:
                row = int(err_row)
                where = int(t.position[a + row]) if areas.in_dbuf[row] else int(err_pos)
                raise walk_error(int(err), where, a + row, int(detail)).in_file(view.path)
            if n:
                yield KeyColumns(key_data[:int(w)], key_starts[:int(n) + 1], offsets[:int(n)])
