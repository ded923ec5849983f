"""`logkeeper verify DIR`: a read-only check of a log directory or one partition directory.

For every segment: the ``.log`` holds whole v2 batches with valid CRCs up to its end, every
batch's records walk cleanly, offsets increase across batches and segments and fit the segment
(an int32 delta from its base); the ``.index`` entries increase and each points at the start of
a batch whose last offset is the entry's offset (the rule Kafka's DumpLogSegments checks); the
``.timeindex`` entries increase and each names a batch whose max timestamp is the entry's
timestamp; the ``.txnindex`` holds whole version-0 entries in order, each ending at or above the
segment's base offset. Checkpoint files must parse. A producer snapshot (``.snapshot``) that
fails its CRC or lies above the log end is a note, not a problem: the next load deletes it and
scans the segments. Nothing is written: files are opened read-only.

Trailing all-zero index entries are preallocated space of an active segment, not entries.
Leftover ``.cleaned``/``.swap`` files (an interrupted clean) are one note per partition, not
problems (the next load deals with them); ``.deleted`` files are normal and not mentioned.
A directory that is neither a log dir nor a partition directory, or a log dir with no
partition, is refused (exit 2): there is nothing to verify. The command says on stderr, every 10 s
of a longer check, how many of the segments and MB it has checked (``on_segment``, progress_lines.py).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CorruptRecordError, UsageError
from ..log import names, producer_snapshot
from ..log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
)
from ..log_dir_rule import partitions_of, require_log_or_partition_dir
from ..progress_lines import MIB
from ..records.batch_format import CODEC_MASK, HEADER_SIZE
from ..records.compression import Codec, decompress
from ..records.scan import BatchTable, ScanStop, first_crc_mismatch, scan_batches, walk_records

INT32_MAX = (1 << 31) - 1
STOP_REASONS = {ScanStop.SHORT_TAIL: "torn batch (the file ends inside it)", ScanStop.BAD_MAGIC: "bad magic",
                ScanStop.BAD_SIZE: "batch length below the header size"}
INTERRUPTED_CLEAN_SUFFIXES = (names.CLEANED_SUFFIX, names.SWAP_SUFFIX)


@dataclass(frozen=True)
class Problem:
    file: str
    position: int | None
    message: str

    def __str__(self) -> str:
        where = f" at position {self.position}" if self.position is not None else ""
        return f"{self.file}{where}: {self.message}"


@dataclass
class VerifyReport:
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    # for the progress line (with ``on_segment`` only): the .log bytes checked, and the segments
    # and bytes there are to check
    bytes: int = 0
    segments_total: int = 0
    bytes_total: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """What was checked, and the verdict (one line)."""
        def n(count: int, what: str) -> str:
            plural = what + ("es" if what.endswith("h") else "s")
            return f"{count:,} {what if count == 1 else plural}"

        checked = (f"checked {n(self.partitions, 'partition')}, {n(self.segments, 'segment')}, "
                   f"{n(self.batches, 'batch')}, {n(self.records, 'record')}")
        return f"OK: {checked}" if self.ok else f"FAILED: {checked}; {n(len(self.problems), 'problem')} (above)"

    def progress_line(self) -> str:
        """How far a verify has come (progress_lines.py prints it for a long one)."""
        return (f"logkeeper verify: {self.segments:,} of {self.segments_total:,} segments "
                f"({self.bytes / MIB:,.1f} of {self.bytes_total / MIB:,.1f} MB) checked")


OnSegment = Callable[[VerifyReport], None]


def verify_path(path: Path, on_segment: OnSegment | None = None) -> VerifyReport:
    """Check a log dir (its checkpoints and partitions) or one partition directory;
    ``on_segment`` is given the report after each segment (the command's progress)."""
    path = Path(path)
    report = VerifyReport()
    if not path.is_dir():
        report.problems.append(Problem(str(path), None, "not a directory"))
        return report
    dirs = partitions_of(path)
    if on_segment is not None:  # the totals its progress line names
        for d in dirs:
            for log_file in _log_files(d):
                report.segments_total += 1
                report.bytes_total += _size(log_file)
    if dirs != [path]:
        _verify_checkpoints(path, report)
    for d in dirs:
        _verify_partition(d, report, on_segment)
    return report


def verify_command(path: Path, on_segment: OnSegment | None = None) -> VerifyReport:
    """`logkeeper verify`: as verify_path, but a directory that is neither a log dir nor a
    partition directory, or a log dir with no partition, is refused (UsageError, exit 2):
    "verified" must mean that something was."""
    path = Path(path)
    require_log_or_partition_dir(path, "verify")
    if not partitions_of(path):
        raise UsageError(f"{path} is a log dir with no partitions: nothing to verify.")
    return verify_path(path, on_segment)


def _log_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(names.LOG_SUFFIX))


