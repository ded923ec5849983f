"""Copying a group's source segments into a cleaned segment (Kafka's Cleaner.cleanInto + MemoryRecords.filterTo).

Per batch, in offset order (vectorised over the header columns; transactional and control
batches also go through txn.py, one Python step each):

1. ``can_discard``: aborted transactional data, or a marker whose transaction left no data
   (txn.py). A control batch's records are discarded when it can be discarded and its delete
   horizon has passed; a data batch's when it can be discarded.
2. Retention of the batch: kept even if empty (a header-only batch) when it holds the last data
   offset of an active producer, or is the marker carrying an active producer's epoch when that
   producer has no data batch of it (producers.py), or when it ends exactly at the round's upper
   bound; otherwise deleted without reading when its records are discarded, else dropped if it
   ends up empty.
3. Its records are kept or not by the rules of filter_kernels.decide_kernel, asking the offset
   map (an ``OffsetMap``) or, for a round whose keys were grouped exactly elsewhere (the Spark
   job), ``ExactDecisions`` (exact.py) which offset is the latest of a key.
4. Output: the original bytes when every record stayed and nothing needs a delete horizon;
   otherwise the batch rebuilt (same base offset, last offset, producer fields, leader epoch,
   codec) from its kept records, stamped with ``now + delete.retention.ms`` as its delete horizon
   when it keeps a tombstone or is a marker whose transaction left no data and has no horizon
   yet; a header-only batch when nothing stayed but the batch must; nothing otherwise.

Byte-for-byte notes: an original batch is copied as is; a rebuilt record copies its key, value and
headers bytes verbatim (what Kafka's re-encoding writes when the source varints are minimal, as
every Kafka writer emits them); a rebuilt compressed batch is compressed by records/compression.py
(a block Kafka reads; not necessarily the bytes Java's compressor libraries would produce).

Every source batch's CRC is checked before use, by decide_kernel (Kafka does not; a corrupt
batch stops the round instead of being copied). Written headers get their CRC here (CRC-32C from
byte 21); rebuilt compressed batches are compressed here. Windows of at most WINDOW_BYTES source
bytes are appended to the destination one at a time, after an abort check (``check_done``) and
through the throttler.

Two threads: windows' records are decided ahead (``_decide``: decompression, decide_kernel, which
only reads the map) on a helper thread, and by the cleaner's thread rather than wait (ahead.py);
the cleaner's thread writes the decided windows in order (``_assemble``: assemble_kernel, CRCs,
compression; then the append, to the destination the caller chooses knowing the window's
output). The two halves of the pass overlap on two cores: the windows of all the group's sources
are one stream, so the next source is decided while this one is written even
when each source is a single window (Kafka's 1 MiB segments).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..index.txn_index import AbortedTxn
from ..log.segment import AppendedBatch, LogSegment
from ..records import batch_format as bf
from ..records.batch import crc32c, crc_mismatch
from ..records.codec_pool import codec_map
from ..records.compression import Codec, compress
from ..records.control import control_record_type
from ..records.crc_kernels import HAVE_HW_CRC
from ..records.scan import BatchTable, walk_error
from . import filter_kernels as fk
from .ahead import Ahead
from .exact import ExactDecisions
from .inflated import InflatedBatches
from .offset_map import OffsetMap, fresh_state
from .producers import LastRecord
from .segment_view import RecordAreas, SegmentView, record_areas
from .stats import CleanerStats
from .throttler import Throttler
from .txn import CleanedTransactionMetadata

# what a rebuilt batch keeps of its source's attributes (the delete horizon bit is set anew)
_REBUILT_KEEPS = bf.CODEC_MASK | bf.TIMESTAMP_TYPE_MASK | bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG
WINDOW_BYTES = 16 * 1024 * 1024
_BE32 = struct.Struct(">i")
_BEU32 = struct.Struct(">I")
_NO_TABLE = np.full((1, 3), -1, dtype=np.int64)
_NO_STATE = fresh_state()
_NO_OFFSETS = np.zeros(0, dtype=np.int64)
_NO_BITS = np.zeros(0, dtype=np.uint8)

KeyDecisions = OffsetMap | ExactDecisions
Source = tuple[LogSegment, Iterable[AbortedTxn]]  # a segment to clean and its aborted transactions


class Destination(Protocol):
    """Where cleaned windows go: a LogSegment, or a WindowAppender (appender.py) in front of one."""

    def append(self, batches: Sequence[AppendedBatch], data: memoryview) -> None: ...


@dataclass(frozen=True, eq=False)
class Decisions:
    """The records of a window's batches [lo, hi) decided, for ``SegmentFilter._assemble``: the
    window's rows (filter_kernels.WINDOW_ROW: the header columns they came from and
    decide_kernel's figures), each record's keep flag and position."""

    lo: int
    hi: int
    areas: RecordAreas
    rows: np.ndarray
    keep: np.ndarray
    rec_pos: np.ndarray


@dataclass(frozen=True, eq=False)
class _Source:
    """A source segment opened for cleaning, with its batches' modes (``_batch_modes``)."""

    view: SegmentView
    mode: np.ndarray
    marker_for_empty_txn: np.ndarray
    retain_empty: np.ndarray


