"""Loading a partition directory: temporary files, swaps, indexes and recovery, as Kafka does.

Passes, in order:

1. Temporary files: ``.deleted`` files are removed; ``.cleaned`` files are removed, and so is
   every ``.swap`` file at or above the lowest ``.cleaned`` offset (an interrupted replacement
   that had not finished its swaps is rolled back). The surviving ``.swap`` files come from a
   replacement that had finished writing (see ``replace.py``).
2. Swaps: the old segment files inside the offset range of the surviving swap segments
   ([lowest swap base, highest swap next offset)) are deleted, then the swaps are renamed into
   place.
3. Segments: every ``.log`` is opened; an index file with no ``.log`` is an orphan and deleted;
   a missing or corrupt index is rebuilt from its segment.
4. Overflow: a segment holding an offset that does not fit as an int32 delta from its base
   (written by old cleaners) is split into segments that fit, through the same crash-safe
   replacement.
5. Recovery: after an unclean shutdown every segment from the one holding the recovery point
   on is recovered (batches validated, the invalid tail cut, indexes rebuilt); once one
   segment lost bytes, the later ones are deleted, as nothing after a cut can be trusted.
   If the log start offset is beyond the log end, the segments are deleted; a log with no
   segment gets an empty one at the log start offset; the active segment's indexes are
   resized to their full size for appends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptIndexError, LogSegmentOffsetOverflowError
from ..fileio import fsync_dir
from ..records.scan import scan_batches
from . import names
from .log_config import LogConfig
from .replace import replace_segments
from .segment import INT32_MAX, LogSegment
from .segments import LogSegments

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    """What loading changed on disk, for ``logkeeper recover`` and the logs."""

    deleted_files: list[str] = field(default_factory=list)
    renamed_swaps: list[str] = field(default_factory=list)
    rebuilt_indexes: list[str] = field(default_factory=list)
    recovered_segments: list[str] = field(default_factory=list)
    truncated: list[tuple[str, int, str]] = field(default_factory=list)  # file, bytes, reason
    deleted_segments: list[str] = field(default_factory=list)
    split_segments: list[str] = field(default_factory=list)

    def first_reset_txn_index(self) -> int | None:
        """The base offset of the lowest segment whose transaction index this load emptied
        (recovered, rebuilt or split): the producer state scan must start at or below it, since
        it puts their aborted transactions back (producer_state.rebuild_producer_state)."""
        bases = [names.offset_from_file_name(n)
                 for n in (*self.recovered_segments, *self.rebuilt_indexes, *self.split_segments)]
        return min(bases, default=None)

    @property
    def changed(self) -> bool:
        return any((self.deleted_files, self.renamed_swaps, self.rebuilt_indexes, self.truncated,
                    self.deleted_segments, self.split_segments))


@dataclass
class LoadedLog:
    """What loading a log directory yields: its segments, offsets and the load's report."""

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    next_offset: int
    report: LoadReport


