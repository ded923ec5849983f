"""LogSegment: one ``.log`` file with its offset, time and transaction indexes.

Files (``<base offset, 20 digits>`` + suffix): ``.log`` (batches), ``.index`` (offset ->
position every index.interval.bytes), ``.timeindex`` (max timestamp so far -> offset, at the
same moments), ``.txnindex`` (aborted transactions). A segment holds offsets
[base_offset, base_offset + 2^31 - 1] so that every offset fits in the indexes as an int32 delta.

Index entries follow Kafka: before appending a batch, when more than index.interval.bytes were
appended since the last entry, the batch's LAST offset is paired with the position where the
batch STARTS, and the time index gets the largest timestamp seen so far with its offset.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import CorruptRecordError, LogSegmentOffsetOverflowError
from ..fileio import as_path
from ..index.lazy_index import LazyIndex
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..index.txn_index import TransactionIndex
from ..records.batch_format import HEADER_SIZE
from . import names, segment_recovery
from .file_records import FileRecords, LogOffsetPosition, RecordsSlice, WouldBlock
from .index_plan import IndexPlan, IndexState, plan_index_entries
from .index_rebuild import plan_from_log, refill
from .log_config import LogConfig
from .segment_recovery import RecoveryResult

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1


class AppendedBatch(NamedTuple):
    """What a segment needs to know of each appended batch to keep its indexes."""

    last_offset: int
    max_timestamp: int
    size: int


class FetchData(NamedTuple):
    """Batches read from a segment: their bytes (whole batches, unless read as a slice: then the
    last may be partial) and the first batch's position."""

    position: int
    records: bytes | memoryview | RecordsSlice  # memoryview: read_cached's; RecordsSlice: zero_copy's

    @property
    def first_offset(self) -> int:
        """The first batch's base offset, -1 when none was read. Read from the records when asked:
        a fetch answer does not need it, so a zero-copy read does not read the file for it."""
        records = self.records
        head = records.records.read(records.position, 8) if isinstance(records, RecordsSlice) else records[:8]
        return int.from_bytes(head, "big", signed=True) if len(head) == 8 else -1

    @property
    def read_bytes(self) -> bytes | memoryview:
        """The records of a read that was not ``zero_copy``."""
        if isinstance(self.records, RecordsSlice):
            raise TypeError("the records of a zero_copy read are in their file, not in memory")
        return self.records


