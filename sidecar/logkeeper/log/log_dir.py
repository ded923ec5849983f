"""A log directory: the root of one disk's partition directories, its lock, marker and checkpoints.

Files at the top of a log directory
-----------------------------------
- ``.lock``: empty; held with ``flock(LOCK_EX | LOCK_NB)`` while the process uses the directory,
  deleted (still locked) at shutdown.
- ``.kafka_cleanshutdown``: JSON ``{"version":0,"brokerEpoch":N}``; written at clean shutdown,
  read and deleted at startup.
- ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``: see ``checkpoint.py``;
  rewritten periodically.
- ``*.tmp``: a file being replaced; removed at startup.
- ``<topic>-<partition>/`` and its ``.<uuid>-delete``, ``-stray``, ``-future`` forms: partition
  directories (see ``PartitionDirs``).

Writing the clean-shutdown marker (numbered crash steps; ``crash_hook(step)`` after each):

1. ``tmp-written``: ``.kafka_cleanshutdown.tmp`` written and fsynced. A crash leaves the .tmp
   (removed at next startup) and no marker: the next startup recovers the logs.
2. ``renamed``: renamed over ``.kafka_cleanshutdown`` and the directory fsynced: the next
   startup skips recovery.

Taking the marker at startup (Kafka's rule, KAFKA-10471: a crash while loading must force
recovery next time):

1. ``read``: the marker was read (its absence means an unclean shutdown). A crash here leaves
   the marker: nothing was changed yet, so the next start is still clean.
2. ``deleted``: the marker was unlinked and the directory fsynced.

Locking: ``flock`` is per open file, so a second LogManager, in this process or another, fails at
once with LogDirLockedError naming the directory. As the holder deletes ``.lock`` at shutdown,
a process that opened the old file just before could lock an unlinked inode: after locking, the
inode is compared with the path's and the open is retried (at most 3 times) on a mismatch.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DuplicateLogDirError, LogDirLockedError, LogDirUnusableError
from ..fileio import TMP_SUFFIX, CrashHook, fsync_dir, no_crash, replace_file_durably
from . import names
from .checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log, never a partition of ours
LOCK_ATTEMPTS = 3

@dataclass
class PartitionDirs:
    """The sub-directories of a log directory, by kind."""

    logs: list[tuple[names.TopicPartition, Path]] = field(default_factory=list)
    to_delete: list[Path] = field(default_factory=list)  # ``-delete``: removed after file.delete.delay.ms
    stray: list[Path] = field(default_factory=list)  # ``-stray``: left alone and reported
    future: list[Path] = field(default_factory=list)  # ``-future``: not supported, left alone
    ignored: list[Path] = field(default_factory=list)  # not partition directories (lost+found...)


@dataclass(frozen=True)
class LogDirStatus:
    """What the sidecar's status reports for one log directory."""

    path: str
    online: bool
    error: str | None
    partitions: int  # its logs; for an offline directory, the logs it had when it failed
    size_bytes: int  # bytes of the segments of its (online) logs
    total_bytes: int | None  # of the file system (None when unknown or offline)
    usable_bytes: int | None
    stray: tuple[str, ...]


