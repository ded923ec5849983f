"""`logkeeper resolve-duplicates LOG_DIR LOG_DIR...`: settle partitions that have a directory in two
log directories, without deleting anything.

How a partition gets two copies: its disk failed, the partition was made again on another disk
(logkeeper itself no longer does that, but an older version or a hand-made copy could), and the
first disk came back. The sidecar then serves neither copy (the partition is offline, with both
paths in its error) and everything else as usual.

For each such partition, the copy with the higher log end offset is kept (it holds every record
the other acknowledged, or more); ``--keep PATH`` chooses by hand, and a tie without it is an
error naming both paths. Each other copy is renamed in place to Kafka's stray form
``<topic>-<partition>.<uuid>-stray`` (the loader leaves those alone and reports them), and its
parent directory is fsynced. Restart the sidecar afterwards: it loads the kept copy.

Read-only up to the renames: the log end offset of a copy is read from its segments' valid
batches (a torn or corrupt tail ends the count), as recovery would compute it. Safe while a
sidecar runs: it has opened neither copy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, TextIO

from ..errors import UsageError
from ..fileio import fsync_dir
from ..log import names
from ..log.log_dir import LogDir, capped_special_dir_name
from ..log_dir_rule import require_log_dir
from ..records.scan import first_crc_mismatch, scan_batches
from .verify import map_file


class Copy(NamedTuple):
    path: Path
    log_end_offset: int
    size_bytes: int


class ResolveError(UsageError):
    """A duplicate that cannot be settled without the user's choice (the message names the paths):
    exit 2, as the fix is in the command line (--keep)."""


def _segment_end(log_file: Path) -> int | None:
    """One past the last offset of the segment's valid batches, or None when it has none."""
    buf = map_file(log_file)
    table = scan_batches(buf, 0, buf.shape[0])
    n = len(table)
    bad = first_crc_mismatch(buf, table)
    if bad >= 0:
        n = bad
    return int(table.base_offset[n - 1]) + int(table.last_offset_delta[n - 1]) + 1 if n else None


def log_end_offset(partition_dir: Path) -> int:
    """The copy's log end offset: the end of its last segment that has a valid batch, else the base
    offset of its last segment (an empty active segment starts at the end), else 0."""
    segments = sorted((p for p in partition_dir.iterdir() if p.name.endswith(names.LOG_SUFFIX)),
                      key=lambda p: names.offset_from_file_name(p.name))
    for seg in reversed(segments):
        end = _segment_end(seg)
        if end is not None:
            return end
    return names.offset_from_file_name(segments[-1].name) if segments else 0


def find_duplicates(log_dirs: Sequence[Path]) -> dict[names.TopicPartition, list[Path]]:
    """Partition -> its directories, for the partitions found in more than one log directory."""
    where: dict[names.TopicPartition, list[Path]] = {}
    for d in log_dirs:
        for tp, path in LogDir(d).partition_dirs().logs:
            where.setdefault(tp, []).append(path)
    return {tp: paths for tp, paths in where.items() if len(paths) > 1}


def choose(tp: names.TopicPartition, copies: list[Copy], keep: Path | None) -> Copy:
    if keep is not None:
        for c in copies:
            if c.path.resolve() == keep.resolve():
                return c
        raise ResolveError(f"--keep {keep} is not one of the copies of {tp}: "
                           + ", ".join(str(c.path) for c in copies))
    best = max(c.log_end_offset for c in copies)
    top = [c for c in copies if c.log_end_offset == best]
    if len(top) > 1:
        raise ResolveError(f"the copies of {tp} end at the same offset {best}: "
                           + " and ".join(f"{c.path} ({c.size_bytes} bytes)" for c in top)
                           + "; choose one with --keep PATH")
    return top[0]


def resolve(log_dirs: Sequence[Path], out: TextIO, *, keep: Sequence[Path] = (), dry_run: bool = False) -> int:
    """Settle every duplicated partition; return how many. Raises ResolveError (nothing renamed for
    that partition) when one cannot be settled."""
    for d in log_dirs:  # every one before anything is renamed
        require_log_dir(Path(d), "resolve-duplicates")
    duplicates = find_duplicates([Path(d) for d in log_dirs])
    if not duplicates:
        out.write("no partition has a directory in two of these log directories\n")
        return 0
    every_copy = {p.resolve() for paths in duplicates.values() for p in paths}
    for k in keep:  # a mistyped --keep must not let the automatic choice run instead
        if k.resolve() not in every_copy:
            raise ResolveError(f"--keep {k} is not one of the copies of a duplicated partition: "
                               + ", ".join(sorted(map(str, every_copy))))
    for tp, paths in sorted(duplicates.items(), key=lambda x: (x[0].topic, x[0].partition)):
        copies = [Copy(p, log_end_offset(p), sum(f.stat().st_size for f in p.iterdir() if f.is_file()))
                  for p in paths]
        wanted = [k for k in keep if any(k.resolve() == c.path.resolve() for c in copies)]
        kept = choose(tp, copies, wanted[0] if wanted else None)
        for c in copies:
            out.write(f"{tp}: {c.path}: log end offset {c.log_end_offset}, {c.size_bytes} bytes"
                      f"{' (kept)' if c is kept else ''}\n")
        for c in copies:
            if c is kept:
                continue
            target = c.path.parent / capped_special_dir_name(tp, names.STRAY_DIR_SUFFIX)
            if dry_run:
                out.write(f"{tp}: would rename {c.path} to {target}\n")
                continue
            os.rename(c.path, target)
            fsync_dir(c.path.parent)
            out.write(f"{tp}: renamed {c.path} to {target} (nothing deleted)\n")
    if not dry_run:
        out.write("restart the sidecar to serve the kept copies\n")
    return len(duplicates)