def _verify_checkpoints(log_dir: Path, report: VerifyReport) -> None:
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT):
        try:
            OffsetCheckpointFile(log_dir / name).read()
        except CorruptCheckpointError as e:
            report.problems.append(Problem(str(log_dir / name), None, str(e)))


def _verify_partition(d: Path, report: VerifyReport, on_segment: OnSegment | None) -> None:
    report.partitions += 1
    prev_next_offset: int | None = None
    log_end: int | None = None  # the next offset: after the last batch, or an empty last segment's base
    # .deleted files are normal (replaced segments awaiting file.delete.delay.ms): not mentioned.
    # .cleaned/.swap are left by an interrupted clean; the next load resolves them: one note.
    leftovers = sorted(f.name for f in d.iterdir() if f.name.endswith(INTERRUPTED_CLEAN_SUFFIXES))
    if leftovers:
        report.notes.append(f"{d}: {len(leftovers)} file(s) left by an interrupted clean ({', '.join(leftovers)}); "
                            "the next load completes or removes them")
    bases: list[int] = []
    for log_file in _log_files(d):
        report.segments += 1
        try:
            base = names.offset_from_file_name(log_file.name)
        except ValueError:
            report.problems.append(Problem(str(log_file), None, "not a segment file name"))
        else:
            bases.append(base)
            if prev_next_offset is not None and base < prev_next_offset:
                report.problems.append(Problem(str(log_file), None, (
                    f"segment base offset {base} is below the end {prev_next_offset} of the previous segment")))
            batch_last = _verify_segment(log_file, base, prev_next_offset, report)
            if batch_last is not None:
                prev_next_offset = batch_last + 1
            log_end = max(base, prev_next_offset or 0)
        if on_segment is not None:
            report.bytes += _size(log_file)
            on_segment(report)
    _note_snapshots(d, bases, log_end, report)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # removed meanwhile (a live log dir): its problem, if any, is reported already
        return 0


def _note_snapshots(d: Path, bases: list[int], log_end: int | None, report: VerifyReport) -> None:
    """Producer snapshots a load would delete, one note each, in the load's order
    (producer_snapshot.load_plan): strays go unread, then those above the log end, then from the
    latest down each corrupt one until a valid one is read. A corrupt one below that is noted too,
    but a load leaves it. No record is at risk: a load without a snapshot scans the segments."""
    found = producer_snapshot.snapshots(d)
    plan = producer_snapshot.load_plan(found, bases, log_end)
    for offset in plan.strays:
        try:
            producer_snapshot.read(found[offset])
        except producer_snapshot.CorruptSnapshotError as e:
            report.notes.append(f"{e}; at no segment's base offset: the next load deletes it")
    for offset in plan.above:
        report.notes.append(f"{found[offset]}: a producer snapshot above the log end offset {log_end}; the next "
                            "load deletes it")
    valid_found = False
    for offset in plan.candidates:
        try:
            producer_snapshot.read(found[offset])
        except producer_snapshot.CorruptSnapshotError as e:
            report.notes.append(f"{e}; " + ("not read while a later snapshot is valid" if valid_found else
                                            "the next load deletes it and reads an older one or the segments"))
            continue
        valid_found = True


def map_file(path: Path) -> np.ndarray:
    """The file as a read-only array (the map lives as long as the array)."""
    size = path.stat().st_size
    if size == 0:
        return np.zeros(0, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype=np.uint8)


