"""LogManager: the logs of every partition on this node, spread over several log directories.

Kafka's LogManager for one node, on ``Log``. Life cycle:

- ``LogManager(config, clock_ms=..., scheduler=...)`` opens the log directories: duplicates (by
  canonical path) raise DuplicateLogDirError; missing ones are created; one that cannot be created
  or read goes offline with its error (NoLiveLogDirsError when none is left); each online one is
  locked (``.lock``): a directory in use by another process raises LogDirLockedError naming it.
- ``startup()`` loads every partition (``dir_loader.py``), queues ``-delete`` directories, and
  schedules the background tasks (``manager_tasks.py``) on the scheduler. Without a scheduler
  passed in, the manager makes one and runs it in a thread; with one, the caller drives it
  (``tick`` in virtual time, or ``start``).
- ``shutdown(broker_epoch)`` stops the tasks, then per directory flushes and closes the logs,
  writes the checkpoints and the clean-shutdown marker, and releases the lock.

I/O failures: every operation that touches a directory runs inside ``io_guard``: an OSError
takes that directory offline (``handle_log_dir_failure``: its logs are closed and dropped, the
cleaner is told, its lock released) and is raised as KafkaStorageError naming the directory.
The other directories go on; ``dir_status()`` shows the error.

Offline partitions (Kafka's LogDirFailureChannel): a partition whose directory is offline (failed
now, or at startup while it could still be listed), or that has a copy in two directories, stays
known: ``offline_partitions()`` lists it with its directory and the reason; it raises
KafkaStorageError on use, and nothing creates it again (a new empty log elsewhere would hide its
data and restart its offsets at 0). Partitions the manager does not know raise
UnknownPartitionError.

Numbered crash steps (``crash_hook(step)`` is called after each; a test per step):

``delete_log(tp)``
  1. ``delete:closed``: cleaning aborted, log dropped from the manager and closed. A crash here
     leaves the plain directory: the partition is loaded again at the next start.
  2. ``delete:renamed``: directory renamed ``<topic>-<partition>.<uuid>-delete``, parent fsynced.
     From here the next start queues it for removal.
  3. ``delete:checkpointed``: the directory's checkpoints rewritten without the partition.
``shutdown``
  1-3. ``shutdown:closed``, ``shutdown:checkpointed``, ``shutdown:marked``: per directory,
     dir_shutdown.py.
  4. ``shutdown:unlocked``: locks released (``.lock`` deleted).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import (
    KafkaStorageError,
    LogDirNotFoundError,
    LogDirUnusableError,
    NoLiveLogDirsError,
    UnknownPartitionError,
)
from ..fileio import CrashHook, fsync_dir, no_crash
from . import names
from .assign import LogAppendInfo
from .cleaner_hooks import CleanerHooks
from .dir_loader import LogFactory, load_log_dirs
from .dir_shutdown import shutdown_dir
from .log import Clock, Log, wall_clock_ms
from .log_config import LogConfig
from .log_dir import LogDir, LogDirStatus, capped_special_dir_name, open_log_dirs
from .manager_config import ManagerConfig
from .manager_tasks import ManagerTasks
from .scheduler import Scheduler
from .segment import FetchData

log = logging.getLogger(__name__)


class OfflinePartition(NamedTuple):
    """A partition the manager knows but cannot serve."""

    log_dir: LogDir  # its directory (for a copy in two directories: the first one)
    reason: str
    paths: tuple[str, ...]  # its partition directories on disk, when known


def duplicate_reason(tp: names.TopicPartition, paths: list[str]) -> str:
    dirs = " ".join(str(Path(p).parent) for p in paths)
    return (f"partition {tp} has a directory in {len(paths)} log directories: {' and '.join(paths)}; "
            f"neither is served. Run `logkeeper resolve-duplicates {dirs}` to keep the copy with the "
            f"higher log end offset (the other is renamed -stray, never deleted), then restart")


class LogManager:
    def __init__(self, config: ManagerConfig, *, clock_ms: Clock = wall_clock_ms,
                 scheduler: Scheduler | None = None,
                 topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
                 open_log: LogFactory = Log) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.cleaner_hooks = CleanerHooks()
        self.crash_hook: CrashHook = no_crash
        self._default_config = config.default_log_config
        self._topic_overrides: dict[str, dict[str, Any]] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        for topic, props in (topic_configs or {}).items():
            self._set_topic_overrides(topic, props)
        self._open_log = open_log
        self._own_scheduler = scheduler is None
        self.scheduler = scheduler if scheduler is not None else Scheduler(clock_ms)
        self._lock = threading.RLock()  # logs, dirs, create/delete, failures
        self._startup_lock = threading.Lock()
        self._stopping = threading.Event()
        self._started = False
        self._closed = False
        self._logs: dict[names.TopicPartition, Log] = {}
        self._dir_of: dict[names.TopicPartition, LogDir] = {}
        self._offline: dict[names.TopicPartition, OfflinePartition] = {}
        self.tasks = ManagerTasks(self)
        self.dirs = open_log_dirs(config.log_dirs)
        self._open_dirs()

    # ------------------------------------------------------------------ directories
    def _open_dirs(self) -> None:
        for d in self.dirs:
            try:
                d.prepare()
                d.lock()
            except LogDirUnusableError as e:
                log.error("%s", e)
                d.mark_offline(str(e))
            except OSError as e:
                msg = f"disk error while locking log directory {d.path}: {e}"
                log.error("%s", msg)
                d.mark_offline(msg)
            except BaseException:
                self._unlock_all()
                raise
        if not any(d.online for d in self.dirs):
            raise NoLiveLogDirsError("no usable log directory: " + "; ".join(
                f"{d.path}: {d.error}" for d in self.dirs))

    def _unlock_all(self) -> None:
        for d in self.dirs:
            d.unlock()

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d.path for d in self.dirs if d.online]

    @property
    def offline_log_dirs(self) -> list[Path]:
        return [d.path for d in self.dirs if not d.online]

    def log_dir(self, path: str | os.PathLike[str]) -> LogDir:
        wanted = Path(os.path.abspath(path))
        for d in self.dirs:
            if d.path == wanted:
                return d
        raise LogDirNotFoundError(f"{path} is not one of the log directories {[str(d.path) for d in self.dirs]}")

    def is_log_dir_online(self, path: str | os.PathLike[str]) -> bool:
        return self.log_dir(path).online

    def dir_status(self) -> list[LogDirStatus]:
        """Per directory: online or not, the error, partitions, bytes (for the sidecar status)."""
        with self._lock:
            logs = [(lg, self._dir_of[tp]) for tp, lg in self._logs.items()]
            offline = [o.log_dir for o in self._offline.values()]
        out = []
        for d in self.dirs:
            mine = [lg for lg, ld in logs if ld is d]
            partitions = len(mine) if d.online else sum(1 for ld in offline if ld is d)
            total, usable = d.disk_usage()
            out.append(LogDirStatus(str(d.path), d.online, d.error, partitions,
                                    sum(lg.size_in_bytes for lg in mine), total, usable,
                                    tuple(str(p) for p in d.stray)))
        return out

    # ------------------------------------------------------------------ failures
    @contextmanager
    def io_guard(self, log_dir: LogDir, what: str, target: Log | None = None) -> Iterator[None]:
        """Run a block that does I/O in ``log_dir``: an OSError takes the directory offline and is
        raised as KafkaStorageError. With ``target``, an error on a log that was deleted or closed
        meanwhile raises UnknownPartitionError instead (it was not the disk)."""
        try:
            yield
        except OSError as e:
            if target is not None and self._logs.get(target.topic_partition) is not target:
                self._raise_gone(target, what, e)
            detail = f"{what}: {e}"
            if not self._stopping.is_set():
                self.handle_log_dir_failure(log_dir, detail)
            raise KafkaStorageError(str(log_dir.path), detail,
                                    partition=str(target.topic_partition) if target is not None else None) from e
        except (ValueError, RuntimeError) as e:  # a closed file or index, if the log was closed meanwhile
            if target is not None and self._logs.get(target.topic_partition) is not target:
                self._raise_gone(target, what, e)
            raise

    def _raise_gone(self, target: Log, what: str, cause: BaseException) -> None:
        """Raise for an operation on a log that was dropped while it ran (offline or deleted)."""
        offline = self._offline.get(target.topic_partition)
        if offline is not None:
            raise KafkaStorageError(str(offline.log_dir.path), f"{what}: {offline.reason}",
                                    partition=str(target.topic_partition)) from cause
        raise UnknownPartitionError(f"partition {target.name} was removed during {what}") from cause

    def handle_log_dir_failure(self, log_dir: LogDir | str | os.PathLike[str], error: str) -> None:
        """Take a directory offline: drop and close its logs, tell the cleaner, release its lock.
        (Also for I/O errors met outside the manager, e.g. by the cleaner threads.)"""
        if not isinstance(log_dir, LogDir):
            log_dir = self.log_dir(log_dir)
        with self._lock:
            if not log_dir.online:
                return
            log.error("log directory %s goes offline: %s", log_dir.path, error)
            log_dir.mark_offline(error)
            dropped = [tp for tp, d in self._dir_of.items() if d is log_dir]
            for tp in dropped:
                failed = self._logs.pop(tp)
                del self._dir_of[tp]
                self._offline[tp] = OfflinePartition(log_dir, error, (str(failed.dir),))
                try:
                    failed.close_handlers()
                except Exception as e:  # closing must not stop the others
                    log.warning("closing %s after the failure of %s: %s", failed.name, log_dir.path, e)
            self.tasks.forget_dir(log_dir)
            log_dir.unlock()
            if dropped:
                log.error("partitions offline with %s: %s", log_dir.path, ", ".join(map(str, sorted(
                    dropped, key=lambda tp: (tp.topic, tp.partition)))))
            if not any(d.online for d in self.dirs):
                log.critical("every log directory is offline: %s", ", ".join(str(d.path) for d in self.dirs))
        try:
            self.cleaner_hooks.on_dir_failure(log_dir.path)
        except Exception:
            log.exception("the cleaner failed to handle the failure of %s", log_dir.path)

    # ------------------------------------------------------------------ configs
    def _set_topic_overrides(self, topic: str, props: Mapping[str, Any]) -> LogConfig:
        config = self._default_config.with_overrides(props) if props else self._default_config
        self._topic_overrides[topic] = dict(props)
        self._topic_configs[topic] = config
        return config

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self._default_config)

    @property
    def default_log_config(self) -> LogConfig:
        return self._default_config

    def update_topic_config(self, topic: str, props: Mapping[str, Any]) -> LogConfig:
        """Replace a topic's overrides at run time; every log of the topic takes the new config."""
        with self._lock:
            config = self._set_topic_overrides(topic, props)
            logs = [lg for tp, lg in self._logs.items() if tp.topic == topic]
        for lg in logs:
            was_compact = lg.config.compact
            lg.config = config
            if was_compact and not config.compact:
                self.cleaner_hooks.abort(lg.topic_partition)
        return config

    def update_default_log_config(self, config: LogConfig) -> None:
        """New broker-level defaults: every log takes them under its topic's overrides."""
        with self._lock:
            self._default_config = config
            for topic, props in list(self._topic_overrides.items()):
                self._set_topic_overrides(topic, props)
            logs = list(self._logs.values())
        for lg in logs:
            lg.config = self.config_for(lg.topic_partition.topic)

    # ------------------------------------------------------------------ startup
    def startup(self) -> None:
        with self._startup_lock:
            if self._started or self._stopping.is_set():
                return
            result = load_log_dirs(self.dirs, config_for=self.config_for,
                                   threads_per_dir=self.config.num_recovery_threads_per_data_dir,
                                   clock_ms=self.clock_ms, should_stop=self._stopping.is_set,
                                   open_log=self._open_log)
            with self._lock:
                for tp, (loaded, d) in result.logs.items():
                    self._logs[tp] = loaded
                    self._dir_of[tp] = d
                for path, d in result.to_delete:
                    self.tasks.queue_dir_delete(path, d)
                for tp, copies in result.duplicates.items():
                    paths = [str(p) for _d, p in copies]
                    reason = duplicate_reason(tp, paths)
                    log.error("%s", reason)
                    self._offline[tp] = OfflinePartition(copies[0][0], reason, tuple(paths))
            for path, error in result.failed.items():
                self.handle_log_dir_failure(self.log_dir(path), error)
            self._remember_partitions_of_offline_dirs(result.listed)
            log.info("loaded %d logs in %.0f ms", len(result.logs), result.elapsed_ms)
            if self._stopping.is_set():
                return
            self.tasks.schedule_all()
            if self._own_scheduler:
                self.scheduler.start()
            self._started = True

    def _remember_partitions_of_offline_dirs(self, listed: Mapping[Path, list[tuple[names.TopicPartition, Path]]]
                                             ) -> None:
        """The partitions found in directories that are offline (at open or while loading)."""
        with self._lock:
            for d in self.dirs:
                if d.online:
                    continue
                for tp, path in listed.get(d.path, ()):
                    if tp not in self._offline:
                        self._offline[tp] = OfflinePartition(d, d.error or "the directory is offline", (str(path),))
                if d.path in listed:
                    log.error("log directory %s is offline with %d partitions: %s", d.path, len(listed[d.path]),
                              d.error)

    def offline_partitions(self) -> dict[names.TopicPartition, OfflinePartition]:
        """Every known partition that cannot be served: its directory and the reason (a snapshot)."""
        with self._lock:
            return dict(self._offline)

    # ------------------------------------------------------------------ logs
    def get_log(self, tp: names.TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def current_logs(self) -> dict[names.TopicPartition, Log]:
        """Partition -> log of every online log (a snapshot: e.g. the cleaner's logs provider)."""
        with self._lock:
            return dict(self._logs)

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def logs_by_topic(self, topic: str) -> list[Log]:
        with self._lock:
            return [lg for tp, lg in self._logs.items() if tp.topic == topic]

    def logs_with_dirs(self) -> list[tuple[names.TopicPartition, Log, LogDir]]:
        with self._lock:
            return [(tp, lg, self._dir_of[tp]) for tp, lg in self._logs.items()]

    @property
    def is_stopping(self) -> bool:
        return self._stopping.is_set()

    def logs_in_dir(self, log_dir: LogDir) -> dict[names.TopicPartition, Log]:
        with self._lock:
            return {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] is log_dir}

    def dir_of(self, tp: names.TopicPartition) -> LogDir:
        """The log directory of a partition (online or offline); UnknownPartitionError if none."""
        d = self._dir_of.get(tp)
        if d is not None:
            return d
        offline = self._offline.get(tp)
        if offline is None:
            raise UnknownPartitionError(f"no log for partition {tp}")
        return offline.log_dir

    def raise_if_offline(self, tp: names.TopicPartition) -> None:
        """KafkaStorageError naming the partition and its directory when it is offline."""
        offline = self._offline.get(tp)
        if offline is not None:
            raise KafkaStorageError(str(offline.log_dir.path), f"partition {tp} is offline: {offline.reason}",
                                    partition=str(tp))

    def _require(self, tp: names.TopicPartition) -> tuple[Log, LogDir]:
        with self._lock:
            lg = self._logs.get(tp)
            if lg is not None:
                return lg, self._dir_of[tp]
        self.raise_if_offline(tp)
        raise UnknownPartitionError(f"no log for partition {tp}")

    def get_or_create_log(self, tp: names.TopicPartition, *, is_new: bool = False) -> Log:
        """The partition's log, created in the online directory with the fewest partitions if none.

        Never for an offline partition; unless ``is_new``, creation is refused while a directory
        is offline (the partition may be there: a new empty log would hide its data)."""
        names.validate_topic(tp.topic)
        if tp.partition < 0:
            raise ValueError(f"invalid partition number {tp.partition}")
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            self.raise_if_offline(tp)
            offline = self.offline_log_dirs
            if offline and not is_new:
                raise KafkaStorageError(", ".join(map(str, offline)),
                                        f"cannot create a log for {tp} while these directories are offline")
            counts = {d.path: 0 for d in self.dirs if d.online}
            for d in self._dir_of.values():
                counts[d.path] = counts.get(d.path, 0) + 1
            candidates = sorted((d for d in self.dirs if d.online), key=lambda d: counts[d.path])
            if not candidates:
                raise KafkaStorageError(", ".join(str(d.path) for d in self.dirs), "no log directory is online")
            for d in candidates:
                try:
                    with self.io_guard(d, f"creating the log of {tp}"):
                        path = d.path / tp.dir_name
                        path.mkdir(exist_ok=True)
                        fsync_dir(d.path)
                        created = self._open_log(path, self.config_for(tp.topic), clock_ms=self.clock_ms)
                except KafkaStorageError:
                    continue
                self._logs[tp] = created
                self._dir_of[tp] = d
                log.info("created log for %s in %s", tp, d.path)
                return created
            raise KafkaStorageError(", ".join(str(d.path) for d in candidates),
                                    f"no log directory could hold the log of {tp}")

    def delete_log(self, tp: names.TopicPartition) -> Log | None:
        """Rename the partition's directory to its ``-delete`` form and queue it for removal after
        file.delete.delay.ms (see the crash steps). Returns the removed log (closed)."""
        with self._lock:
            removed = self._logs.pop(tp, None)
            d = self._dir_of.pop(tp, None)
            if removed is None or d is None:
                self.raise_if_offline(tp)
                if self.offline_log_dirs:
                    raise KafkaStorageError(", ".join(map(str, self.offline_log_dirs)),
                                            f"cannot delete {tp}: it may be in an offline directory")
                return None
        self.cleaner_hooks.abort(tp)
        self.cleaner_hooks.remove_partition(d.path, tp)
        with self._offline_on_failure(tp, d), self.io_guard(d, f"deleting the log of {tp}"):
            removed.close()
            self.crash_hook("delete:closed")
            target = d.path / capped_special_dir_name(tp, names.DELETE_DIR_SUFFIX)
            os.rename(removed.dir, target)
            fsync_dir(d.path)
            self.crash_hook("delete:renamed")
            self.tasks.queue_dir_delete(target, d)
            log.info("log of %s renamed to %s, to be removed", tp, target)
            self.tasks.checkpoint_dir(d)
            self.crash_hook("delete:checkpointed")
        return removed

    @contextmanager
    def _offline_on_failure(self, tp: names.TopicPartition, d: LogDir) -> Iterator[None]:
        """A partition already dropped from the manager is offline if its directory fails now."""
        try:
            yield
        except KafkaStorageError as e:
            with self._lock:
                self._offline[tp] = OfflinePartition(d, str(e), (str(d.path / tp.dir_name),))
            raise

    # ------------------------------------------------------------------ data path (guarded)
    def append(self, tp: names.TopicPartition, data: bytes | bytearray | memoryview, *,
               assign_offsets: bool = True, leader_epoch: int = -1) -> LogAppendInfo:
        lg, d = self._require(tp)
        with self.io_guard(d, f"appending to {tp}", lg):
            return lg.append(data, assign_offsets=assign_offsets, leader_epoch=leader_epoch)

    def try_append(self, tp: names.TopicPartition, data: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """``append`` of a client's request when it is quick (Log.try_append), else None."""
        lg, d = self._require(tp)
        with self.io_guard(d, f"appending to {tp}", lg):
            return lg.try_append(data)

    def read(self, tp: names.TopicPartition, start_offset: int, max_bytes: int, *,
             max_offset: int | None = None, min_one_batch: bool = True, whole_batches: bool = True,
             cached_only: bool = False, zero_copy: bool = False) -> FetchData:
        """Log.read; WouldBlock (``cached_only``) passes the I/O guard: it is no disk error."""
        lg, d = self._require(tp)
        with self.io_guard(d, f"reading {tp}", lg):
            return lg.read(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                           whole_batches=whole_batches, cached_only=cached_only, zero_copy=zero_copy)

    def flush(self, tp: names.TopicPartition, offset: int | None = None) -> int:
        """Fsync the partition up to ``offset`` (default: its end); return its recovery point."""
        lg, d = self._require(tp)
        with self.io_guard(d, f"flushing {tp}", lg):
            lg.flush(offset)
            return lg.recovery_point

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offsets: Mapping[names.TopicPartition, int]) -> None:
        """Truncate logs to the given offsets (unknown partitions are skipped); cleaning of a log is
        paused while it is truncated below its active segment; recovery points are checkpointed."""
        affected: list[LogDir] = []
        for tp, offset in offsets.items():
            with self._lock:
                lg, d = self._logs.get(tp), self._dir_of.get(tp)
            if lg is None or d is None:
                continue
            stop_cleaner = offset < lg.active_segment.base_offset
            if stop_cleaner:
                self.cleaner_hooks.abort_and_pause(tp)
            try:
                with self.io_guard(d, f"truncating {tp} to {offset}", lg):
                    if lg.truncate_to(offset) and d not in affected:
                        affected.append(d)
                if stop_cleaner:
                    self.cleaner_hooks.truncate_checkpoint(d.path, tp, lg.active_segment.base_offset)
            finally:
                if stop_cleaner:
                    self.cleaner_hooks.resume(tp)
        for d in affected:
            self.tasks.checkpoint_recovery_points_in_dir(d)

    def truncate_fully_and_start_at(self, tp: names.TopicPartition, new_offset: int) -> None:
        lg, d = self._require(tp)
        self.cleaner_hooks.abort_and_pause(tp)
        try:
            with self.io_guard(d, f"truncating {tp} fully to start at {new_offset}", lg):
                lg.truncate_fully_and_start_at(new_offset)
            self.cleaner_hooks.truncate_checkpoint(d.path, tp, lg.active_segment.base_offset)
        finally:
            self.cleaner_hooks.resume(tp)
        self.tasks.checkpoint_recovery_points_in_dir(d)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write checkpoints and clean-shutdown markers, unlock."""
        self._stopping.set()
        with self._startup_lock:  # waits for a startup in progress to stop loading
            if self._closed:
                return
            self._closed = True
        self.tasks.cancel_all()
        if self._own_scheduler:
            self.scheduler.shutdown()
        threads = self.config.num_recovery_threads_per_data_dir
        try:
            with ThreadPoolExecutor(max(1, len(self.dirs))) as pool:
                for _ in pool.map(lambda d: shutdown_dir(d, self.logs_in_dir(d), threads=threads,
                                                         broker_epoch=broker_epoch, crash_hook=self.crash_hook),
                                  [d for d in self.dirs if d.online]):
                    pass
        finally:
            self._unlock_all()
            self.crash_hook("shutdown:unlocked")
        log.info("log manager shut down")

    def read_broker_epoch_from_clean_shutdown_files(self) -> int | None:
        """The broker epoch all directories' markers agree on, or None (Kafka's rule)."""
        if self.offline_log_dirs:
            return None
        epochs = {d.read_clean_shutdown_epoch() for d in self.dirs}
        if len(epochs) != 1:
            return None
        return epochs.pop()

    def __enter__(self) -> LogManager:
        self.startup()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()