@dataclass
class LogLoader:
    dir: Path
    config: LogConfig
    log_start_offset: int
    recovery_point: int
    had_clean_shutdown: bool
    clock_ms: Callable[[], int]
    jitter_ms: int = 0
    report: LoadReport = field(default_factory=LoadReport)
    segments: LogSegments = field(default_factory=LogSegments)

    def open_segment(self, base_offset: int, temp_suffix: str = "", *, open_indexes: bool = True,
                     txn_index_absent: bool = False) -> LogSegment:
        return LogSegment.for_config(self.dir, base_offset, self.config, rolling_jitter_ms=self.jitter_ms,
                                     clock_ms=self.clock_ms, temp_suffix=temp_suffix, open_indexes=open_indexes,
                                     txn_index_absent=txn_index_absent)

    # ------------------------------------------------------------------ passes
    def load(self) -> LoadedLog:
        swaps = self._remove_temp_files_and_collect_swaps()
        self._complete_swaps(swaps)
        self._load_segments()
        self._split_overflowed_segments()
        recovery_point, next_offset = self._recover()
        active = self.segments.last
        assert active is not None
        active.resize_indexes(self.config.max_index_size)
        return LoadedLog(self.segments, self.log_start_offset, recovery_point, next_offset, self.report)

    def _files(self) -> list[str]:
        """The directory's file names, sorted. scandir's entries know their type from the listing:
        no stat per file (a startup loads every log); names, not Paths, because a Path costs a
        parse each, and most files of a large log are only looked at by name."""
        with os.scandir(self.dir) as entries:
            return sorted(e.name for e in entries if e.is_file())

    def _delete(self, path: Path, why: str) -> None:
        log.info("deleting %s (%s)", path, why)
        path.unlink(missing_ok=True)
        self.report.deleted_files.append(path.name)

    def _remove_temp_files_and_collect_swaps(self) -> list[Path]:
        cleaned: list[Path] = []
        swaps: list[Path] = []
        for name in self._files():
            if name.endswith(names.DELETED_SUFFIX):
                self._delete(self.dir / name, "left from a deletion")
            elif name.endswith(names.CLEANED_SUFFIX):
                cleaned.append(self.dir / name)
            elif name.endswith(names.SWAP_SUFFIX):
                swaps.append(self.dir / name)
        min_cleaned = min((names.offset_from_file_name(p.name) for p in cleaned), default=None)
        valid_swaps = []
        for path in swaps:
            if min_cleaned is not None and names.offset_from_file_name(path.name) >= min_cleaned:
                self._delete(path, "swap of an interrupted replacement, at or above a .cleaned file")
            else:
                valid_swaps.append(path)
        for path in cleaned:
            self._delete(path, "output of an interrupted replacement")
        return valid_swaps

    def _complete_swaps(self, swaps: list[Path]) -> None:
        log_swaps = [p for p in swaps if names.strip_temp_suffix(p.name).endswith(names.LOG_SUFFIX)]
        if not swaps:
            return
        lo, hi = None, None
        for path in log_swaps:
            seg = self.open_segment(names.offset_from_file_name(path.name), names.SWAP_SUFFIX)
            try:
                lo = seg.base_offset if lo is None else min(lo, seg.base_offset)
                nxt = seg.read_next_offset()
                hi = nxt if hi is None else max(hi, nxt)
            finally:
                seg.close_handlers()
        if lo is not None and hi is not None:
            for name in self._files():
                if name.endswith(names.SWAP_SUFFIX):
                    continue
                try:
                    offset = names.offset_from_file_name(name)
                except ValueError:
                    continue
                if lo <= offset < hi:
                    self._delete(self.dir / name, "replaced by a completed swap")
        for name in self._files():
            if name.endswith(names.SWAP_SUFFIX):
                target = names.strip_temp_suffix(name)
                (self.dir / name).rename(self.dir / target)
                self.report.renamed_swaps.append(target)
        fsync_dir(self.dir)

    def _load_segments(self) -> None:
        files = self._files()
        present = set(files)
        # the last segment's indexes open now, and so are checked whole: it is the one a process
        # that died without closing the log left extended past its entries (the log resizes it at
        # once anyway). The others were trimmed when rolled and open when first used (lazy_index.py)
        active = max((n for n in files if n.endswith(names.LOG_SUFFIX) and n[:20].isdigit()), default=None)
        for name in files:
            if name.endswith(names.INDEX_SUFFIXES):
                try:
                    offset = names.offset_from_file_name(name)
                except ValueError:
                    continue
                if names.filename_prefix(offset) + names.LOG_SUFFIX not in present:
                    self._delete(self.dir / name, "orphan index file with no .log")
            elif name.endswith(names.LOG_SUFFIX):
                try:
                    offset = names.offset_from_file_name(name)
                except ValueError:
                    log.warning("ignoring %s: not a segment file name", self.dir / name)
                    continue
                # nothing else writes the directory while it loads: the listing says which
                # segments have a .txnindex (most have none; looking for each costs a failed open)
                txn_absent = names.filename_prefix(offset) + names.TXN_INDEX_SUFFIX not in present
                seg = self.open_segment(offset, open_indexes=name == active, txn_index_absent=txn_absent)
                self.segments.add(seg)
                try:
                    seg.sanity_check()
                except (FileNotFoundError, CorruptIndexError) as e:
                    log.warning("rebuilding indexes of %s: %s", self.dir / name, e)
                    self._recover_segment(seg)
                    self.report.rebuilt_indexes.append(name)

    def _recover_segment(self, seg: LogSegment) -> int:
        """Recover one segment (splitting it when its offsets overflow); return bytes cut."""
        try:
            result = seg.recover()
        except LogSegmentOffsetOverflowError:
            self._split(seg)
            return 0
        if seg.name not in self.report.recovered_segments:  # an index rebuild at load, then recovery
            self.report.recovered_segments.append(seg.name)
        if result.truncated_bytes:
            self.report.truncated.append((seg.name, result.truncated_bytes, result.reason))
        return result.truncated_bytes

    def _split_overflowed_segments(self) -> None:
        segments = self.segments.values()
        for seg, after in zip(segments, [*segments[1:], None]):
            # a segment's offsets stay below the next one's base: when that is within 2^31 of this
            # base, none can overflow, and its last batch need not be read (nor its index opened)
            if after is not None and after.base_offset - 1 - seg.base_offset <= INT32_MAX:
                continue
            if seg.size_in_bytes and seg.has_overflow():
                self._split(seg)

    def _split(self, seg: LogSegment) -> None:
        """Rewrite a segment whose offsets overflow into segments that each fit (KAFKA-6264)."""
        log.warning("splitting %s: it holds offsets beyond %d + 2^31 - 1", seg.log.path, seg.base_offset)
        name = seg.name
        with seg.log.mapped() as buf:
            table = scan_batches(buf, 0, seg.size_in_bytes)
            groups: list[tuple[int, int, int]] = []  # (base offset, start, end)
            for i in range(len(table)):
                pos, size = int(table.position[i]), int(table.size[i])
                base, last = int(table.base_offset[i]), int(table.base_offset[i] + table.last_offset_delta[i])
                if groups and last - groups[-1][0] <= INT32_MAX:
                    groups[-1] = (groups[-1][0], groups[-1][1], pos + size)
                else:
                    groups.append((base, pos, pos + size))
            new_segments = []
            for base, start, end in groups:
                new = self.open_segment(base, names.CLEANED_SUFFIX)
                part = bytes(buf[start:end])
                new.log.append(part)
                new_segments.append(new)
        for i, new in enumerate(new_segments):
            result = new.recover()  # builds the indexes of the copied batches
            new.flush()
            if result.truncated_bytes:
                # a damaged batch inside the overflowed segment: as in recovery, nothing after
                # a cut is kept — the later parts are dropped with the cut reported
                self.report.truncated.append((name, result.truncated_bytes, result.reason))
                for later in new_segments[i + 1:]:
                    self.report.truncated.append((name, later.size_in_bytes, "follows a cut part"))
                    later.delete_if_exists()
                new_segments = new_segments[:i + 1]
                break
        replace_segments(self.segments, new_segments, [seg], directory=self.dir,
                         schedule_delete=_delete_now)
        self.report.split_segments.append(name)

    def _recover(self) -> tuple[int, int]:
        if not self.had_clean_shutdown:
            unflushed = self.segments.values(self.recovery_point, None)
            for i, seg in enumerate(unflushed):
                log.info("recovering unflushed segment %s", seg.log.path)
                if self._recover_segment(seg) > 0:
                    for later in unflushed[i + 1:]:
                        log.warning("deleting %s: it follows a segment cut by recovery", later.log.path)
                        self.segments.remove(later.base_offset)
                        later.delete_if_exists()
                        self.report.deleted_segments.append(later.name)
                    break
        log_end = self._delete_segments_if_log_start_beyond_end()
        if len(self.segments) == 0:
            self.segments.add(self.open_segment(self.log_start_offset))
        if self.had_clean_shutdown and log_end is not None:
            return log_end, log_end
        last = self.segments.last
        assert last is not None
        end = log_end if log_end is not None else last.read_next_offset()
        return min(self.recovery_point, end), end

    def _delete_segments_if_log_start_beyond_end(self) -> int | None:
        last = self.segments.last
        if last is None:
            return None
        log_end = last.read_next_offset()
        if log_end < self.log_start_offset:
            log.warning("log end offset %d is below the log start offset %d in %s: deleting all segments",
                        log_end, self.log_start_offset, self.dir)
            for seg in self.segments.values():
                self.segments.remove(seg.base_offset)
                seg.delete_if_exists()
                self.report.deleted_segments.append(seg.name)
            return None
        return log_end


def _delete_now(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.delete_if_exists()
