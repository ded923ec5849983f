"""What a log dir is: the one rule every command that writes checks before it touches anything.

A log dir is a directory that holds

- partition directories named ``<topic>-<partition>`` holding segment files (``*.log``, or their
  ``.cleaned``/``.swap``/``.deleted`` forms, or index files), or
- any of Kafka's files at the top of a log dir: the checkpoint files
  (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``cleaner-offset-checkpoint``), ``meta.properties`` or the clean-shutdown marker.

Why so strict: the engine opens every ``<name>-<N>`` subfolder of the directory it is given as a
partition and creates a segment in it. Pointed one level too high (``logkeeper clean demo-data``
instead of ``demo-data/disk-0``) or at a user's documents, it would write into folders that are
not Kafka's. So ``clean``, ``recover`` and ``resolve-duplicates`` refuse anything else, without
touching it, naming the dir and what they expected, and pointing at the nearest log dir below it.

Only the sidecar makes new log dirs: a configured dir that is missing or empty (``lost+found``
aside: a fresh volume) is one it was told to make, and ``--create-log-dirs`` makes any other
configured dir one. It marks a new log dir at once with an empty recovery-point checkpoint (what
Kafka writes there too), so the next start recognises it even if nothing else was written.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from .errors import UsageError
from .log import names
from .log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from .log.log_dir import CLEAN_SHUTDOWN_FILE

META_PROPERTIES = "meta.properties"
MARKER_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT, META_PROPERTIES,
                CLEAN_SHUTDOWN_FILE)
# What a fresh volume may hold besides nothing, and what a killed sidecar may leave in a new dir.
NOT_CONTENT = frozenset({"lost+found", ".lock"})
SEGMENT_FILE_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, *names.TEMP_SUFFIXES)
EXPECTED = ("partition directories named <topic>-<partition> holding .log segments, or Kafka's checkpoint files "
            f"({RECOVERY_POINT_CHECKPOINT}, ...) or {META_PROPERTIES}")
# Bounds on the search for a log dir below a wrong one: a user's home can be huge.
SEARCH_DEPTH = 3
SEARCH_DIRS = 2000


class NotALogDirError(UsageError):
    """A command that writes was given a directory that is not a log dir (nothing was touched)."""


def _entries(path: Path) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return list(it)


def is_partition_dir(path: Path) -> bool:
    """A live partition directory: named ``<topic>-<partition>`` and holding segment files."""
    try:
        if names.PartitionDirName.parse(path.name).kind:
            return False
    except ValueError:
        return False
    try:
        return any(e.name.endswith(SEGMENT_FILE_SUFFIXES) and e.is_file() for e in _entries(path))
    except OSError:
        return False


def partitions_of(path: Path) -> list[Path]:
    """``path`` itself when it is a partition directory, else its live partition directories
    (``-delete``, ``-stray`` and ``-future`` ones are not live), in name order."""
    if is_partition_dir(path):
        return [path]
    out = []
    for e in sorted(_entries(path), key=lambda e: e.name):
        try:
            live = e.is_dir() and not names.PartitionDirName.parse(e.name).kind
        except ValueError:
            continue
        if live:
            out.append(Path(e.path))
    return out


def is_log_dir(path: Path) -> bool:
    try:
        entries = _entries(path)
    except OSError:
        return False
    if any(e.name in MARKER_FILES for e in entries):
        return True
    return any(e.is_dir() and is_partition_dir(Path(e.path)) for e in entries)


def is_new(path: Path) -> bool:
    """Missing, or holding nothing but what a fresh volume holds."""
    try:
        return all(e.name in NOT_CONTENT for e in _entries(path))
    except FileNotFoundError:
        return True
    except OSError:
        return False


def nearest_log_dir_below(path: Path) -> Path | None:
    """The shallowest log dir below ``path`` (breadth first, names in order, bounded)."""
    queue: deque[tuple[Path, int]] = deque([(path, 0)])
    seen = 0
    while queue and seen < SEARCH_DIRS:
        current, depth = queue.popleft()
        seen += 1
        if depth > 0 and is_log_dir(current):
            return current
        if depth == SEARCH_DEPTH:
            continue
        try:
            subdirs = sorted(e.name for e in _entries(current) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        queue.extend((current / name, depth + 1) for name in subdirs if not name.startswith("."))
    return None


def refusal(path: Path, command: str) -> str:
    """Why ``path`` is refused, what was expected, and where to look instead (a few sentences)."""
    if not path.exists():
        return f"{path} does not exist: expected a log dir holding {EXPECTED}."
    if not path.is_dir():
        return f"{path} is a file, not a log dir."
    if is_partition_dir(path) and is_log_dir(path.parent):
        return (f"{path} is a partition directory, not a log dir; nothing was changed. "
                f"Its log dir is {path.parent}: logkeeper {command} {path.parent}")
    text = f"{path} is not a log dir: expected {EXPECTED}; nothing was changed."
    below = nearest_log_dir_below(path)
    if below is not None:
        text += f" The nearest log dir below it is {below}: logkeeper {command} {below}"
    return text


def require_log_dir(path: Path, command: str) -> None:
    """Raise NotALogDirError (exit 2) unless ``path`` is a log dir. Reads only."""
    if not is_log_dir(path):
        raise NotALogDirError(refusal(path, command))


def require_log_or_partition_dir(path: Path, command: str) -> None:
    """As require_log_dir, also accepting one partition directory (recover, verify)."""
    if not (is_log_dir(path) or is_partition_dir(path)):
        raise NotALogDirError(refusal(path, command))


def check_sidecar_log_dir(path: Path, *, create: bool) -> None:
    """Raise NotALogDirError when the sidecar must not make ``path`` a log dir. Reads only; a dir
    that cannot be read is left to the engine, which takes it offline (one disk, one failure
    domain) rather than refusing to serve the others."""
    if is_log_dir(path) or create or is_new(path):
        return
    try:
        _entries(path)
    except OSError:
        return
    raise NotALogDirError(
        f"log dir {path} (node.log.dirs) is neither empty nor a log dir: expected {EXPECTED}; nothing was "
        "changed. Point log.dirs at the right directory, or pass --create-log-dirs to make this one a log dir.")


def prepare_sidecar_log_dir(path: Path) -> None:
    """Make ``path`` (checked) a log dir if it is not one yet: created, and marked with an empty
    recovery-point checkpoint. A failure is left to the engine, which takes the dir offline."""
    if is_log_dir(path):
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT).write({})
    except OSError:
        return
