"""File writes that finish and survive a crash: the one place a file is replaced durably.

``pwrite_all``: ``os.pwrite`` may write fewer bytes than asked (a signal, a nearly full disk); the
callers that must not lose the rest (a segment's appends, an index's bulk entries) finish with
this loop.

``replace_file_durably(path, data)``: every small file that is replaced whole (the offset
checkpoints, the clean-shutdown marker, the topic file, a Spark job's manifest and reports)
goes through these steps, so that after a crash at any point ``path`` holds either its old
bytes or the new ones, never a mix or nothing:

1. ``data`` is written to ``<path><tmp_suffix>`` (created or truncated) — crash: the old file
   is intact, a stray temporary file may be left (the next replace truncates it);
2. the temporary file is fsynced, then ``on_step("tmp-written")``;
3. it is renamed over ``path`` (atomic on POSIX), then ``on_step("renamed")`` — crash before
   the directory's fsync: either name may be the one on disk after a power cut;
4. the directory is fsynced: the rename is durable.

``fsync_dir``: fsync a directory (after a create, rename or unlink in it).

``first_hole``, ``allocate_blocks``: where a sparse file's first hole is, and disk blocks behind a
range of it (the indexes map only allocated blocks).

``call_each``: one file call on each of many files, overlapped on a few threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# Threads for ``call_each``: its calls mostly wait (for the device, or for the kernel freeing a
# file's pages and blocks outside the directory's lock), so a few overlap well on any core count
# (bench/results/cleaner_output.md: parallel unlinks)
FILE_CALL_THREADS = 4


def as_path(path: Path | str) -> Path:
    """``path`` as a Path, without building a new one from a Path: ``Path(p)`` parses p's parts
    again, and a log directory's thousands of segments each open four files at load."""
    return path if isinstance(path, Path) else Path(path)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int, written: int = 0) -> None:
    """Write ``data[written:]`` at ``position + written``, again after each short write."""
    view = memoryview(data)
    while written < len(view):
        written += os.pwrite(fd, view[written:], position + written)


def first_hole(fd: int, length: int) -> int:
    """Where the first hole of the file starts (``length`` when it has none below ``length``).

    A file system without hole reporting answers the file size: it is then taken as allocated.
    """
    try:
        return min(os.lseek(fd, 0, os.SEEK_HOLE), length)
    except OSError:
        return length


def allocate_blocks(fd: int, start: int, end: int) -> None:
    """Back ``[start, end)`` with disk blocks; OSError (ENOSPC, EIO, ...) when the disk cannot
    (a store into a hole of a shared map would fault instead: index/abstract_index.py).

    ``end`` never passes the file's length, so the file does not grow."""
    if end > start:
        os.posix_fallocate(fd, start, end - start)


def fsync_dir(directory: Path | str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_if_exists(path: Path | str) -> None:
    """fsync a file that may not exist (nothing to do then): the try is cheaper than a stat
    first where no file is the common case (a segment's transaction index)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


TMP_SUFFIX = ".tmp"  # a log directory's loader removes files so named left by a crash


# A crash hook: called with a step's name just after that step of a multi-step file change is
# done (durable replace, segment swap, clean-shutdown marker, topic store); crash tests raise
# there to stop the change at that point, as a process killed there would.
CrashHook = Callable[[str], None]


def no_crash(_step: str) -> None:
    """The crash hook of normal operation: nothing happens between the steps."""
    return None


def replace_file_durably(path: Path | str, data: bytes | bytearray | memoryview, *, tmp_suffix: str = TMP_SUFFIX,
                         on_step: CrashHook = no_crash) -> None:
    """Replace ``path``'s content with ``data`` by the module docstring's four steps;
    ``on_step`` is called after steps 2 and 3 (crash tests raise there)."""
    path = Path(path)
    tmp = path.with_name(path.name + tmp_suffix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    on_step("tmp-written")
    os.replace(tmp, path)
    on_step("renamed")
    fsync_dir(path.parent)


def call_each(fn: Callable[[T], object], items: Sequence[T], threads: int = FILE_CALL_THREADS) -> None:
    """``fn(item)`` for every item (the unlinks of many files), on up to ``threads``
    threads. Every call is made, even after one fails; the first error, in ``items``' order, is
    raised when all are done."""
    if len(items) <= 1 or threads <= 1:
        errors: list[BaseException] = []
        for item in items:
            try:
                fn(item)
            except Exception as e:  # raised below, after the others
                errors.append(e)
    else:
        with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="file-calls") as pool:
            done = [pool.submit(fn, item) for item in items]
        # the pool waited for every call (Executor.map would cancel the rest at the first error)
        errors = [e for e in (f.exception() for f in done) if e is not None]
    if errors:
        raise errors[0]