@dataclass(frozen=True, eq=False)
class _Window:
    """The batches [lo, hi) of a source of group ``group``; ``last`` for the source's last window,
    ``first`` for the group's first."""

    group: int
    source: _Source
    lo: int
    hi: int
    last: bool
    first: bool


class SegmentFilter:
    def __init__(self, *, now_ms: int, delete_retention_ms: int, check_done: Callable[[], None],
                 throttler: Throttler | None = None, inflated: InflatedBatches | None = None) -> None:
        self.inflated = inflated  # batches the map's build decompressed (inflated.py)
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.check_done = check_done
        self.throttler = throttler

    def clean_groups_into(self, groups: Sequence[Sequence[Source]], dest_for: Callable[[int, int], Destination],
                          finish: Callable[[int, list[AbortedTxn]], None], offset_map: KeyDecisions,
                          txns: CleanedTransactionMetadata, last_records: dict[int, LastRecord],
                          upper_bound: int, stats: CleanerStats) -> None:
        """Each group's source segments, in order, cleaned into the destination
        ``dest_for(g, dropped)`` returns, called when the group's first window is cleaned, before
        it is appended (``dropped``: the bytes its cleaning removed), or with 0 when the group has
        no window, before it is finished; ``finish(g, aborted)`` after its last, with the aborted
        transactions its cleaned segment must index. Each source's aborted transactions are added
        to ``txns`` before its batches are read.

        The windows of all the groups are one stream (ahead.py): the next window is decided while
        this one is written, across sources and groups, however small the segments are."""
        opened: list[SegmentView] = []
        kept: list[list[AbortedTxn]] = []  # each group's, filled as its sources are read

        def windows() -> Iterator[_Window]:  # drawn in order, by either thread (ahead.py)
            for g, sources in enumerate(groups):
                first = True
                kept.append([])
                txns.kept_aborted = kept[g]
                for seg, aborted in sources:
                    txns.add_aborted_transactions(aborted)
                    view = SegmentView(seg)
                    opened.append(view)
                    view.__enter__()
                    if view.count == 0:
                        view.close()
                        continue
                    source = _Source(view, *self._batch_modes(view, txns, last_records, upper_bound))
                    spans = list(view.windows(WINDOW_BYTES))
                    for i, (lo, hi) in enumerate(spans):
                        yield _Window(g, source, lo, hi, last=i == len(spans) - 1, first=first)
                        first = False

        def decide(w: _Window) -> tuple[_Window, Decisions]:  # on the helper thread
            return w, self._decide(w.source.view, w.lo, w.hi, w.source.mode[w.lo:w.hi], offset_map)

        group = -1
        dest: Destination | None = None

        def reach(g: int, dropped: int) -> None:
            """Finish the groups before ``g`` (every window of theirs is written) and open ``g``."""
            nonlocal group, dest
            while group < g:
                if group >= 0:
                    finish(group, kept[group])
                group += 1
                dest = dest_for(group, dropped if group == g else 0) if group < len(groups) else None

        try:
            with Ahead(decide, windows(), name="cleaning-decisions") as decided:
                for w, d in decided:
                    self.check_done()
                    src, lo, hi = w.source, w.lo, w.hi
                    batches, data, read = self._assemble(src.view, d, src.mode[lo:hi],
                                                         src.marker_for_empty_txn[lo:hi], src.retain_empty[lo:hi],
                                                         stats)
                    reach(w.group, read - len(data))
                    assert dest is not None
                    if batches:
                        dest.append(batches, data)
                    if self.throttler is not None:
                        self.throttler.maybe_throttle(read)
                        if len(data):
                            self.throttler.maybe_throttle(len(data))
                    if w.last:
                        src.view.close()  # written: release the mapping now
            reach(len(groups), 0)  # the stream is drawn to its end: every group's list is whole
        finally:
            for view in opened:
                view.close()

    # ------------------------------------------------------------------ batch decisions
    def _batch_modes(self, view: SegmentView, txns: CleanedTransactionMetadata,
                     last_records: dict[int, LastRecord],
                     upper_bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = view.table
        attrs = t.attributes.astype(np.int64)
        is_control = (attrs & bf.CONTROL_FLAG) != 0
        can_discard = self.read_transactions(view, txns)
        has_horizon = (attrs & bf.DELETE_HORIZON_FLAG) != 0
        horizon_passed = has_horizon & (t.base_timestamp <= self.now_ms)
        discard_records = np.where(is_control, can_discard & horizon_passed, can_discard)
        retain_empty = ((t.producer_id >= 0) & self._is_last_of_producer(t, is_control, last_records)) | (
            t.last_offset + 1 == upper_bound)
        mode = np.full(t.count, fk.FILTER_DATA, dtype=np.int8)
        mode[is_control] = fk.FILTER_CONTROL
        mode[discard_records] = fk.FILTER_DISCARD
        mode[discard_records & ~retain_empty] = fk.FILTER_DELETE
        return mode, can_discard & is_control, retain_empty

    @staticmethod
    def read_transactions(view: SegmentView, txns: CleanedTransactionMetadata) -> np.ndarray:
        """Walk the transactional and control batches of ``view`` through ``txns`` (in offset
        order); True for each batch that may be discarded. The Spark job replays this to know the
        transaction state at the start of each group of segments."""
        t = view.table
        attrs = t.attributes.astype(np.int64)
        can_discard = np.zeros(t.count, dtype=bool)
        for row in np.flatnonzero(attrs & (bf.TRANSACTIONAL_FLAG | bf.CONTROL_FLAG)).tolist():
            pid, last = int(t.producer_id[row]), int(t.last_offset[row])
            if attrs[row] & bf.CONTROL_FLAG:
                raw = view.raw(int(t.position[row]), int(t.size[row]))
                ctype = control_record_type(raw, int(attrs[row]), int(t.record_count[row]))
                can_discard[row] = txns.on_control_batch_read(pid, last, ctype)
            else:
                can_discard[row] = txns.on_batch_read(pid, last, True)
        return can_discard

    @staticmethod
    def _is_last_of_producer(t: BatchTable, is_control: np.ndarray,
                             last_records: dict[int, LastRecord]) -> np.ndarray:
        if not last_records:
            return np.zeros(t.count, dtype=bool)
        pids = np.array(sorted(last_records), dtype=np.int64)
        data = np.array([-1 if last_records[p].last_data_offset is None else last_records[p].last_data_offset
                         for p in pids.tolist()], dtype=np.int64)
        has_data = np.array([last_records[p].last_data_offset is not None for p in pids.tolist()], dtype=bool)
        epochs = np.array([last_records[p].producer_epoch for p in pids.tolist()], dtype=np.int64)
        pid = t.producer_id
        idx = np.minimum(np.searchsorted(pids, pid), pids.size - 1)
        found = pids[idx] == pid
        by_data = has_data[idx] & (t.last_offset == data[idx])
        by_epoch = ~has_data[idx] & is_control & (t.producer_epoch.astype(np.int64) == epochs[idx])
        last: np.ndarray = found & (by_data | by_epoch)
        return last

    # ------------------------------------------------------------------ one window
    def _decide(self, view: SegmentView, lo: int, hi: int, mode: np.ndarray, offset_map: KeyDecisions) -> Decisions:
        """decide_kernel over the window [lo, hi): which records stay (reads the map only)."""
        t = view.table
        areas = record_areas(view, lo, hi, skip=mode == fk.FILTER_DELETE, take_from=self.inflated)
        rows = np.zeros(hi - lo, dtype=fk.WINDOW_ROW)
        for field, column in (("position", t.position), ("size", t.size), ("crc", t.crc),
                              ("record_count", t.record_count), ("base_offset", t.base_offset),
                              ("last_offset_delta", t.last_offset_delta), ("base_ts", t.base_timestamp),
                              ("max_ts", t.max_timestamp), ("leader_epoch", t.partition_leader_epoch),
                              ("attributes", t.attributes), ("producer_id", t.producer_id),
                              ("producer_epoch", t.producer_epoch), ("base_sequence", t.base_sequence)):
            rows[field] = column[lo:hi]
        rows["in_dbuf"] = areas.in_dbuf
        rows["area_start"] = areas.start
        rows["area_end"] = areas.end
        rows["mode"] = mode
        attrs = rows["attributes"]
        rows["log_append_time"] = (attrs & bf.TIMESTAMP_TYPE_MASK) != 0
        rows["horizon"] = np.where((attrs & bf.DELETE_HORIZON_FLAG) != 0, rows["base_ts"], -1)
        counts_read = np.where(mode == fk.FILTER_DELETE, 0, rows["record_count"])
        np.cumsum(counts_read[:-1], out=rows["keep_base"][1:])
        keep = np.zeros(int(counts_read.sum()), dtype=np.bool_)
        rec_pos = np.empty(keep.shape[0], dtype=np.int64)  # where each record starts (decide -> assemble)
        lookup = np.zeros(1, dtype=fk.LOOKUP)
        lookup["latest"] = offset_map.latest_offset
        lookup["now"] = self.now_ms
        if isinstance(offset_map, ExactDecisions):
            lookup["exact"] = True
            lookup["first_dirty"] = offset_map.first_dirty_offset
            table, state, bits = _NO_TABLE, _NO_STATE, _NO_BITS
            kept_offsets, superseded = offset_map.kept, offset_map.superseded
        else:
            table, state, bits = offset_map.views()
            kept_offsets, superseded = _NO_OFFSETS, _NO_OFFSETS
        err, err_pos, err_row, detail = fk.decide_kernel(
            view.buf, areas.dbuf, rows, lookup, keep, rec_pos, table, state, bits, kept_offsets, superseded)
        if err == fk.ERR_CRC:
            raise crc_mismatch(int(err_pos), int(t.crc[lo + int(err_row)]), int(detail)).in_file(view.path)
        if err:
            row = int(err_row)
            where = int(t.position[lo + row]) if areas.in_dbuf[row] else int(err_pos)
            raise walk_error(int(err), where, lo + row, int(detail)).in_file(view.path)
        return Decisions(lo, hi, areas, rows, keep, rec_pos)

    def _assemble(self, view: SegmentView, d: Decisions, mode: np.ndarray, marker_empty_txn: np.ndarray,
                  retain_empty: np.ndarray, stats: CleanerStats) -> tuple[list[AppendedBatch], memoryview, int]:
        """The window's batches by their actions (assemble_kernel): the batches to append, their
        bytes, and the bytes of the window read."""
        rows = d.rows
        attrs, max_ts, horizon = rows["attributes"], rows["max_ts"], rows["horizon"]
        n_read, n_kept, counts, sizes = rows["n_read"], rows["n_kept"], rows["record_count"], rows["size"]
        retained = n_kept > 0
        has_horizon = (attrs & bf.DELETE_HORIZON_FLAG) != 0
        need_horizon = (rows["has_tombstone"] | marker_empty_txn) & ~has_horizon
        original = retained & (n_kept == n_read) & ~need_horizon
        action = np.full(rows.shape[0], fk.ACTION_DROP, dtype=np.int8)
        action[retained] = fk.ACTION_REBUILD
        action[original] = fk.ACTION_ORIGINAL
        action[~retained & retain_empty & (mode != fk.FILTER_DELETE)] = fk.ACTION_EMPTY
        rows["action"] = action
        new_horizon = np.where(need_horizon, self.now_ms + self.delete_retention_ms, horizon)
        rows["new_base_ts"] = np.where(new_horizon >= 0, new_horizon, rows["first_kept_ts"])
        rows["new_attributes"] = (attrs & _REBUILT_KEEPS) | np.where(new_horizon >= 0, bf.DELETE_HORIZON_FLAG, 0)
        new_max_ts = np.where(rows["log_append_time"], max_ts, rows["kept_max_ts"])
        rows["new_max_ts"] = new_max_ts
        rebuilt_bound = bf.HEADER_SIZE + (rows["area_end"] - rows["area_start"]) + fk.MAX_RECORD_GROWTH * counts
        bound = (np.where(action == fk.ACTION_ORIGINAL, sizes, 0)
                 + np.where(action == fk.ACTION_EMPTY, bf.HEADER_SIZE, 0)
                 + np.where(action == fk.ACTION_REBUILD, rebuilt_bound, 0))
        out = np.empty(int(bound.sum()), dtype=np.uint8)
        written = fk.assemble_kernel(view.buf, d.areas.dbuf, rows, d.keep, d.rec_pos, out)
        data = self._finish(out[:int(written)], rows)

        stats.read_messages(int(n_read.sum()), int(sizes.sum()))
        stats.invalid_messages(int(rows["n_invalid"].sum()))
        kept_rows = np.flatnonzero(action != fk.ACTION_DROP)
        if not kept_rows.size:
            return [], data, int(sizes.sum())
        last_offsets = (rows["base_offset"] + rows["last_offset_delta"])[kept_rows].tolist()
        maxes = np.where(action == fk.ACTION_REBUILD, new_max_ts, max_ts)[kept_rows].tolist()
        out_sizes = rows["out_size"][kept_rows].tolist()
        stats.recopy_messages(int(n_kept[kept_rows].sum()), len(data))
        return [AppendedBatch(lst, mts, sz) for lst, mts, sz in zip(last_offsets, maxes, out_sizes)], data, \
            int(sizes.sum())

    @staticmethod
    def _finish(out: np.ndarray, rows: np.ndarray) -> memoryview:
        """CRCs of the written headers; rebuilt compressed batches compressed (sizes updated in
        ``rows``)."""
        view = out.data
        action, out_pos, out_size = rows["action"], rows["out_pos"], rows["out_size"]
        codecs = rows["attributes"] & bf.CODEC_MASK
        rebuilt_compressed = (action == fk.ACTION_REBUILD) & (codecs != 0)
        plain = np.flatnonzero(((action == fk.ACTION_EMPTY) | (action == fk.ACTION_REBUILD)) & ~rebuilt_compressed)
        if HAVE_HW_CRC:
            fk.fill_crcs(out, rows, plain)
        else:
            for r in plain.tolist():
                p, s = int(out_pos[r]), int(out_size[r])
                _BEU32.pack_into(view, p + bf.CRC_OFFSET, crc32c(view[p + bf.ATTRIBUTES_OFFSET:p + s]))
        compressed = np.flatnonzero(rebuilt_compressed).tolist()
        if not compressed:
            return view
        parts: list[bytes | memoryview] = []
        cursor = 0
        bodies = codec_map(lambda r: compress(Codec(int(codecs[r])),  # on every core (records/codec_pool.py)
                                              view[int(out_pos[r]) + bf.HEADER_SIZE:int(out_pos[r] + out_size[r])]),
                           compressed)
        for r, body in zip(compressed, bodies, strict=True):
            p, s = int(out_pos[r]), int(out_size[r])
            parts.append(view[cursor:p])
            header = bytearray(view[p:p + bf.HEADER_SIZE])
            _BE32.pack_into(header, bf.LENGTH_OFFSET, bf.MIN_BATCH_LENGTH + len(body))
            _BEU32.pack_into(header, bf.CRC_OFFSET, crc32c(bytes(header[bf.ATTRIBUTES_OFFSET:]) + body))
            parts += [bytes(header), body]
            out_size[r] = bf.HEADER_SIZE + len(body)
            cursor = p + s
        parts.append(view[cursor:])
        return memoryview(b"".join(parts))