def _verify_segment(log_file: Path, base: int, floor: int | None, report: VerifyReport) -> int | None:
    """Check one segment; return its last offset (None when empty)."""
    name = str(log_file)
    buf = map_file(log_file)
    table = scan_batches(buf, 0, buf.shape[0])
    n = len(table)
    if table.stop_reason != ScanStop.END:
        what = STOP_REASONS.get(table.stop_reason, "unreadable bytes")
        report.problems.append(Problem(name, table.stop_position, what))
    bad = first_crc_mismatch(buf, table)
    if bad >= 0:
        report.problems.append(Problem(name, int(table.position[bad]), (
            f"CRC mismatch in the batch at base offset {int(table.base_offset[bad])}")))
        n = bad
    report.batches += n
    last_offsets = table.base_offset[:n] + table.last_offset_delta[:n]
    for i in range(n):
        pos, bo, lo = int(table.position[i]), int(table.base_offset[i]), int(last_offsets[i])
        if bo < base or lo - base > INT32_MAX:
            report.problems.append(Problem(name, pos, f"batch offsets {bo}..{lo} outside the segment's range"))
        if (i > 0 and bo <= int(last_offsets[i - 1])) or (i == 0 and floor is not None and bo < floor):
            report.problems.append(Problem(name, pos, f"batch base offset {bo} does not follow the previous batch"))
        if int(table.last_offset_delta[i]) < 0:
            report.problems.append(Problem(name, pos, "negative lastOffsetDelta"))
    report.records += _verify_records(buf, table, n, name, report)
    # index entries past the valid batches of a damaged .log are not reported again
    damaged = n < len(table) or table.stop_reason != ScanStop.END
    for suffix, dtype, verify_entries, preallocated in _INDEX_CHECKS:
        path = names.segment_file(log_file.parent, base, suffix)
        entries = _index_entries(path, dtype, report, preallocated)
        if entries is not None:
            verify_entries(path, entries, base, table, n, last_offsets, damaged, report)
    return int(last_offsets[n - 1]) if n else None


def _verify_records(buf: np.ndarray, table: BatchTable, n: int, name: str, report: VerifyReport) -> int:
    if n == 0:
        return 0
    codecs = table.attributes[:n] & CODEC_MASK
    plain = np.flatnonzero(codecs == 0)
    count = 0
    try:
        if plain.size:
            starts = table.position[plain] + HEADER_SIZE
            ends = table.position[plain] + table.size[plain]
            count += walk_records(buf, starts, ends, table.record_count[plain], table.base_offset[plain],
                                  table.base_timestamp[plain]).count
    except CorruptRecordError as e:
        report.problems.append(Problem(name, e.position, f"{e.fault}: {e.detail}"))
    for i in np.flatnonzero(codecs != 0).tolist():
        pos, size = int(table.position[i]), int(table.size[i])
        try:
            raw = decompress(Codec(int(codecs[i])), buf[pos + HEADER_SIZE:pos + size].data, pos)
            area = np.frombuffer(raw, dtype=np.uint8)
            count += walk_records(area, [0], [len(raw)], [int(table.record_count[i])],
                                  [int(table.base_offset[i])], [int(table.base_timestamp[i])]).count
        except CorruptRecordError as e:
            report.problems.append(Problem(name, pos, f"{e.fault} in the compressed records: {e.detail}"))
        except ValueError as e:
            report.problems.append(Problem(name, pos, f"unknown codec: {e}"))
    return count


def _entries(path: Path, dtype: np.dtype, preallocated: bool) -> np.ndarray | None:
    if not path.exists():
        return None
    data = np.fromfile(path, dtype=np.uint8)
    usable = data.shape[0] - data.shape[0] % dtype.itemsize
    entries = data[:usable].view(dtype)
    if not preallocated:
        return entries
    # trailing all-zero entries are the preallocated tail of an active segment's index
    nonzero = np.flatnonzero(data[:usable].reshape(-1, dtype.itemsize).any(axis=1)) if usable else np.zeros(0)
    keep = int(nonzero[-1]) + 1 if nonzero.size else 0
    return entries[:keep]


def _index_entries(path: Path, dtype: np.dtype, report: VerifyReport, preallocated: bool) -> np.ndarray | None:
    """The written entries of an index file (a size not a whole number of entries is a problem,
    the whole entries are still checked; trailing zeros are preallocated space only in a file
    that is ``preallocated``); None when there is no file or no entry."""
    if path.exists() and path.stat().st_size % dtype.itemsize:
        report.problems.append(Problem(str(path), None, f"size is not a multiple of {dtype.itemsize}"))
    entries = _entries(path, dtype, preallocated)
    if entries is None or entries.shape[0] == 0:
        return None
    return entries


