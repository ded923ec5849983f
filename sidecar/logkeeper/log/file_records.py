"""FileRecords: a segment's ``.log`` file — concatenated v2 batches — and reads over it.

The file is appended with ``os.pwrite``/``os.pwritev`` on a raw descriptor (no Python buffer
layer: every acknowledged append is in the page cache, and ``flush`` is one fsync). Reads use
``os.pread`` for small ranges and a read-only ``mmap`` for whole-file scans, which the compiled
batch walker of ``records.scan`` turns into columns without a Python loop per batch.
``read_cached`` reads only what the page cache holds (``RWF_NOWAIT``), for a caller that must not
wait for the disk (the Kafka listener's event loop) and hands the read to a thread when it would.
``slice`` names a range (RecordsSlice) that the Kafka listener sends from the page cache with
sendfile, as Kafka's broker sends a fetch's records: the bytes are not copied into memory.

Batches are found as Kafka's FileLogInputStream finds them: fewer than 17 bytes left, or a batch
whose declared size runs past the end, ends the data (a torn tail); a size below the header or
a foreign magic is corruption.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from ..errors import CorruptRecordError, LengthPastEndError, ShortBatchError
from ..fileio import as_path, pwrite_all
from ..records.batch import BatchHeader
from ..records.batch_format import HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC
from ..records.scan import BatchTable, scan_batches
from . import page_cache, version_cache
from .version_cache import new_version as _new_version

_EMPTY = np.zeros(0, dtype=np.uint8)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages; do not wait
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


class WouldBlock(Exception):
    """A read that was not to wait for the disk (``read_cached``) found its bytes outside the page
    cache, or the file system cannot tell (no ``RWF_NOWAIT``): read it where waiting is allowed.
    Not an OSError: it says nothing about the disk (the log manager's I/O guard would take the
    directory offline for an OSError)."""


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (which Python's os module lacks), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], fn)


class LogOffsetPosition(NamedTuple):
    """Where a batch holding a wanted offset starts: its last offset, position and size."""

    offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    """What a time lookup finds: the first batch reaching the target: its max timestamp and an offset to read from."""

    timestamp: int
    offset: int


class RecordsSlice:
    """``size`` bytes of a segment's file from ``position``, to be sent from the page cache rather
    than read into memory (a fetch answer a client is slow to read then holds no memory). Its
    length is ``size``, so an empty slice is falsy as empty bytes are."""

    __slots__ = ("position", "records", "size")

    def __init__(self, records: FileRecords, position: int, size: int) -> None:
        self.records, self.position, self.size = records, position, size

    def __len__(self) -> int:
        return self.size

    def open(self) -> int:
        """A descriptor of its own on the file, for the send (the caller closes it): the segment's
        may be closed meanwhile (deleted, cleaned away), and its number then reused by another file."""
        return self.records.dup_fd()

    def read(self) -> bytes:
        return self.records.read(self.position, self.size)


class FileRecords:
    """A ``.log`` file opened for appends (or read-only), with its size tracked in memory."""

    def __init__(self, path: Path, *, writable: bool = True, size: int | None = None) -> None:
        self._path = as_path(path)
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        self._fd = os.open(self._path, flags, 0o644)
        self._writable = writable
        self._size = os.fstat(self._fd).st_size if size is None else size
        self._lock = threading.Lock()
        self._version = _new_version()  # drawn anew on every change (version_cache.py)
        self._map_lock = threading.Lock()
        self._mapped_version = 0  # the version whose mapping this file put in the cache, if any

    # ---------------------------------------------------------------- properties
    @property
    def path(self) -> Path:
        return self._path

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def fd(self) -> int:
        return self._fd

    # ---------------------------------------------------------------- writes
    def append(self, data: bytes | bytearray | memoryview, header: bytes | None = None) -> int:
        """Append ``data`` at the end; return the position it starts at.

        ``header``, when given, replaces the first ``len(header)`` bytes of ``data`` on disk
        (a batch header with its offset assigned): both go in one pwritev, the body uncopied.
        Positional writes keep appends correct after a truncation, whatever the descriptor's
        own offset.
        """
        size = len(data)
        self._lock.acquire()  # not `with`: half the cost, on every append
        try:
            position = self._size
            if header is None:
                written = os.pwrite(self._fd, data, position)
            else:
                written = os.pwritev(self._fd, (header, memoryview(data)[len(header):]), position)
            if written != size:
                _finish_write(self._fd, data, header, position, written)
            self._size = position + size
            self._version = _new_version()
            return position
        finally:
            self._lock.release()

    def flush(self) -> None:
        os.fsync(self._fd)

    def start_writeback(self) -> None:
        """Have the kernel start writing the file's dirty pages to disk now, without waiting
        (Linux's ``sync_file_range``; nothing elsewhere), so that a later ``flush`` waits for
        less. Only ``flush`` makes the data durable."""
        start = _sync_file_range()
        if start is not None:
            start(self._fd, 0, 0, _SYNC_FILE_RANGE_WRITE)  # the whole file; an error is only a lost hint

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size``; return the bytes removed."""
        with self._lock:
            if target_size > self._size or target_size < 0:
                raise ValueError(
                    f"cannot truncate {self._path} of {self._size} bytes to {target_size} bytes"
                )
            removed = self._size - target_size
            os.ftruncate(self._fd, target_size)
            self._size = target_size
            self._version = _new_version()
        with self._map_lock:
            self._release_mapping()  # its tail is gone: reading it would fault (SIGBUS)
        return removed

    def close(self) -> None:
        with self._map_lock:
            self._release_mapping()  # a deleted file's blocks are freed when its last mapping goes
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def rename_to(self, new_path: Path) -> None:
        os.replace(self._path, new_path)
        self._path = as_path(new_path)
        with self._map_lock:
            # a renamed segment leaves the log (.deleted) or enters it (.cleaned, .swap): the
            # mapping of a file that stays where it is is what readers share
            self._release_mapping()

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            self._path.unlink()
            return True
        except FileNotFoundError:
            return False

    # ---------------------------------------------------------------- reads
    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self._size - position))
        if size == 0:
            return b""
        return os.pread(self._fd, size, position)

    def slice(self, position: int, size: int, *, cached_only: bool) -> RecordsSlice:
        """Up to ``size`` bytes from ``position``, named, not read. ``cached_only``: WouldBlock when
        they are not all in the page cache; else they are read once here (this caller may wait) so
        that the page cache holds them when they are sent."""
        size = max(0, min(size, self._size - position))
        if size and cached_only and not page_cache.cached(self._fd, position, size):
            raise WouldBlock(f"{self._path}: {size} bytes at {position} are not all cached")
        if size and not cached_only:
            page_cache.warm(self._fd, position, size)
        return RecordsSlice(self, position, size)

    def dup_fd(self) -> int:
        with self._lock:  # not while close() runs: the number could be another file's by then
            if self._fd < 0:
                raise FileNotFoundError(errno.ENOENT, "the segment was closed", str(self._path))
            return os.dup(self._fd)

    def read_cached(self, position: int, size: int, at_least: int) -> memoryview:
        """Up to ``size`` bytes from ``position`` as far as the page cache holds them, read without
        waiting for the disk; WouldBlock when fewer than ``at_least`` (at most what the file has)
        are cached, or when the file system cannot read without waiting."""
        size = max(0, min(size, self._size - position))
        if size == 0:
            return memoryview(b"")
        if not _RWF_NOWAIT:
            raise WouldBlock(f"{self._path}: no RWF_NOWAIT on this platform")
        buf = bytearray(size)
        try:
            n = os.preadv(self._fd, [buf], position, _RWF_NOWAIT)
        except BlockingIOError:
            raise WouldBlock(f"{self._path}: {size} bytes at {position} are not all cached") from None
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # the file system reads only by waiting
                raise WouldBlock(f"{self._path}: {e.strerror}") from None
            raise
        if n < min(at_least, size):
            raise WouldBlock(f"{self._path}: {n} of {size} bytes at {position} cached, {at_least} needed")
        return memoryview(buf)[:n]

    def header_at(self, position: int) -> BatchHeader | None:
        """The batch header at ``position``; None at a torn tail (fewer than 17 bytes left, or
        a batch running past the end), as Kafka's reader ends there. Corruption raises."""
        available = self._size - position
        if available < HEADER_SIZE_UP_TO_MAGIC:
            return None
        head = os.pread(self._fd, HEADER_SIZE, position)
        try:
            header = BatchHeader.parse(head, 0, available=available)
        except LengthPastEndError:
            return None
        except ShortBatchError:
            if available < HEADER_SIZE:
                return None
            raise
        except CorruptRecordError as e:
            raise e.in_file(str(self._path), position) from None
        return header

    def headers_from(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Batch headers from ``position`` (short scans: lookups within an index interval)."""
        end = self._size if end is None else min(end, self._size)
        while position < end:
            header = self.header_at(position)
            if header is None:
                return
            yield position, header
            position += header.size

    @contextmanager
    def mapped(self) -> Iterator[np.ndarray]:
        """The whole file as a read-only uint8 array: one mapping, shared by every reader of this
        version of the file (version_cache.py). Use it inside the block only: a later change to
        the file releases it."""
        yield self._mapping()[1]

    def _mapping(self) -> tuple[int, np.ndarray]:
        """(version, the mapping of the file at that version)."""
        with self._lock:  # the size and version of one moment (an append changes both)
            version, size = self._version, self._size
        if size == 0:
            return version, _EMPTY
        with self._map_lock:  # not the append lock: populating a large file takes milliseconds
            buf = version_cache.mappings.get(version)
            if buf is None:
                # MAP_POPULATE maps every page up front in one call instead of one fault a page
                mm = mmap.mmap(self._fd, size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
                buf = np.frombuffer(mm, dtype=np.uint8)
                self._release_mapping()  # of an older version: nobody asks for it again
                version_cache.mappings.put(version, buf)
                self._mapped_version = version
        return version, buf

    def _release_mapping(self) -> None:
        """Drop this file's mapping from the cache; it is unmapped once no reader holds it."""
        if self._mapped_version:
            version_cache.mappings.drop(self._mapped_version)
            self._mapped_version = 0

    def scan(self, start: int = 0) -> BatchTable:
        """Header columns of every batch from ``start`` (stops at a torn tail or corruption). The
        table of a whole file is shared (version_cache.py): its columns are read-only."""
        if start == 0:
            cached = version_cache.tables.get(self._version)
            if cached is not None:
                return cached
        version, buf = self._mapping()
        table = scan_batches(buf, start, buf.shape[0])
        if start == 0:
            version_cache.tables.put(version, table)
        return table

    def search_for_offset(self, target_offset: int, starting_position: int) -> LogOffsetPosition | None:
        """The first batch at or after ``starting_position`` whose last offset >= target."""
        for position, header in self.headers_from(starting_position):
            if header.last_offset >= target_offset:
                return LogOffsetPosition(header.last_offset, position, header.size)
        return None

    def search_for_timestamp(self, target_ms: int, starting_position: int) -> TimestampAndOffset | None:
        """The first batch from ``starting_position`` with max timestamp >= target: its max
        timestamp and the offset of its first record at or after the target (batch base when
        the records are not inspected)."""
        for _position, header in self.headers_from(starting_position):
            if header.max_timestamp >= target_ms:
                return TimestampAndOffset(header.max_timestamp, header.base_offset)
        return None


def _finish_write(fd: int, data: bytes | bytearray | memoryview, header: bytes | None, position: int,
                  written: int) -> None:
    """Finish a short write (a signal, a nearly full disk) of ``data`` (its start replaced by
    ``header``) at ``position``, of which ``written`` bytes went."""
    whole = data if header is None else header + bytes(memoryview(data)[len(header):])
    pwrite_all(fd, whole, position, written)
