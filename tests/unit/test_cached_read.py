"""cached_read: under no_wait(), a read from the page cache succeeds and one that needs the disk
raises WouldBlock (not an OSError, so no caller takes it for a failing disk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper import cached_read
from logkeeper.cached_read import WouldBlock, no_wait


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (written back first, so they can go)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_a_read_waits_for_the_disk_only_outside_no_wait(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(1 << 20)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        evict(path)
        with no_wait(), pytest.raises(WouldBlock):
            cached_read.pread(fd, 4096, 1 << 19)
        assert cached_read.pread(fd, len(data), 0) == data  # outside: it reads from the disk
        with no_wait():  # now cached
            assert cached_read.pread(fd, 4096, 1 << 19) == data[1 << 19:(1 << 19) + 4096]
    finally:
        os.close(fd)
    assert not issubclass(WouldBlock, OSError)


def test_a_range_cached_in_part_would_block(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        evict(path)
        cached_read.pread(fd, 4096, 0)  # the first page back in the cache, maybe a little read-ahead
        with no_wait(), pytest.raises(WouldBlock):
            cached_read.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)


def test_no_wait_ends_with_its_block(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(WouldBlock), no_wait():
            evict(path)
            cached_read.pread(fd, 8192, 0)
        assert cached_read.pread(fd, 8192, 0) == b"x" * 8192
    finally:
        os.close(fd)