def _verify_offset_index(path: Path, entries: np.ndarray, base: int, table: BatchTable, n: int,
                         last_offsets: np.ndarray, damaged: bool, report: VerifyReport) -> None:
    rel, pos = entries["rel"].astype(np.int64), entries["pos"].astype(np.int64)
    by_position = {int(p): i for i, p in enumerate(table.position[:n].tolist())}
    prev_rel, prev_pos = -1, -1
    for k in range(entries.shape[0]):
        r, p = int(rel[k]), int(pos[k])
        if r <= prev_rel or p <= prev_pos:
            report.problems.append(Problem(str(path), k * 8, f"entry {k} ({base + r}, {p}) does not increase"))
            return
        prev_rel, prev_pos = r, p
        if damaged and p >= (int(table.position[n - 1] + table.size[n - 1]) if n else 0):
            return  # beyond the valid batches: already reported as a problem of the .log
        row = by_position.get(p)
        if row is None:
            report.problems.append(Problem(str(path), k * 8, f"entry {k} points at position {p}, not a batch start"))
            return
        if int(last_offsets[row]) != base + r:
            report.problems.append(Problem(str(path), k * 8, (
                f"entry {k} says offset {base + r} at position {p}; the batch there ends at "
                f"offset {int(last_offsets[row])}")))
            return


def _verify_time_index(path: Path, entries: np.ndarray, base: int, table: BatchTable, n: int,
                       last_offsets: np.ndarray, damaged: bool, report: VerifyReport) -> None:
    max_by_last = {int(lo): int(ts) for lo, ts in zip(last_offsets.tolist(), table.max_timestamp[:n].tolist())}
    prev_ts, prev_rel = None, -1
    for k in range(entries.shape[0]):
        ts, r = int(entries["ts"][k]), int(entries["rel"][k])
        if (prev_ts is not None and ts <= prev_ts) or r < prev_rel:
            report.problems.append(Problem(str(path), k * 12, f"entry {k} ({ts}, {base + r}) does not increase"))
            return
        prev_ts, prev_rel = ts, r
        if damaged and (n == 0 or base + r > int(last_offsets[n - 1])):
            return  # beyond the valid batches: already reported as a problem of the .log
        if max_by_last.get(base + r) != ts:
            report.problems.append(Problem(str(path), k * 12, (
                f"entry {k} says timestamp {ts} at offset {base + r}; no batch ending there has that "
                "max timestamp")))
            return


def _verify_txn_index(path: Path, entries: np.ndarray, base: int, table: BatchTable, n: int,
                      last_offsets: np.ndarray, damaged: bool, report: VerifyReport) -> None:
    """Kafka's own checks of a transaction index (each entry of version 0, its transaction
    ending at or after the segment's base offset), its transaction ending after it began, and the
    order entries are appended in. An entry's marker may lie in a later segment (a cleaned
    segment lists the aborted transactions that overlap it) or be gone (the cleaner removes
    markers), so it is not looked up."""
    prev_last = -1
    for k in range(entries.shape[0]):
        version, pid, first, last = (int(entries[f][k]) for f in ("version", "pid", "first", "last"))
        what = f"entry {k} (producer {pid}, offsets {first}..{last})"
        if version != 0:
            report.problems.append(Problem(str(path), k * 34, f"{what} has version {version}, not 0"))
            return
        if last < base or first > last or last < prev_last:
            report.problems.append(Problem(str(path), k * 34, (
                f"{what} ends below the segment's base offset {base}, before it begins, or before the entry "
                "ahead of it")))
            return
        prev_last = last


# each index file of a segment: its suffix, its entry layout (big-endian), the check of its entries
# and whether trailing zero bytes are preallocated space (the offset and time indexes of an active
# segment) rather than entries
_IndexCheck = Callable[[Path, np.ndarray, int, BatchTable, int, np.ndarray, bool, VerifyReport], None]
_INDEX_CHECKS: tuple[tuple[str, np.dtype, _IndexCheck, bool], ...] = (
    (names.INDEX_SUFFIX, np.dtype([("rel", ">i4"), ("pos", ">i4")]), _verify_offset_index, True),
    (names.TIME_INDEX_SUFFIX, np.dtype([("ts", ">i8"), ("rel", ">i4")]), _verify_time_index, True),
    (names.TXN_INDEX_SUFFIX, np.dtype([("version", ">i2"), ("pid", ">i8"), ("first", ">i8"), ("last", ">i8"),
                                       ("lso", ">i8")]), _verify_txn_index, False),
)
