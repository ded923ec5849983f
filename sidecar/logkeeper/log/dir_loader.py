"""Loading every partition of the log directories at startup (Kafka's LogManager.loadLogs).

For the online log directories, in this order:

1. Every directory's sub-directories are listed (``LogDir.partition_dirs``), the offline ones
   too where they can still be listed (a full disk reads fine): their partitions are reported as
   offline, never forgotten, so nothing re-creates them elsewhere. A partition with a directory
   in two log directories (left by a disk that came back after the partition was made again on
   another one) is loaded from neither: it is reported offline with both paths, its
   checkpoint entries are held so the directory's checkpoints keep them, and every other
   partition loads (``logkeeper resolve-duplicates`` keeps the copy with the higher log end
   offset and renames the other ``-stray``).
2. Per directory: stale ``*.tmp`` files are removed; the clean-shutdown marker is taken (read,
   then deleted durably, so a crash while loading forces recovery next time); the recovery-point
   and log-start-offset checkpoints are read (an unreadable one is logged and ignored: the logs
   recover from offset 0 and start at their first segment).
3. Per directory, a pool of ``threads_per_dir`` threads loads its partitions (``Log(...)``, which
   recovers the segments after an unclean shutdown). ``-delete`` directories are not loaded:
   the caller queues them for deletion. ``-stray`` and ``-future`` ones are left alone and
   reported (``LogDir.stray``).

An OSError in a directory takes that directory offline: its loaded logs are closed and the
others go on. Any other error is fatal: every log loaded so far is closed and the error raised.
``should_stop`` is checked before each partition: a shutdown during startup skips the rest, and
the directory then stays ``load_completed = False`` (no clean-shutdown marker for it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from .log import Clock, Log
from .log_config import LogConfig
from .log_dir import LogDir, PartitionDirs
from .names import TopicPartition

log = logging.getLogger(__name__)

LogFactory = Callable[..., Log]


@dataclass
class LoadResult:
    logs: dict[TopicPartition, tuple[Log, LogDir]] = field(default_factory=dict)
    to_delete: list[tuple[Path, LogDir]] = field(default_factory=list)
    failed: dict[Path, str] = field(default_factory=dict)  # log dir -> error, for dirs taken offline
    listed: dict[Path, list[tuple[TopicPartition, Path]]] = field(default_factory=dict)  # every dir listed
    duplicates: dict[TopicPartition, list[tuple[LogDir, Path]]] = field(default_factory=dict)
    elapsed_ms: float = 0.0


def read_checkpoint(checkpoint: OffsetCheckpointFile, what: str) -> dict[TopicPartition, int]:
    try:
        return checkpoint.read()
    except (CorruptCheckpointError, OSError, UnicodeDecodeError) as e:
        log.warning("cannot read %s checkpoint %s, starting from 0: %s", what, checkpoint.path, e)
        return {}


def _split_duplicates(dirs: list[LogDir], listings: dict[Path, PartitionDirs]
                      ) -> dict[TopicPartition, list[tuple[LogDir, Path]]]:
    """The partitions listed in more than one directory (taken out of the listings: none of their
    copies is loaded). Checked before anything changes on disk."""
    where: dict[TopicPartition, list[tuple[LogDir, Path]]] = {}
    for d in dirs:
        listing = listings.get(d.path)
        for tp, path in listing.logs if listing is not None else ():
            where.setdefault(tp, []).append((d, path))
    duplicates = {tp: copies for tp, copies in where.items() if len(copies) > 1}
    for listing in listings.values():
        listing.logs = [(tp, path) for tp, path in listing.logs if tp not in duplicates]
    return duplicates


def _hold_checkpoints(d: LogDir, duplicated: list[TopicPartition], recovery_points: dict[TopicPartition, int],
                      start_offsets: dict[TopicPartition, int]) -> None:
    """Keep the checkpoint entries of the partitions not loaded from ``d`` (written back with the
    directory's checkpoints until the partition loads again)."""
    d.held_recovery_points = {tp: recovery_points[tp] for tp in duplicated if tp in recovery_points}
    d.held_start_offsets = {tp: start_offsets[tp] for tp in duplicated if tp in start_offsets}


def load_log_dirs(dirs: list[LogDir], *, config_for: Callable[[str], LogConfig], threads_per_dir: int,
                  clock_ms: Clock, should_stop: Callable[[], bool] = lambda: False,
                  open_log: LogFactory = Log) -> LoadResult:
    started = time.monotonic()
    result = LoadResult()
    online = [d for d in dirs if d.online]
    listings: dict[Path, PartitionDirs] = {}
    for d in dirs:
        try:
            listings[d.path] = d.partition_dirs()
        except OSError as e:
            if d.online:
                result.failed[d.path] = f"cannot list log directory {d.path}: {e}"
            # an offline directory that cannot be listed: its partitions are unknown (the service
            # then refuses to create or grow while it is offline)
    result.duplicates = _split_duplicates(dirs, listings)
    result.listed = {path: list(listing.logs) for path, listing in listings.items()}
    lock = threading.Lock()
    pools: list[ThreadPoolExecutor] = []
    jobs: list[tuple[LogDir, Future[None]]] = []
    try:
        for d in online:
            if d.path in result.failed:
                continue
            try:
                d.remove_stale_temp_files()
                clean = d.take_clean_shutdown_marker()
                recovery_points = read_checkpoint(d.recovery_point_checkpoint, "recovery point")
                start_offsets = read_checkpoint(d.log_start_offset_checkpoint, "log start offset")
                _hold_checkpoints(d, [tp for tp, copies in result.duplicates.items()
                                      if any(c is d for c, _p in copies)], recovery_points, start_offsets)
            except OSError as e:
                result.failed[d.path] = f"cannot prepare log directory {d.path} for loading: {e}"
                continue
            listing = listings[d.path]
            d.stray = listing.stray + listing.future
            result.to_delete += [(p, d) for p in listing.to_delete]
            log.info("loading %d logs from %s (%s shutdown)", len(listing.logs), d.path,
                     "clean" if clean else "unclean: recovering")
            pool = ThreadPoolExecutor(threads_per_dir, thread_name_prefix=f"log-recovery-{d.path}")
            pools.append(pool)

            def load_one(tp: TopicPartition, path: Path, d: LogDir = d, clean: bool = clean,
                         rp: dict[TopicPartition, int] = recovery_points,
                         lso: dict[TopicPartition, int] = start_offsets) -> None:
                if should_stop():
                    raise _Skipped()
                loaded = open_log(path, config_for(tp.topic), log_start_offset=lso.get(tp, 0),
                                  recovery_point=rp.get(tp, 0), had_clean_shutdown=clean, clock_ms=clock_ms)
                with lock:
                    result.logs[tp] = (loaded, d)

            jobs += [(d, pool.submit(load_one, tp, path)) for tp, path in listing.logs]
        _collect(jobs, dirs, result)
    except BaseException:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        for loaded, _d in result.logs.values():
            loaded.close()
        raise
    for pool in pools:
        pool.shutdown(wait=True)
    result.elapsed_ms = (time.monotonic() - started) * 1000
    return result


class _Skipped(Exception):
    """A partition not loaded because a shutdown was requested during startup."""


def _collect(jobs: list[tuple[LogDir, Future[None]]], dirs: list[LogDir], result: LoadResult) -> None:
    fatal: BaseException | None = None
    incomplete: set[Path] = set()
    for d, job in jobs:
        try:
            job.result()
        except _Skipped:
            incomplete.add(d.path)
        except OSError as e:
            incomplete.add(d.path)
            result.failed.setdefault(d.path, f"error while loading log directory {d.path}: {e}")
        except Exception as e:
            fatal = fatal or e
    if fatal is not None:
        raise fatal
    for d in dirs:
        if d.online and d.path not in incomplete and d.path not in result.failed:
            d.load_completed = True
    for tp, (loaded, d) in list(result.logs.items()):
        if d.path in result.failed:
            loaded.close_handlers()
            del result.logs[tp]
