"""The LogManager's background work: retention, flusher, checkpoints and directory removal.

| task (scheduler name)                  | period                                          | what                    |
|----------------------------------------|-------------------------------------------------|-------------------------|
| log-manager.retention                  | log.retention.check.interval.ms                 | ``cleanup_logs``        |
| log-manager.flusher                    | log.flush.scheduler.interval.ms                 | ``flush_dirty_logs``    |
| log-manager.recovery-point-checkpoint  | log.flush.offset.checkpoint.interval.ms         | recovery points         |
| log-manager.log-start-offset-checkpoint| log.flush.start.offset.checkpoint.interval.ms   | log start offsets       |
| log-manager.delete-logs                | once; reschedules itself for the next due dir   | ``delete_logs``         |
| log-manager.delete-expired-files       | ``DELETE_EXPIRED_FILES_INTERVAL_MS`` (1 s)      | each log's ``.deleted`` |
| log-manager.producer-expiration        | producer.id.expiration.check.interval.ms        | idle producers forgotten |

Each runs first after log.initial.task.delay.ms. Every directory and log is handled on its own:
an I/O failure takes its directory offline (through ``LogManager.io_guard``) and the task goes on
with the others. ``delete-expired-files`` is logkeeper's: Kafka schedules one task per deleted
segment, while ``Log`` here keeps a list of pending deletions that this task drains.

Removing a ``-delete`` directory (after file.delete.delay.ms from when it was queued, or from
startup for one found on disk): 1. its files are unlinked; 2. it is removed and its parent
fsynced. A crash between the steps leaves a ``-delete`` directory, queued again at the next start.

Checkpoints of a directory: ``recovery-point-offset-checkpoint`` lists every log's recovery
point; ``log-start-offset-checkpoint`` only the logs whose start offset is above their first
segment's base offset (Kafka's rule: the others start at their first segment anyway).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ..errors import KafkaStorageError, UnknownPartitionError
from ..fileio import fsync_dir
from .checkpoint import OffsetCheckpointFile
from .cleaner_hooks import CleanerHooks
from .log import Clock, Log
from .log_config import LogConfig
from .log_dir import LogDir
from .manager_config import ManagerConfig
from .names import TopicPartition
from .retention import delete_old_segments
from .scheduler import Scheduler

log = logging.getLogger(__name__)

PREFIX = "log-manager."
RETENTION = PREFIX + "retention"
FLUSHER = PREFIX + "flusher"
RECOVERY_POINT_CHECKPOINT = PREFIX + "recovery-point-checkpoint"
LOG_START_OFFSET_CHECKPOINT = PREFIX + "log-start-offset-checkpoint"
DELETE_LOGS = PREFIX + "delete-logs"
DELETE_EXPIRED_FILES = PREFIX + "delete-expired-files"
PRODUCER_EXPIRATION = PREFIX + "producer-expiration"
ALL_TASKS = (RETENTION, FLUSHER, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, DELETE_LOGS,
             DELETE_EXPIRED_FILES, PRODUCER_EXPIRATION)
DELETE_EXPIRED_FILES_INTERVAL_MS = 1000

_SKIP = (KafkaStorageError, UnknownPartitionError)  # already handled by io_guard


class TaskHost(Protocol):
    """What the tasks use of their LogManager (manager.py), which owns them: a protocol, so that
    this module does not import the manager back."""

    config: ManagerConfig
    scheduler: Scheduler
    cleaner_hooks: CleanerHooks
    dirs: list[LogDir]
    clock_ms: Clock

    @property
    def default_log_config(self) -> LogConfig: ...

    @property
    def is_stopping(self) -> bool: ...

    def io_guard(self, log_dir: LogDir, what: str, target: Log | None = None) -> AbstractContextManager[None]: ...

    def logs_with_dirs(self) -> list[tuple[TopicPartition, Log, LogDir]]: ...

    def logs_in_dir(self, log_dir: LogDir) -> dict[TopicPartition, Log]: ...


class ManagerTasks:
    def __init__(self, manager: TaskHost) -> None:
        self._m = manager
        self._delete_lock = threading.Lock()
        self._to_delete: list[tuple[Path, LogDir, int]] = []  # (directory, its log dir, queued at)

    # ------------------------------------------------------------------ scheduling
    def schedule_all(self) -> None:
        c = self._m.config
        s = self._m.scheduler
        delay = c.log_initial_task_delay_ms
        s.schedule(RETENTION, self.cleanup_logs, delay_ms=delay, period_ms=c.log_retention_check_interval_ms)
        s.schedule(FLUSHER, self.flush_dirty_logs, delay_ms=delay, period_ms=c.log_flush_scheduler_interval_ms)
        s.schedule(RECOVERY_POINT_CHECKPOINT, self.checkpoint_log_recovery_offsets, delay_ms=delay,
                   period_ms=c.log_flush_offset_checkpoint_interval_ms)
        s.schedule(LOG_START_OFFSET_CHECKPOINT, self.checkpoint_log_start_offsets, delay_ms=delay,
                   period_ms=c.log_flush_start_offset_checkpoint_interval_ms)
        s.schedule_once(DELETE_LOGS, self.delete_logs, delay)
        s.schedule(DELETE_EXPIRED_FILES, self.delete_expired_files, delay_ms=delay,
                   period_ms=DELETE_EXPIRED_FILES_INTERVAL_MS)
        s.schedule(PRODUCER_EXPIRATION, self.remove_expired_producers, delay_ms=delay,
                   period_ms=c.producer_id_expiration_check_interval_ms)

    def cancel_all(self) -> None:
        """Drop the tasks and wait for one running in another thread to end."""
        self._m.scheduler.cancel(ALL_TASKS)

    def _online_logs(self) -> list[tuple[TopicPartition, Log, LogDir]]:
        return self._m.logs_with_dirs()

    # ------------------------------------------------------------------ retention and flush
    def cleanup_logs(self) -> int:
        """Delete old segments (see ``retention.py``) of every log, or with a cleaner plugged in, of
        the logs it paused for us (``CleanerHooks.pause_for_retention``); return how many went."""
        now = self._m.clock_ms()
        hooks = self._m.cleaner_hooks
        targets = self._online_logs()
        paused: list[TopicPartition] = []
        if hooks.pause_for_retention is not None:
            paused = list(hooks.pause_for_retention())
            allowed = set(paused)
            targets = [t for t in targets if t[0] in allowed]
        total = 0
        try:
            for tp, lg, d in targets:
                try:
                    with self._m.io_guard(d, f"deleting old segments of {tp}", lg):
                        total += delete_old_segments(lg, now).total
                except _SKIP:
                    continue
        finally:
            for tp in paused:
                hooks.resume(tp)
        if total:
            log.info("retention deleted %d segment(s)", total)
        return total

    def flush_dirty_logs(self) -> None:
        """Flush each log whose last flush is at least its flush.ms ago."""
        now = self._m.clock_ms()
        for tp, lg, d in self._online_logs():
            if now - lg.last_flush_ms < lg.config.flush_ms:
                continue
            try:
                with self._m.io_guard(d, f"flushing {tp}", lg):
                    lg.flush()
            except _SKIP:
                continue

    def delete_expired_files(self) -> int:
        """Remove the ``.deleted`` segments of each log whose delay has passed."""
        count = 0
        for tp, lg, d in self._online_logs():
            try:
                with self._m.io_guard(d, f"removing deleted segments of {tp}", lg), lg.lock:
                    if not lg.closed:
                        count += lg.delete_expired_files()
            except _SKIP:
                continue
        return count

    def remove_expired_producers(self) -> int:
        """Each log forgets its producers idle for producer.id.expiration.ms (in memory: the next
        roll's snapshot leaves them out); how many went."""
        count = 0
        for _tp, lg, _d in self._online_logs():
            if not lg.closed:
                count += lg.remove_expired_producers()
        return count

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_log_recovery_offsets(self) -> None:
        for d in self._m.dirs:
            self.checkpoint_recovery_points_in_dir(d)

    def checkpoint_log_start_offsets(self) -> None:
        for d in self._m.dirs:
            self.checkpoint_start_offsets_in_dir(d)

    def checkpoint_recovery_points_in_dir(self, d: LogDir) -> None:
        self._write_checkpoint(d, d.recovery_point_checkpoint, "recovery point", recovery_points)

    def checkpoint_start_offsets_in_dir(self, d: LogDir) -> None:
        self._write_checkpoint(d, d.log_start_offset_checkpoint, "log start offset", log_start_offsets)

    def _write_checkpoint(self, d: LogDir, checkpoint: OffsetCheckpointFile, what: str,
                          offsets: _CheckpointOffsets) -> None:
        """Write one of the directory's offset checkpoints (``offsets`` computes it from the dir's logs).
        An I/O failure has already taken the directory offline (io_guard), so it is not raised here."""
        if not d.online:
            return
        logs = self._m.logs_in_dir(d)
        try:
            with self._m.io_guard(d, f"writing the {what} checkpoint"):
                checkpoint.write(offsets(logs, d))
        except KafkaStorageError:
            pass

    def checkpoint_dir(self, d: LogDir) -> None:
        self.checkpoint_recovery_points_in_dir(d)
        self.checkpoint_start_offsets_in_dir(d)

    # ------------------------------------------------------------------ -delete directories
    def queue_dir_delete(self, path: Path, d: LogDir) -> None:
        with self._delete_lock:
            self._to_delete.append((path, d, self._m.clock_ms()))

    @property
    def has_logs_to_be_deleted(self) -> bool:
        with self._delete_lock:
            return bool(self._to_delete)

    def dirs_to_delete(self) -> list[Path]:
        with self._delete_lock:
            return [p for p, _d, _t in self._to_delete]

    def forget_dir(self, d: LogDir) -> None:
        """Drop queued removals in a directory that went offline."""
        with self._delete_lock:
            self._to_delete = [item for item in self._to_delete if item[1] is not d]

    def delete_logs(self) -> None:
        """Remove queued ``-delete`` directories whose delay has passed, then run again when the
        next one is due (or after file.delete.delay.ms, at least 1 ms, when none is queued)."""
        delay_ms = self._m.default_log_config.file_delete_delay_ms
        now = self._m.clock_ms()
        with self._delete_lock:
            due = [item for item in self._to_delete if item[2] + delay_ms <= now]
            self._to_delete = [item for item in self._to_delete if item[2] + delay_ms > now]
        for path, d, _queued in due:
            if not d.online:
                continue
            try:
                with self._m.io_guard(d, f"removing {path}"):
                    remove_partition_dir(path)
                log.info("removed %s", path)
            except KafkaStorageError:
                continue
        with self._delete_lock:
            pending = [queued + delay_ms - now for _p, _d, queued in self._to_delete]
        next_ms = min(pending) if pending else max(delay_ms, 1)
        if not self._m.is_stopping:
            self._m.scheduler.schedule_once(DELETE_LOGS, self.delete_logs, max(next_ms, 0))


# what a directory's offset checkpoint holds, from the logs loaded in it (recovery_points, log_start_offsets)
_CheckpointOffsets = Callable[[Mapping[TopicPartition, Log], LogDir], dict[TopicPartition, int]]


def recovery_points(logs: Mapping[TopicPartition, Log], d: LogDir) -> dict[TopicPartition, int]:
    """The directory's recovery point checkpoint: its logs', and those held for partitions not loaded."""
    return {**d.held_recovery_points, **{tp: lg.recovery_point for tp, lg in logs.items()}}


def log_start_offsets(logs: Mapping[TopicPartition, Log], d: LogDir) -> dict[TopicPartition, int]:
    out = dict(d.held_start_offsets)
    for tp, lg in logs.items():
        first = lg.segments.first
        if first is not None and lg.log_start_offset > first.base_offset:
            out[tp] = lg.log_start_offset
    return out


def remove_partition_dir(path: Path) -> None:
    """Step 1: unlink the files; step 2: remove the directory and fsync its parent."""
    shutil.rmtree(path)
    fsync_dir(path.parent)
