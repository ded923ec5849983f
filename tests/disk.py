"""Disks that fail on purpose, for the tests of full and failing log directories.

``Faults``: chosen ``os`` calls fail with an errno for paths under one directory (fault injection;
it reaches the index's mmap path through ``os.posix_fallocate``, which allocates an index's blocks
before they are mapped). ``small_tmpfs``: a real, small file system mounted by the test, skipped
with the reason where mounting is not permitted. ``fill``: a file system filled to the last byte.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest


class Faults:
    """Make chosen os calls fail with ``err`` for paths under ``victim`` while armed.

    Operations: ``write`` (os.write/writev/pwrite/pwritev), ``fsync``, ``rename`` (os.replace and
    os.rename), ``fallocate`` (os.posix_fallocate: the blocks of an index before it maps them).
    Calls on a descriptor find its path through /proc/self/fd.
    """

    WRITES = ("write", "writev", "pwrite", "pwritev")
    BY_FD = (*WRITES, "fsync", "posix_fallocate")
    OPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "write": WRITES, "fsync": ("fsync",), "rename": ("replace", "rename"), "fallocate": ("posix_fallocate",)}

    def __init__(self, monkeypatch: pytest.MonkeyPatch, victim: Path, op: str, err: int) -> None:
        self.victim = str(victim)
        self.err = err
        self.armed = False
        self.hits = 0
        for name in self.OPS[op]:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real, name in self.BY_FD))

    def _in_victim(self, path: str) -> bool:
        return path == self.victim or path.startswith(self.victim + os.sep)

    def _wrap(self, real: Callable[..., Any], by_fd: bool) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.armed:
                if by_fd:
                    try:
                        paths = [os.readlink(f"/proc/self/fd/{args[0]}")]
                    except OSError:
                        paths = []
                else:
                    paths = [os.fsdecode(os.path.abspath(a)) for a in args[:2]]
                if any(self._in_victim(p) for p in paths):
                    self.hits += 1
                    raise OSError(self.err, os.strerror(self.err), paths[0])
            return real(*args, **kwargs)

        return wrapper


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@contextmanager
def small_tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: "6m") at ``mountpoint``, unmounted afterwards.

    Skips the test, with the reason, where this process may not mount (not root, no
    CAP_SYS_ADMIN in a container, no mount command).
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (mount -t tmpfs); run as root to test a real full disk")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount command to mount a small tmpfs")
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mountpoint))
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here (EPERM in a container?): {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        if _run("umount", str(mountpoint)).returncode != 0:
            _run("umount", "-l", str(mountpoint))  # a file still open: detach now, freed when closed


def resize_tmpfs(mountpoint: Path, size: str) -> None:
    """Grow (free space on) a mounted tmpfs, as an operator who repaired the disk would."""
    done = _run("mount", "-o", f"remount,size={size}", str(mountpoint))
    assert done.returncode == 0, done.stderr


def fill(directory: Path, name: str = "filler") -> Path:
    """Write a file in ``directory`` until the file system is full (ENOSPC); return it."""
    path = directory / name
    block = b"\xab" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        for size in (1024, 256, 64, 16, 1):  # the last partial block too
            try:
                while True:
                    os.write(fd, block[:size])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return path