class LogDir:
    """One configured log directory: validation, lock, clean-shutdown marker and checkpoints."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))
        self.online = True
        self.error: str | None = None
        self.had_clean_shutdown = False
        self.load_completed = False
        self.stray: list[Path] = []
        # Checkpoint entries of partitions in this directory that were not loaded (a copy in two
        # directories): written back with the checkpoints so they outlive the wait for repair.
        self.held_recovery_points: dict[names.TopicPartition, int] = {}
        self.held_start_offsets: dict[names.TopicPartition, int] = {}
        self.recovery_point_checkpoint = OffsetCheckpointFile(self.path / RECOVERY_POINT_CHECKPOINT)
        self.log_start_offset_checkpoint = OffsetCheckpointFile(self.path / LOG_START_OFFSET_CHECKPOINT)
        self._lock_fd = -1

    def __repr__(self) -> str:
        state = "online" if self.online else f"offline: {self.error}"
        return f"LogDir({self.path}, {state})"

    # ------------------------------------------------------------------ validation and lock
    def prepare(self) -> None:
        """Create the directory when missing, then check it is a readable, writable directory."""
        try:
            if not self.path.exists():
                log.info("log directory %s not found, creating it", self.path)
                self.path.mkdir(parents=True)
                fsync_dir(self.path.parent)
        except OSError as e:
            raise LogDirUnusableError(str(self.path), f"cannot create it: {e.strerror or e}") from e
        if not self.path.is_dir():
            raise LogDirUnusableError(str(self.path), "not a directory")
        if not os.access(self.path, os.R_OK | os.X_OK):
            raise LogDirUnusableError(str(self.path), "not a readable directory")
        if not os.access(self.path, os.W_OK):
            raise LogDirUnusableError(str(self.path), "not a writable directory")

    def lock(self) -> None:
        """Take ``.lock`` exclusively; LogDirLockedError when another holder has it, OSError on I/O."""
        path = self.path / LOCK_FILE
        for _attempt in range(LOCK_ATTEMPTS):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise LogDirLockedError(str(self.path)) from None
            except OSError:
                os.close(fd)
                raise
            if _same_file(fd, path):
                self._lock_fd = fd
                return
            os.close(fd)  # the previous holder deleted the file under us: lock the new one
        raise LogDirLockedError(str(self.path))

    @property
    def locked(self) -> bool:
        return self._lock_fd >= 0

    def unlock(self, *, delete_file: bool = True) -> None:
        """Release the lock (deleting ``.lock`` first while still holding it, as Kafka does)."""
        fd, self._lock_fd = self._lock_fd, -1
        if fd < 0:
            return
        try:
            if delete_file:
                (self.path / LOCK_FILE).unlink(missing_ok=True)
        except OSError as e:
            log.warning("cannot delete %s/%s: %s", self.path, LOCK_FILE, e)
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def mark_offline(self, error: str) -> None:
        self.online = False
        self.error = error

    def remove_stale_temp_files(self) -> list[str]:
        """Delete top-level ``*.tmp`` files left by a crash mid-write (checkpoints, marker)."""
        removed = []
        for entry in os.scandir(self.path):
            if entry.name.endswith(TMP_SUFFIX) and entry.is_file(follow_symlinks=False):
                log.info("deleting %s: left by an interrupted write", entry.path)
                os.unlink(entry.path)
                removed.append(entry.name)
        if removed:
            fsync_dir(self.path)
        return removed

    # ------------------------------------------------------------------ clean shutdown marker
    @property
    def clean_shutdown_file(self) -> Path:
        return self.path / CLEAN_SHUTDOWN_FILE

    def read_clean_shutdown_epoch(self) -> int | None:
        """The broker epoch in the marker; None when there is no marker or it does not parse."""
        try:
            data = json.loads(self.clean_shutdown_file.read_text())
            epoch = data["brokerEpoch"]
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            log.warning("unreadable clean shutdown marker %s: %s", self.clean_shutdown_file, e)
            return None
        return int(epoch) if isinstance(epoch, int) else None

    def take_clean_shutdown_marker(self, crash_hook: CrashHook = no_crash) -> bool:
        """Whether the last shutdown was clean; the marker is deleted (durably) either way."""
        exists = self.clean_shutdown_file.exists()
        crash_hook("read")
        if exists:
            self.clean_shutdown_file.unlink()
            fsync_dir(self.path)
        crash_hook("deleted")
        self.had_clean_shutdown = exists
        return exists

    def write_clean_shutdown_marker(self, broker_epoch: int, crash_hook: CrashHook = no_crash) -> None:
        data = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode()
        replace_file_durably(self.clean_shutdown_file, data, on_step=crash_hook)

    # ------------------------------------------------------------------ partition directories
    def partition_dirs(self) -> PartitionDirs:
        """Classify the sub-directories (no file is touched)."""
        out = PartitionDirs()
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=True):
                continue
            path = Path(entry.path)
            try:
                parsed = names.PartitionDirName.parse(entry.name)
            except ValueError:
                log.warning("ignoring %s: not a partition directory", path)
                out.ignored.append(path)
                continue
            if parsed.topic_partition.topic == METADATA_TOPIC:
                out.ignored.append(path)
            elif parsed.kind == names.DELETE_DIR_SUFFIX:
                out.to_delete.append(path)
            elif parsed.kind == names.STRAY_DIR_SUFFIX:
                log.warning("stray partition directory %s is left alone", path)
                out.stray.append(path)
            elif parsed.kind == names.FUTURE_DIR_SUFFIX:
                log.warning("future partition directory %s is left alone (replica moves are not "
                            "supported)", path)
                out.future.append(path)
            else:
                out.logs.append((parsed.topic_partition, path))
        return out

    def disk_usage(self) -> tuple[int | None, int | None]:
        """(total, usable) bytes of the file system, or (None, None) when it cannot be asked."""
        if not self.online:
            return None, None
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None, None
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_log_dirs(paths: list[str]) -> list[LogDir]:
    """LogDir objects for the configured paths; duplicates by canonical path are rejected."""
    seen: dict[str, str] = {}
    out = []
    for raw in paths:
        d = LogDir(raw)
        canonical = os.path.realpath(d.path)
        if canonical in seen:
            raise DuplicateLogDirError(seen[canonical], raw, canonical)
        seen[canonical] = raw
        out.append(d)
    return out


def capped_special_dir_name(tp: names.TopicPartition, kind: str) -> str:
    """``names.special_dir_name`` with the topic cut so the name fits in 255 bytes (as Kafka)."""
    full = names.special_dir_name(tp, kind)
    if len(full.encode()) <= 255:
        return full
    suffix = full[len(tp.topic):]
    return tp.topic[: 255 - len(suffix.encode())] + suffix