class LogSegment:
    @classmethod
    def for_config(cls, directory: Path, base_offset: int, config: LogConfig, *,
                   max_index_size: int | None = None, rolling_jitter_ms: int = 0,
                   clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                   temp_suffix: str = "", writable: bool = True,
                   lazy_index_blocks: bool = False, open_indexes: bool = True,
                   txn_index_absent: bool = False) -> LogSegment:
        """A segment indexed as the log's config says: the one way the log, its loader, the
        cleaner's offload and the Spark job open segments, so an index setting cannot be missed."""
        return cls(directory, base_offset, index_interval_bytes=config.index_interval_bytes,
                   max_index_size=max_index_size or config.max_index_size,
                   rolling_jitter_ms=rolling_jitter_ms, clock_ms=clock_ms, temp_suffix=temp_suffix,
                   writable=writable, lazy_index_blocks=lazy_index_blocks, open_indexes=open_indexes,
                   txn_index_absent=txn_index_absent)

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        rolling_jitter_ms: int = 0,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        temp_suffix: str = "",
        writable: bool = True,
        lazy_index_blocks: bool = False,
        open_indexes: bool = True,
        txn_index_absent: bool = False,
    ) -> None:
        """``open_indexes=False``: the offset and time indexes open when first used (a segment
        loaded from disk: lazy_index.py); a missing one is then made by recovery, not here.
        ``txn_index_absent``: the directory's listing has no ``.txnindex`` for it (txn_index.py)."""
        self.directory = as_path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.rolling_jitter_ms = rolling_jitter_ms
        self._clock_ms = clock_ms
        d = self.directory
        self.log = FileRecords(names.log_file(d, base_offset, temp_suffix), writable=writable)
        # an index opened lazily that fails its check is rebuilt from the log (a read-only one is not)
        rebuild = self._rebuild_from_log if writable else None
        try:
            self._offset_index: LazyIndex[OffsetIndex] = LazyIndex(
                names.segment_file(d, base_offset, names.INDEX_SUFFIX, temp_suffix),
                lambda path: OffsetIndex(path, base_offset, max_index_size, writable, lazy_index_blocks),
                rebuild, opened=open_indexes)
            self._time_index: LazyIndex[TimeIndex] = LazyIndex(
                names.segment_file(d, base_offset, names.TIME_INDEX_SUFFIX, temp_suffix),
                lambda path: TimeIndex(path, base_offset, max_index_size, writable, lazy_index_blocks),
                rebuild, opened=open_indexes)
            self.txn_index = TransactionIndex(
                names.segment_file(d, base_offset, names.TXN_INDEX_SUFFIX, temp_suffix), base_offset,
                absent=txn_index_absent)
        except BaseException:
            # e.g. ENOSPC allocating an index on a full disk: release what was opened (the map and
            # descriptors would pin the files of a directory that is going offline)
            if hasattr(self, "_offset_index"):
                self._offset_index.close_handler()
            if hasattr(self, "_time_index"):
                self._time_index.close_handler()
            self.log.close()
            raise
        self.created_ms = clock_ms()
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        # (the largest timestamp so far, its offset): the time index's last entry, read when first
        # needed (None until then; the lock: one reader loads it)
        self._max_timestamp: tuple[int, int] | None = None
        self._max_timestamp_lock = threading.Lock()

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index.get()

    @property
    def max_timestamp_so_far(self) -> int:
        return (self._max_timestamp or self._load_max_timestamp())[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return (self._max_timestamp or self._load_max_timestamp())[1]

    def set_max_timestamp(self, timestamp: int, offset: int) -> None:
        self._max_timestamp = (timestamp, offset)

    def _load_max_timestamp(self) -> tuple[int, int]:
        with self._max_timestamp_lock:
            if self._max_timestamp is None:
                last = self.time_index.last_entry
                self._max_timestamp = (last.timestamp, last.offset)
            return self._max_timestamp

    def start_position(self, offset: int) -> int:
        """Where a read for ``offset`` may start: the offset index's entry at or below it, or the
        segment's start for an offset at or below its base, which needs no index (a cleaning
        round reads most segments from their start, and their indexes stay closed)."""
        return 0 if offset <= self.base_offset else self.offset_index.lookup(offset).position

    def index_bytes_bound(self) -> tuple[int, int]:
        """(offset index, time index) bytes of entries, at most (LazyIndex.bytes_bound)."""
        return self._offset_index.bytes_bound(), self._time_index.bytes_bound()

    # ------------------------------------------------------------------ size and names
    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    @property
    def name(self) -> str:
        return self.log.path.name

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # ------------------------------------------------------------------ append
    def append(self, batches: Sequence[AppendedBatch], data: bytes | bytearray | memoryview,
               header: bytes | None = None) -> None:
        """Append ``data`` (whole batches, described by ``batches``) and keep the indexes.

        ``header``, when given, replaces the first bytes of ``data`` on disk (a batch whose
        base offset was assigned), written together in one writev with no copy of the body.
        """
        if not batches:
            return
        last_offset = batches[-1][0]
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            raise LogSegmentOffsetOverflowError(self.base_offset, last_offset, str(self.log.path))
        position = self.log.append(data, header)
        if position == 0 and self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = batches[0][1]
        if len(batches) == 1:
            self._index_batch(position, *batches[0])
            return
        # many batches (the cleaner appends whole windows): their entries planned at once, by the
        # same rule as _index_batch's, from the segment's current state
        last_offsets, max_timestamps, sizes = (np.array(column, dtype=np.int64) for column in zip(*batches))
        positions = np.empty(len(batches), dtype=np.int64)
        positions[0] = position
        np.cumsum(sizes[:-1], out=positions[1:])
        positions[1:] += position
        self._apply_plan(plan_index_entries(positions, sizes, last_offsets, max_timestamps,
                                            self.index_interval_bytes, self._index_state()))

    def append_batch(self, data: bytes | bytearray | memoryview, header: bytes | None, last_offset: int,
                     max_timestamp: int) -> None:
        """``append`` of one whole batch (the common produce request), without the list."""
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            raise LogSegmentOffsetOverflowError(self.base_offset, last_offset, str(self.log.path))
        position = self.log.append(data, header)
        if position == 0 and self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = max_timestamp
        self._index_batch(position, last_offset, max_timestamp, len(data))

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        """The index entries due before the batch at ``position`` (see the module docstring)."""
        if max_timestamp > self.max_timestamp_so_far:
            self.set_max_timestamp(max_timestamp, last_offset)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = size
        else:
            self.bytes_since_last_index_entry += size

    # ------------------------------------------------------------------ reads
    def translate_offset(self, offset: int, starting_position: int = 0, *,
                         cached_only: bool = False) -> LogOffsetPosition | None:
        """The first batch whose last offset >= ``offset``, searched from the index entry. With
        ``cached_only`` the search must not wait for the disk either: the page it starts in is
        probed first, WouldBlock if not cached; and an offset index not opened yet (lazy_index.py)
        is WouldBlock too: opening it maps its file and reads its pages, and rebuilds a damaged one
        from the log, work for a thread that may wait (an open index is mapped, and hot)."""
        if cached_only and not self._offset_index.is_open:
            raise WouldBlock(f"the offset index of {self.log.path} is not open yet")
        position = max(self.offset_index.lookup(offset).position, starting_position)
        if cached_only:
            self.log.read_cached(position, HEADER_SIZE, 1)
        return self.log.search_for_offset(offset, position)

    def read(self, start_offset: int, max_bytes: int, max_position: int | None = None,
             min_one_batch: bool = True, *, whole_batches: bool = True, cached_only: bool = False,
             zero_copy: bool = False) -> FetchData | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` (but at
        least one batch when ``min_one_batch``), never past ``max_position``.

        ``whole_batches=False`` reads as Kafka's LogSegment.read does for a fetch: the first batch
        whole, then bytes up to the limit, which may end inside a batch (Kafka's clients drop a
        trailing partial batch and fetch it again); only the first batch's header is read, not one
        per batch. ``cached_only``: only what the page cache holds (FileRecords.read_cached),
        WouldBlock otherwise. ``zero_copy`` (with ``whole_batches=False``): the records are a
        RecordsSlice of the file, not its bytes (FileRecords.slice)."""
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes} for reading {self.log.path}")
        start = self.translate_offset(start_offset, cached_only=cached_only)
        if start is None:
            return None
        limit = self.log.size_in_bytes if max_position is None else min(max_position, self.log.size_in_bytes)
        if not whole_batches:
            return self._slice(start, max_bytes, limit, min_one_batch, cached_only, zero_copy)
        end = start.position
        for position, header in self.log.headers_from(start.position, limit):
            if end - start.position + header.size > max_bytes and not (
                    min_one_batch and end == start.position):
                break
            end = position + header.size
        if end == start.position:
            return FetchData(start.position, b"")
        size = end - start.position
        data = self.log.read_cached(start.position, size, size) if cached_only else \
            self.log.read(start.position, size)
        return FetchData(start.position, data)

    def _slice(self, start: LogOffsetPosition, max_bytes: int, limit: int,
               min_one_batch: bool, cached_only: bool, zero_copy: bool) -> FetchData:
        """``read``'s Kafka-style slice: from the batch at ``start`` up to ``max_bytes``."""
        if start.position + start.size > limit or (start.size > max_bytes and not min_one_batch):
            return FetchData(start.position, b"")  # no whole batch there or in the budget
        size = min(max(max_bytes, start.size), limit - start.position)
        if zero_copy:
            return FetchData(start.position, self.log.slice(start.position, size, cached_only=cached_only))
        data = self.log.read_cached(start.position, size, start.size) if cached_only else \
            self.log.read(start.position, size)
        return FetchData(start.position, data)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        for _pos, header in self.log.headers_from(start):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp_ms: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first batch with max timestamp >= ``timestamp_ms``."""
        entry = self.time_index.lookup(timestamp_ms)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        found = self.log.search_for_timestamp(timestamp_ms, position)
        if found is None:
            return None
        return found.timestamp, max(found.offset, starting_offset)

    # ------------------------------------------------------------------ roll decisions
    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self.log.size_in_bytes > 0:
            header = self.log.header_at(0)
            if header is not None:
                self._rolling_based_timestamp = header.max_timestamp

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_batches: int) -> int:
        if self._rolling_based_timestamp is None:
            self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return max_timestamp_in_batches - ts
        return now_ms - self.created_ms

    def should_roll(self, *, segment_bytes: int, segment_ms: int, batches_bytes: int,
                    max_timestamp_in_batches: int, max_offset_in_batches: int, now_ms: int) -> str | None:
        """Why the next append must go to a new segment, or None (Kafka's rules)."""
        size = self.log.size_in_bytes
        if size > segment_bytes - batches_bytes:
            return "segment.bytes"
        if size > 0 and self.time_waited_for_roll(now_ms, max_timestamp_in_batches) > (
                segment_ms - self.rolling_jitter_ms):
            return "segment.ms"
        if self.offset_index.is_full():
            return "offset index full"
        if self.time_index.is_full():
            return "time index full"
        if not 0 <= max_offset_in_batches - self.base_offset <= INT32_MAX:
            return "relative offset overflow"
        return None

    # ------------------------------------------------------------------ recovery (segment_recovery.py)
    def recover(self) -> RecoveryResult:
        """segment_recovery.recover; the transaction index is reset (the log rebuilds it)."""
        self.txn_index.reset()
        result, plan = segment_recovery.recover(self.log, self.base_offset, self.index_interval_bytes,
                                                self._offset_index.get(checked=False),
                                                self._time_index.get(checked=False), self.max_index_size)
        self.bytes_since_last_index_entry = plan.bytes_since_last_entry
        self.set_max_timestamp(plan.max_timestamp, plan.offset_of_max_timestamp)
        return result

    def sanity_check(self) -> None:
        """FileNotFoundError or CorruptIndexError for a missing or damaged index."""
        segment_recovery.check_indexes(self.log, self._offset_index, self._time_index)
        self.txn_index.sanity_check()

    def _rebuild_from_log(self, index: OffsetIndex | TimeIndex) -> None:
        """Refill an index opened lazily that failed its sanity check (lazy_index.py), and put it
        on disk at once. Such a segment is below the recovery point and no longer appended to."""
        refill(index, plan_from_log(self.log, self.base_offset, self.index_interval_bytes, index.path),
               self.max_index_size)
        index.flush()

    def _index_state(self) -> IndexState:
        return IndexState(self.bytes_since_last_index_entry, self.max_timestamp_so_far,
                          self.offset_of_max_timestamp_so_far, self.time_index.last_entry.timestamp)

    def _apply_plan(self, plan: IndexPlan) -> None:
        self.offset_index.append_many(*plan.offset_entries)
        self.time_index.append_many(*plan.time_entries)
        self.bytes_since_last_index_entry = plan.bytes_since_last_entry
        self.set_max_timestamp(plan.max_timestamp, plan.offset_of_max_timestamp)

    # ------------------------------------------------------------------ truncation and life cycle
    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and every later one (Kafka's rule: truncation is
        batch-aligned, so an offset inside a batch removes that whole batch); return the bytes
        removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        if mapping is None:
            return 0
        removed = self.log.truncate_to(mapping.position)
        if self.log.size_in_bytes == 0:
            self.created_ms = self._clock_ms()
            self._rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        self._reload_max_timestamp()
        return removed

    def _reload_max_timestamp(self) -> None:
        """Max timestamp so far from the time index tail plus the batches after it."""
        last = self.time_index.last_entry
        self.set_max_timestamp(last.timestamp, last.offset)
        start = self.offset_index.lookup(last.offset).position
        for _pos, header in self.log.headers_from(start):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.set_max_timestamp(header.max_timestamp, header.last_offset)

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's modification time when none."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        for p in (self.log.path, self._offset_index.path, self._time_index.path):
            try:
                os.utime(p, (ms / 1000, ms / 1000))
            except FileNotFoundError:  # an index not made (yet): nothing to date
                pass

    def flush(self) -> None:
        self.log.flush()
        self._offset_index.flush()
        self._time_index.flush()
        self.txn_index.flush()

    def on_become_inactive(self) -> None:
        """The segment was rolled: final time index entry, indexes trimmed to their entries."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                     skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def close(self, *, sync: bool = False) -> None:
        """Release the files; the final time index entry and the indexes' trim are written here,
        after any flush, so ``sync`` fsyncs them (a clean shutdown's marker promises them)."""
        # a time index never opened was not appended to: its last entry is already the final one
        if self._time_index.is_open and self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
        self._offset_index.close(sync=sync)
        self._time_index.close(sync=sync)
        self.txn_index.close()
        self.log.close()

    def close_handlers(self) -> None:
        self._offset_index.close_handler()
        self._time_index.close_handler()
        self.log.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment from ``old_suffix`` to ``new_suffix`` (temp suffixes)."""
        for f in (self.log, self._offset_index, self._time_index, self.txn_index):
            path = f.path
            name = path.name
            base = name[: -len(old_suffix)] if old_suffix and name.endswith(old_suffix) else name
            f.rename_to(path.with_name(base + new_suffix))

    def delete_if_exists(self) -> None:
        self.close_handlers()
        for f in (self.log, self._offset_index, self._time_index, self.txn_index):
            f.delete_if_exists()
        # the producer snapshot of this offset belongs to the log; leave it

    def has_overflow(self) -> bool:
        """Whether some batch's offset does not fit this segment (logs from old cleaners).
        A corrupt tail answers False: recovery deals with it."""
        try:
            next_offset = self.read_next_offset()
        except CorruptRecordError:
            return False
        return next_offset > self.base_offset and not self.can_convert_to_relative_offset(next_offset - 1)

    def __repr__(self) -> str:
        return f"LogSegment({self.log.path}, size={self.size_in_bytes})"


