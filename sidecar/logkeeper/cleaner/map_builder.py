"""Building the offset map of a dirty section (Kafka's Cleaner.buildOffsetMap).

For the dirty segments of [start, end), in order, from the offset-index position of ``start``
in each: control batches and the transaction index's aborted data are counted but not mapped
(see txn.py); every keyed record at or above ``start`` goes into the map (the compiled loops of
map_kernel.py: windows are parsed and hashed ahead, on a helper thread and by the cleaner's
thread while it would wait, cleaner/ahead.py, in one stream across the segments; the cleaner's
thread puts them into the table in order). When the map reaches its load factor the round
stops there: the map is partial and its latest offset (the last offset mapped, or the last
whole batch's) bounds the round. After each whole segment the latest offset moves to the next
segment's base - 1 (or ``end`` - 1), so a gap of missing offsets does not hold the cleaner back.

Statistics as Kafka counts them: records read while mapping; bytes read, counted by read-buffer
chunks of ``io_buffer_size`` bytes (a chunk ends before the first batch that does not fit; a
batch larger than the buffer doubles it until it fits, up to the larger of max.message.bytes
and the cleaner's limit, for the rest of the segment); the chunk in which the map fills is not
counted, as Kafka returns before counting it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import CorruptRecordError
from ..log.log import Log
from ..records.batch_format import CONTROL_FLAG, MIN_RECORD_SIZE, TRANSACTIONAL_FLAG
from ..records.control import control_record_type
from ..records.scan import walk_error
from ..records.scan_kernels import ERR_NONE
from . import map_kernel as mk
from .ahead import Ahead
from .inflated import InflatedBatches
from .offset_map import OffsetMap
from .segment_view import RecordAreas, SegmentView, record_areas
from .stats import CleanerStats
from .throttler import Throttler
from .txn import CleanedTransactionMetadata, collect_aborted

WINDOW_BYTES = 16 * 1024 * 1024

CheckDone = Callable[[], None]


@dataclass(frozen=True, eq=False)
class _DirtySegment:
    """A dirty segment opened for the build: its view, its batches' map modes, the next one's base."""

    view: SegmentView
    mode: np.ndarray
    next_start: int


@dataclass(frozen=True, eq=False)
class _Window:
    """The batches [lo, hi) of a dirty segment; ``last`` for its last window."""

    segment: _DirtySegment
    lo: int
    hi: int
    last: bool


@dataclass(frozen=True, eq=False)
class HashedWindow:
    """A window with its record areas and hash_kernel's rows; ``rows`` batches parsed, and the
    error of the next one when ``error`` is not ERR_NONE."""

    window: _Window
    areas: RecordAreas
    rows_view: npt.NDArray[np.void]  # the window's MAP_ROW view (map_kernel.py)
    hashed: npt.NDArray[np.int64]
    rows: int
    error: int
    error_position: int
    detail: int


class MapBuilder:
    def __init__(self, *, io_buffer_size: int, max_io_buffer_size: int, load_factor: float,
                 check_done: CheckDone, throttler: Throttler | None = None,
                 inflated: InflatedBatches | None = None) -> None:
        self.inflated = inflated  # keeps what the build decompresses for the round's cleaning pass
        self.io_buffer_size = io_buffer_size
        self.max_io_buffer_size = max_io_buffer_size
        self.load_factor = load_factor
        self.check_done = check_done
        self.throttler = throttler

    def build(self, log: Log, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats) -> None:
        dirty = log.segments.values(start, end)
        next_starts = [s.base_offset for s in dirty[1:]] + [end]
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(collect_aborted(log, start, end))
        positions = [seg.start_position(start) for seg in dirty]
        # The table is sized for the keyed records that may go into the map, bounded without
        # reading a byte: by the offsets each dirty segment spans (dense, as appended) and, for
        # sparse offsets, by its bytes (a record takes at least MIN_RECORD_SIZE).
        max_keys = sum(min(nxt - max(start, seg.base_offset), (seg.size_in_bytes - position) // MIN_RECORD_SIZE + 1)
                       for seg, position, nxt in zip(dirty, positions, next_starts))
        offset_map.prepare(max_keys, start, end)
        _table, state, _bits = offset_map.views()  # its secret stays for the round (grow keeps it)
        opened: list[SegmentView] = []

        def windows() -> Iterator[_Window]:  # drawn in order, by either thread (ahead.py)
            for seg, position, next_start in zip(dirty, positions, next_starts):
                view = SegmentView(seg, position)
                opened.append(view)
                view.__enter__()
                segment = _DirtySegment(view, self.batch_modes(view, txns), next_start)
                spans = list(view.windows(WINDOW_BYTES)) or [(0, 0)]  # an empty segment still ends
                for i, (lo, hi) in enumerate(spans):
                    yield _Window(segment, lo, hi, last=i == len(spans) - 1)

        def hash_window(w: _Window) -> HashedWindow:  # on the helper thread
            return self._hash_window(w, start, state, self.inflated)

        try:
            # One stream of windows over every dirty segment: the next segment is parsed and hashed
            # while this one's hashes go into the table, however small the segments are.
            with Ahead(hash_window, windows(), name="offset-map-hashing") as hashed:
                for w in hashed:
                    self.check_done()
                    view = w.window.segment.view
                    full_row = self._put_window(view, w, offset_map, start, stats)
                    if full_row >= 0:
                        stats.index_bytes_read(self._chunk_bytes(view, log, full_row))
                        return
                    if w.window.last:
                        stats.index_bytes_read(self._chunk_bytes(view, log, -1))
                        offset_map.update_latest_offset(w.window.segment.next_start - 1)
                        view.close()  # its windows are all put: release the mapping now
        finally:
            for view in opened:
                view.close()

    @staticmethod
    def batch_modes(view: SegmentView, txns: CleanedTransactionMetadata) -> np.ndarray:
        """Per batch of ``view``: data, aborted data or control (map_kernel's modes), walking the
        transactional batches through ``txns``. The Spark job maps the same batches."""
        t = view.table
        mode = np.where(t.attributes & CONTROL_FLAG, mk.MAP_CONTROL, mk.MAP_DATA).astype(np.int8)
        for row in np.flatnonzero(t.attributes & (TRANSACTIONAL_FLAG | CONTROL_FLAG)).tolist():
            pid, last, attributes = int(t.producer_id[row]), int(t.last_offset[row]), int(t.attributes[row])
            if attributes & CONTROL_FLAG:
                raw = view.raw(int(t.position[row]), int(t.size[row]))
                txns.on_control_batch_read(pid, last, control_record_type(raw, attributes, int(t.record_count[row])))
            elif txns.on_batch_read(pid, last, True):
                mode[row] = mk.MAP_ABORTED
        return mode

    @staticmethod
    def _hash_window(w: _Window, start: int, state: npt.NDArray[np.void],
                     inflated: InflatedBatches | None = None) -> HashedWindow:
        """Parse the window's batches and hash their keys (hash_kernel; no GIL; of the map only
        its secret, in ``state``)."""
        view, mode, lo, hi = w.segment.view, w.segment.mode[w.lo:w.hi], w.lo, w.hi
        t = view.table
        skip = mode != mk.MAP_DATA
        areas = record_areas(view, lo, hi, skip=skip, keep_into=inflated)
        rows_view = mk.rows_of(areas, t.record_count[lo:hi], t.base_offset[lo:hi], t.last_offset[lo:hi], mode)
        if lo == hi:  # an empty segment's one window
            return HashedWindow(w, areas, rows_view, np.empty((0, 3), dtype=np.int64), 0, ERR_NONE, 0, 0)
        hashed = np.empty((mk.hashed_rows(rows_view), 3), dtype=np.int64)
        rows, _, err, err_pos, detail = mk.hash_kernel(view.buf, areas.dbuf, rows_view, start, state, hashed)
        return HashedWindow(w, areas, rows_view, hashed, int(rows), int(err), int(err_pos), int(detail))

    def _put_window(self, view: SegmentView, w: HashedWindow, offset_map: OffsetMap, start: int,
                    stats: CleanerStats) -> int:
        """Put a hashed window into the table in offset order; the row where the map filled, or -1."""
        t = view.table
        lo, hi = w.window.lo, w.window.hi
        if lo == hi:
            return -1
        row, rec = 0, 0
        while True:
            table, state, superseded = offset_map.views()  # again after a grow: a new table
            status, row, rec, counted = mk.put_kernel(w.rows_view, row, w.rows, rec, start, w.hashed, table, state,
                                                      superseded)
            stats.index_messages_read(int(counted))
            if status == mk.NEED_GROW:
                offset_map.grow()
                continue
            break
        if status != mk.FULL and w.error != ERR_NONE:  # a full map stopped before the bad batch
            raise self._error(view, bool(w.areas.in_dbuf[w.rows]), lo + w.rows, w.error, w.error_position,
                              w.detail)
        if self.throttler is not None:
            self.throttler.maybe_throttle(int(t.position[hi - 1] + t.size[hi - 1] - t.position[lo]))
        return lo + int(row) if status == mk.FULL else -1

    def _chunk_bytes(self, view: SegmentView, log: Log, full_row: int) -> int:
        """Bytes Kafka counts: whole read chunks, up to the one where the map filled."""
        t = view.table
        n = t.count if full_row < 0 else full_row
        if n == 0:
            return 0
        if full_row < 0:
            return int(t.position[-1] + t.size[-1] - t.position[0])
        ends = t.position + t.size.astype(np.int64)
        capacity = self.io_buffer_size
        topic_max = log.config.max_message_bytes
        row, counted = 0, 0
        while row < t.count:
            chunk_start = int(t.position[row])
            end_row = int(np.searchsorted(ends, chunk_start + capacity, side="right"))
            if end_row == row:  # the next batch is larger than the buffer: Kafka grows it
                max_size = int(t.size[row]) if capacity >= topic_max else topic_max
                capacity = min(capacity * 2, max(max_size, self.max_io_buffer_size))
                continue
            if end_row > full_row:
                break
            counted += int(ends[end_row - 1]) - chunk_start
            row = end_row
        return counted

    @staticmethod
    def _error(view: SegmentView, in_dbuf: bool, row: int, code: int, pos: int, detail: int) -> CorruptRecordError:
        where = pos if not in_dbuf else int(view.table.position[row])
        err = walk_error(code, where, row, detail)
        return err.in_file(view.path)

