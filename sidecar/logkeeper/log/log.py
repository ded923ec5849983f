"""Log: one partition — append with offset assignment, roll, read, flush, truncate, delete.

A log is a directory of segments (see ``segment.py``); the last one is active and takes the
appends. The log end offset (LEO) is the next offset to assign; the recovery point is the offset
below which every byte was fsynced, so recovery after a crash starts from the segment that
holds it; the log start offset is the first offset readers may see (segments wholly below it
are deleted).

Appends from clients (``assign_offsets=True``) are validated as a whole first (``validator.py``)
and then written in one ``writev``; a batch's base offset is patched in its header on the way
(no CRC change; ``assign.py``). Appends of batches that already carry offsets
(``assign_offsets=False``: data copied from another log, replicated, or restored) must start at
or after the LEO.

The common produce request — one uncompressed CreateTime batch, not transactional, from a
client, as ``bytes`` — takes a shorter road (``_append_plain``) to the same result: one compiled
call checks it (``validator.check_plain_batch``), then an idempotent producer's sequence, the
offsets, the roll check, one ``pwritev`` of the base offset and the rest of the batch, the
segment's index entries and the producer's state, without the per-batch lists of the general
path. A test appends the same requests both ways and compares the answers, the files and the
producers' state.

Locking: one lock serialises appends, rolls, truncation and segment replacement; reads take a
snapshot of the segment list and read files with ``pread`` (the bytes of a batch never change
once written; a replacement swaps whole segments, and a reader holding an old segment keeps
reading its still-open file).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OffsetOutOfRangeError, RecordTooLargeError
from ..fileio import CrashHook, as_path, fsync_dir
from ..records.batch_format import PRODUCER_ID_OFFSET
from . import names, producer_snapshot
from .assign import LogAppendInfo, assigned_bytes, base_offsets, pack_base_offset
from .loader import LoadReport, LogLoader
from .log_config import DAY_MS, LogConfig
from .names import TopicPartition
from .pending_deletes import PendingDeletes, unlink_segments
from .producer_state import ProducerStateManager, last_sequence
from .replace import replace_segments
from .segment import AppendedBatch, FetchData, LogSegment
from .segments import LogSegments
from .validator import check_plain_batch, validate_request

if TYPE_CHECKING:
    import random

log = logging.getLogger(__name__)

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


# LogAppendInfo(...) runs the NamedTuple's generated __new__; the append of the common request
# builds it from the tuple of all its fields, much faster
# (bench/results/design_figures.md: log, LogAppendInfo)
_new_tuple = tuple.__new__
_PRODUCER = struct.Struct(">qhi")  # a batch header's producerId, producerEpoch, baseSequence


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = True,
        clock_ms: Clock = wall_clock_ms,
        rng: random.Random | None = None,
        producer_expiration_ms: int = DAY_MS,
    ) -> None:
        self.dir = as_path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic_partition: TopicPartition = names.PartitionDirName.parse(self.dir.name).topic_partition
        self.config = config or LogConfig.from_props()
        self._clock = clock_ms
        self._producer_expiration_ms = producer_expiration_ms  # producer.id.expiration.ms
        self._rng = rng
        self._lock = threading.RLock()
        self._jitter_ms = self._new_jitter()
        loaded = LogLoader(self.dir, self.config, log_start_offset=log_start_offset,
                           recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                           clock_ms=clock_ms, jitter_ms=self._jitter_ms).load()
        self.segments: LogSegments = loaded.segments
        self.load_report: LoadReport = loaded.report
        self.log_start_offset = max(loaded.log_start_offset, self._first_base_offset())
        self.recovery_point = loaded.recovery_point
        self.log_end_offset = loaded.next_offset
        self.unflushed_messages = 0
        self.last_flush_ms = clock_ms()
        self.producer_state = ProducerStateManager()
        self._stable = self.log_end_offset  # published by _set_end and _rebuild_producer_state
        self._pending_deletes = PendingDeletes(clock_ms)
        self._unsynced_snapshots: list[int] = []  # written by rolls, fsynced by the flush past them
        self.closed = False
        # Entries of the partition directory (segment files created, renamed, deleted) are only
        # durable once the directory itself is fsynced: a segment whose data was fsynced but
        # whose name was not comes back from a power cut as nothing. The loader may have
        # created the first segment, deleted segments after a cut or renamed swaps; the first
        # flush fsyncs the directory (see ``flush``), and a load that changed files does now,
        # after the producer state's rebuild: that may create transaction index files again
        # (a recovered segment's aborted transactions).
        self._dir_dirty = True
        self._rebuild_producer_state(self.load_report.first_reset_txn_index())
        if self.load_report.changed:
            self._sync_dir()

    # ------------------------------------------------------------------ helpers
    def _new_jitter(self) -> int:
        max_jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if max_jitter <= 0:  # the default: no jitter
            return 0
        if self._rng is None:
            # only with segment.jitter.ms set: the import costs every process start time
            # (bench/results/design_figures.md: log, random import)
            import random

            self._rng = random.Random()
        return self._rng.randrange(max_jitter)

    def _sync_dir(self) -> None:
        """fsync the partition directory: every create, rename and delete in it so far is
        durable (Kafka's Utils.flushDir after a roll, a rename and a delete)."""
        fsync_dir(self.dir)
        self._dir_dirty = False

    def _first_base_offset(self) -> int:
        first = self.segments.first
        return first.base_offset if first is not None else 0

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.for_config(self.dir, base_offset, self.config, rolling_jitter_ms=self._jitter_ms,
                                     clock_ms=self._clock)

    @property
    def active_segment(self) -> LogSegment:
        seg = self.segments.last
        if seg is None:
            raise RuntimeError(f"log {self.dir} has no segment")
        return seg

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def name(self) -> str:
        return str(self.topic_partition)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided. Read without the log's lock (the cleaner's
        bound, read_committed fetches), so it is a published value (``_set_end``), moved only once
        an append's changes are all in place: the transaction a batch opens in the producer state,
        the abort a marker writes in the transaction index. Computed from the log end offset and
        the producer state on each read, it once ran ahead of them: the cleaner let a transaction's
        records supersede committed ones, then the transaction aborted (found by the power-cut
        test's compacted transactional log)."""
        return self._stable

    def _set_end(self, offset: int) -> None:
        """(Lock held.) Move the log end offset and publish the last stable offset with it."""
        self.log_end_offset = offset
        self._stable = self.producer_state.last_stable_offset(offset)

    def now_ms(self) -> int:
        return self._clock()

    @property
    def lock(self) -> threading.RLock:
        """The log's lock: hold it to choose segments and act on them atomically (retention)."""
        return self._lock

    # ------------------------------------------------------------------ append
    def append(self, data: bytes | bytearray | memoryview, *, assign_offsets: bool = True,
               leader_epoch: int = -1) -> LogAppendInfo:
        """Validate and append one request's batches; return the offsets they got.

        ``assign_offsets``: a client's batches (base offset 0) get the next offsets; otherwise
        the batches keep theirs, which must start at or after the log end offset.
        """
        info = self._append(data, assign_offsets, leader_epoch, quick=False)
        assert info is not None  # only a quick append gives up
        return info

    def try_append(self, data: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """``append`` of a client's request when it is quick: None, having done nothing, when the
        log's lock is held or the append would roll a segment or flush. An event loop appends
        inline what this takes and hands the rest to a thread (protocol/handlers_data.py)."""
        return self._append(data, True, -1, quick=True)

    def _append(self, data: bytes | bytearray | memoryview, assign_offsets: bool, leader_epoch: int, *,
                quick: bool) -> LogAppendInfo | None:
        now = self._clock()  # read once: validation, LogAppendTime and the roll check agree
        config = self.config
        if assign_offsets and leader_epoch < 0:
            plain = check_plain_batch(data, config.append_rules, now)
            if plain is not None:
                return self._append_plain(data, plain, now, config, quick)
        request = validate_request(data, config, now_ms=now, from_client=assign_offsets)
        batches = request.batches
        if not self._lock.acquire(blocking=not quick):
            return None
        try:
            if quick and self._slow(request.size, request.max_timestamp, request.num_records, now, config):
                return None
            if self.closed:
                raise RuntimeError(f"log {self.name} is closed")
            if assign_offsets and request.has_producer_id:
                duplicate = self.producer_state.check_request(request, self.name)
                if duplicate is not None:
                    return duplicate
            append_time = now if assign_offsets and config.message_timestamp_type == "LogAppendTime" else -1
            bases = base_offsets(batches, self.log_end_offset, assign=assign_offsets, log_name=self.name)
            out, header = assigned_bytes(data, batches, bases, append_time=append_time,
                                         leader_epoch=leader_epoch) if assign_offsets else (data, None)
            entries = [AppendedBatch(base + b.header.last_offset_delta,
                                     append_time if append_time >= 0 else b.max_timestamp,
                                     b.header.batch_length + 12)
                       for b, base in zip(batches, bases)]
            last_offset = entries[-1].last_offset
            max_ts = append_time if append_time >= 0 else request.max_timestamp
            if request.size > config.segment_bytes:
                raise RecordTooLargeError(
                    f"request of {request.size} bytes is larger than segment.bytes "
                    f"{config.segment_bytes} of {self.name}")
            segment = self._maybe_roll(request.size, max_ts, last_offset, bases[0], now)
            segment.append(entries, out, header)
            try:  # the producer state and transaction index first: _set_end publishes from them
                if request.has_transactional or request.has_producer_id:
                    for entry in self.producer_state.on_appended(out, request, bases):
                        # a segment's first aborted transaction creates its index file: the next
                        # flush must fsync the directory before the recovery point moves past it
                        # (recovery trusts the index files it finds below the recovery point)
                        if self.active_segment.txn_index.append(entry):
                            self._dir_dirty = True
            finally:
                self._set_end(last_offset + 1)
            self.unflushed_messages += request.num_records
            if self.unflushed_messages >= config.flush_messages:
                self.flush()
            return LogAppendInfo(bases[0], last_offset, max_ts, append_time, len(batches),
                                 request.num_records, request.size)
        finally:
            self._lock.release()

    def _slow(self, size: int, max_ts: int, count: int, now: int, config: LogConfig) -> bool:
        """(Lock held.) Whether appending would roll a segment or flush: file creation, fsyncs."""
        segment = self.segments.last
        return (segment is None or self.unflushed_messages + count >= config.flush_messages
                or segment.should_roll(segment_bytes=config.segment_bytes, segment_ms=config.segment_ms,
                                       batches_bytes=size, max_timestamp_in_batches=max_ts,
                                       max_offset_in_batches=self.log_end_offset + count - 1, now_ms=now) is not None)

    def _append_plain(self, data: bytes | bytearray | memoryview, plain: tuple[int, int], now: int,
                      config: LogConfig, quick: bool = False) -> LogAppendInfo | None:
        """``append`` of the common request (``check_plain_batch``): what the general path does
        for it, without its per-batch lists: the base offset written with the body in one
        ``pwritev``. The lock is taken without ``with`` (half the cost of the statement, on
        every append)."""
        count, max_ts = plain
        size = len(data)
        producer_id, epoch, first_seq = _PRODUCER.unpack_from(data, PRODUCER_ID_OFFSET)
        if not self._lock.acquire(blocking=not quick):
            return None
        try:
            if quick and self._slow(size, max_ts, count, now, config):
                return None
            if self.closed:
                raise RuntimeError(f"log {self.name} is closed")
            if producer_id >= 0:  # an idempotent producer's batch: in sequence, or a retry answered
                last_seq = last_sequence(first_seq, count - 1)
                duplicate = self.producer_state.check_batch(producer_id, epoch, first_seq, last_seq, count, size,
                                                            self.name)
                if duplicate is not None:
                    return duplicate
            base = self.log_end_offset
            last_offset = base + count - 1  # a client's batch: lastOffsetDelta + 1 == recordCount
            if size > config.segment_bytes:
                raise RecordTooLargeError(
                    f"request of {size} bytes is larger than segment.bytes {config.segment_bytes} of {self.name}")
            segment = self.segments.last
            if segment is None or segment.should_roll(
                    segment_bytes=config.segment_bytes, segment_ms=config.segment_ms, batches_bytes=size,
                    max_timestamp_in_batches=max_ts, max_offset_in_batches=last_offset, now_ms=now) is not None:
                segment = self._maybe_roll(size, max_ts, last_offset, base, now)
            # the new header is the base offset alone: the rest of it is the request's
            segment.append_batch(data, pack_base_offset(base), last_offset, max_ts)
            try:  # the producer's state first: _set_end publishes from it
                if producer_id >= 0:
                    self.producer_state.on_producer_batch(producer_id, epoch, first_seq, last_seq, base, last_offset,
                                                          is_control=False, timestamp=max_ts)
            finally:
                self._set_end(last_offset + 1)
            self.unflushed_messages += count
            if self.unflushed_messages >= config.flush_messages:
                self.flush()
            return _new_tuple(LogAppendInfo, (base, last_offset, max_ts, -1, 1, count, size, False))
        finally:
            self._lock.release()

    def _rebuild_producer_state(self, scan_from: int | None = None) -> None:
        """The producer state from the snapshots and segments; ``scan_from``: the lowest segment
        whose transaction index the load rebuilt, which the scan must cover (it re-adds their
        aborted transactions)."""
        self.producer_state = producer_snapshot.restore(self.dir, self.segments, self.log_end_offset, scan_from)
        self._set_end(self.log_end_offset)
        self.remove_expired_producers()  # never a producer with an open transaction: nothing to publish

    def remove_expired_producers(self) -> int:
        """Forget the producers idle for producer.id.expiration.ms (producer_state.py); how many."""
        with self._lock:
            return self.producer_state.remove_expired(self._clock(), self._producer_expiration_ms)

    # ------------------------------------------------------------------ roll
    def _maybe_roll(self, batches_bytes: int, max_timestamp: int, max_offset: int, first_offset: int,
                    now_ms: int) -> LogSegment:
        segment = self.active_segment
        why = segment.should_roll(segment_bytes=self.config.segment_bytes, segment_ms=self.config.segment_ms,
                                  batches_bytes=batches_bytes, max_timestamp_in_batches=max_timestamp,
                                  max_offset_in_batches=max_offset, now_ms=now_ms)
        if why is None:
            return segment
        log.info("rolling %s at offset %d: %s", self.name, first_offset, why)
        # as Kafka: the new segment starts at the first appended offset (or the LEO if higher)
        return self.roll(first_offset)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end offset."""
        with self._lock:
            self._ensure_open()
            new_offset = max(self.log_end_offset, expected_next_offset or 0)
            active = self.active_segment
            if active.base_offset == new_offset and active.size_in_bytes == 0:
                return active  # already an empty segment there
            if new_offset in self.segments:
                raise RuntimeError(f"trying to roll {self.name} to offset {new_offset}, which has a segment")
            for suffix in names.SEGMENT_SUFFIXES:
                stale = names.segment_file(self.dir, new_offset, suffix)
                if stale.exists():
                    log.warning("deleting stale %s before rolling %s", stale, self.name)
                    stale.unlink()
            active.on_become_inactive()
            if self.recovery_point >= new_offset:
                # every byte of the old segment was flushed, so recovery after a crash starts
                # after it and trusts its indexes as they are on disk: the final time index
                # entry and the trim just made must be durable too (found by the power-cut
                # test: a zeroed time index entry below the recovery point). Its .log is
                # already synced, so this costs two small fsyncs.
                active.flush()
            self._jitter_ms = self._new_jitter()
            segment = self._new_segment(new_offset)
            self.segments.add(segment)
            # Kafka's snapshot at each roll: a load after a crash scans from here, not from the
            # last clean close (producer_snapshot.py; fsynced by the flush that passes it)
            producer_snapshot.write(self.dir, new_offset, self.producer_state, durable=False)
            self._unsynced_snapshots.append(new_offset)
            # the new segment's names durable before any of its data can be flushed (a rare
            # fsync: one per segment.bytes appended)
            self._sync_dir()
            return segment

    # ------------------------------------------------------------------ read
    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, whole_batches: bool = True, cached_only: bool = False,
             zero_copy: bool = False) -> FetchData:
        """Whole batches from ``start_offset`` (below ``max_offset`` when given: e.g. the LSO);
        ``whole_batches``, ``cached_only`` and ``zero_copy``: LogSegment.read's."""
        end = self.log_end_offset
        if start_offset > end or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range [{self.log_start_offset}, {end}] for {self.name}")
        if start_offset == end:
            return FetchData(self.active_segment.size_in_bytes, b"")
        for segment in self.segments.values(start_offset, None):
            max_position = None
            if max_offset is not None:
                if max_offset <= start_offset:
                    return FetchData(0, b"")
                stop = segment.translate_offset(max_offset, cached_only=cached_only)
                max_position = stop.position if stop is not None else None
            data = segment.read(start_offset, max_bytes, max_position, min_one_batch,
                                whole_batches=whole_batches, cached_only=cached_only, zero_copy=zero_copy)
            if data is not None and data.records:
                return data
        return FetchData(0, b"")

    # ------------------------------------------------------------------ flush
    def flush(self, offset: int | None = None) -> None:
        """Fsync every segment holding offsets below ``offset`` (default: the LEO); the recovery
        point moves there."""
        with self._lock:
            target = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
            if target <= self.recovery_point:
                return
            for segment in self.segments.values(self.recovery_point, target):
                segment.flush()
            for offset in [o for o in self._unsynced_snapshots if o <= target]:
                producer_snapshot.sync(self.dir, offset)
                self._unsynced_snapshots.remove(offset)
            if self._dir_dirty:
                self._sync_dir()  # before the recovery point moves: the flushed files can be found
            self.recovery_point = target
            self.unflushed_messages = 0
            self.last_flush_ms = self._clock()

    # ------------------------------------------------------------------ truncation and retention
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (batch-aligned); True when anything went."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {target_offset}")
        with self._lock:
            self._ensure_open()
            if target_offset >= self.log_end_offset:
                return False
            if target_offset <= self._first_base_offset():
                self.truncate_fully_and_start_at(target_offset)
                return True
            for segment in self.segments.higher_segments(target_offset):
                if segment.base_offset >= target_offset:
                    self.segments.remove(segment.base_offset)
                    segment.delete_if_exists()
            floor = self.segments.floor_segment(target_offset)
            if floor is not None:
                floor.truncate_to(target_offset)
                # the cut durable too: an unsynced tail could come back after a power cut as
                # valid batches, above a recovery point that new appends then move past
                floor.flush()
            self._sync_dir()
            self._set_end(self.active_segment.read_next_offset())
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self._rebuild_producer_state()  # deletes the snapshots above the new end first
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        with self._lock:
            self._ensure_open()
            for segment in self.segments.values():
                self.segments.remove(segment.base_offset)
                segment.delete_if_exists()
            self.segments.add(self._new_segment(new_offset))
            producer_snapshot.delete_above(self.dir, -1)
            self._unsynced_snapshots.clear()
            self._sync_dir()
            self.producer_state = ProducerStateManager()
            self._set_end(new_offset)
            self.log_start_offset = new_offset
            self.recovery_point = new_offset

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        with self._lock:
            if new_start <= self.log_start_offset:
                return False
            if new_start > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.name} to {new_start}, beyond the "
                    f"log end offset {self.log_end_offset}")
            self.log_start_offset = new_start
            return True

    def delete_segments_below_start(self) -> list[LogSegment]:
        """Delete segments whose offsets are all below the log start offset (never the active)."""
        with self._lock:
            doomed = []
            for segment in self.segments.values():
                nxt = self.segments.higher_segment(segment.base_offset)
                if nxt is None or nxt.base_offset > self.log_start_offset:
                    break
                doomed.append(segment)
            self.delete_segments(doomed)
            return doomed

    def delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Remove segments from the log and delete their files after file.delete.delay.ms."""
        with self._lock:
            if not doomed:
                return
            if len(doomed) == len(self.segments):
                self.roll()
            for segment in doomed:
                self.segments.remove(segment.base_offset)
                segment.change_file_suffixes("", names.DELETED_SUFFIX)
            producer_snapshot.delete_at(self.dir, [segment.base_offset for segment in doomed])
            # the renames durable: undone by a power cut, they would bring deleted segments back
            self._sync_dir()
            self.log_start_offset = max(self.log_start_offset, self._first_base_offset())
            self._schedule_delete(list(doomed))

    def _schedule_delete(self, doomed: list[LogSegment]) -> None:
        self._pending_deletes.schedule(doomed, self.config.file_delete_delay_ms)

    def delete_expired_files(self, *, all_now: bool = False) -> int:
        """Remove ``.deleted`` segments whose delay has passed (every one with ``all_now``: a
        process with no readers to wait for, ``logkeeper clean``); return how many."""
        doomed = self._pending_deletes.take_due(all_now=all_now)
        unlink_segments(doomed)
        if doomed:
            # one fsync for the batch of unlinks (Kafka deletes without one; an unlink undone
            # by a power cut leaves a .deleted file, which the next load removes)
            try:
                fsync_dir(self.dir)
            except FileNotFoundError:
                pass  # the log itself was deleted meanwhile (its directory renamed -delete)
        return len(doomed)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment],
                         crash_hook: CrashHook | None = None, sync_renamed: bool = True) -> None:
        with self._lock:
            self._ensure_open()
            replace_segments(self.segments, new_segments, old_segments, directory=self.dir,
                             schedule_delete=self._schedule_delete, crash_hook=crash_hook,
                             sync_renamed=sync_renamed)
            kept = {segment.base_offset for segment in new_segments}
            producer_snapshot.delete_at(self.dir, [s.base_offset for s in old_segments if s.base_offset not in kept])

    def new_cleaned_segment(self, base_offset: int, max_index_size: int | None = None) -> LogSegment:
        """An empty ``.cleaned`` segment to write a replacement into; its indexes sized at
        ``max_index_size`` bytes (the cleaner's bound for its group) or segment.index.bytes, their
        blocks allocated as entries are written: the cleaner writes them whole and trims them at
        once, and trimming allocated blocks frees them (on a disk mounted with discard, discards
        them too: bench/results/design_figures.md, index, lazy blocks)."""
        for suffix in names.SEGMENT_SUFFIXES:
            names.segment_file(self.dir, base_offset, suffix, names.CLEANED_SUFFIX).unlink(missing_ok=True)
        return LogSegment.for_config(self.dir, base_offset, self.config, max_index_size=max_index_size,
                                     rolling_jitter_ms=self._jitter_ms, clock_ms=self._clock,
                                     temp_suffix=names.CLEANED_SUFFIX, lazy_index_blocks=True)

    # ------------------------------------------------------------------ life cycle
    def _ensure_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"log {self.name} is closed")

    def close(self, *, clean_shutdown: bool = False) -> None:
        """Flush nothing (the caller decides), trim the active indexes, release the files. With
        ``clean_shutdown`` (after a flush) the active segment's index changes made by closing it
        are fsynced (the clean-shutdown marker tells the next start to trust them), and the
        producer state is written as the snapshot at the log end offset (producer_snapshot.py:
        Kafka trusts a clean shutdown without one to mean no producers at all)."""
        with self._lock:
            if self.closed:
                return
            if clean_shutdown and self.recovery_point >= self.log_end_offset:
                producer_snapshot.write(self.dir, self.log_end_offset, self.producer_state)
            active = self.segments.last
            for segment in self.segments.values():
                segment.close(sync=clean_shutdown and segment is active)
            for segment in self._pending_deletes.segments():
                segment.close_handlers()
            self.closed = True

    def close_handlers(self) -> None:
        """Release the files without writing anything (its log directory failed)."""
        with self._lock:
            for segment in [*self.segments.values(), *self._pending_deletes.segments()]:
                segment.close_handlers()
            self.closed = True

    def delete(self) -> None:
        """Remove every file of the log and its directory."""
        with self._lock:
            self.close()
            unlink_segments([*self.segments.values(), *self._pending_deletes.take_due(all_now=True)])
            for path in self.dir.iterdir():
                path.unlink()
            self.dir.rmdir()

    def __repr__(self) -> str:
        return f"Log({self.dir}, start={self.log_start_offset}, end={self.log_end_offset})"

