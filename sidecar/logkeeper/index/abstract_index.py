"""A fixed-width, memory-mapped index file: the part the offset index and time index share.

On-disk layout (both indexes)
-----------------------------
An index file is an array of fixed-size entries, big-endian, with no header and no trailer::

    +---------+---------+-----+-------------+----------------------------------+
    | entry 0 | entry 1 | ... | entry N - 1 | zero bytes (preallocated, unused) |
    +---------+---------+-----+-------------+----------------------------------+

| index      | entry size | fields (big-endian)                                |
|------------|------------|----------------------------------------------------|
| .index     | 8 bytes    | relative offset int32 · file position int32        |
| .timeindex | 12 bytes   | timestamp int64 · relative offset int32            |

A relative offset is ``offset - base_offset`` of the segment and must fit in 0..2**31-1.

Life cycle (Kafka's rules)
--------------------------
* A file that does not exist is created and preallocated (sparse zeros) to ``max_index_size``
  rounded down to a multiple of the entry size; it starts with 0 entries.
* A file that exists is mapped at its current length and is assumed valid: its entry count is
  ``length // entry_size`` (a trimmed file is exactly full), or, for a file with holes (left
  untrimmed by a kill), the slots before its first hole. ``sanity_check`` catches the obvious
  corruptions; a corrupt index is rebuilt from its segment, never repaired.
* ``trim_to_valid_size`` (on close and on roll) cuts the file to ``entries * entry_size``;
  ``resize`` grows it back (e.g. when an old segment becomes active again).
* Read-only mode (``writable=False``) maps the file read-only; nothing in this class then changes
  the file (no create, no trim on close, no resize), so verification tools can open any file.

No SIGBUS on a full disk
------------------------
A store into a page of a shared mapping that has no block behind it (a hole of the sparse file)
makes the kernel allocate one; when the disk is full it cannot, and the process gets SIGBUS,
which Python cannot catch: the whole sidecar dies, every healthy log dir with it. On tmpfs even a
READ of a hole through a shared mapping allocates, so the same happens to readers. So the map
never covers a hole:

* A writable index maps only the prefix of the file whose blocks are allocated
  (``posix_fallocate``, which fails with an OSError -- ENOSPC, EIO -- instead of faulting), and
  grows that prefix in ``ALLOCATION_CHUNK_BYTES`` steps before an entry is stored past it
  (``_reserve``). The file itself keeps Kafka's sparse, preallocated length, so ``max_entries``
  and trimming are unchanged and the disk holds at most a chunk more than the entries use.
  With ``lazy_blocks`` (the cleaner's new segments, written whole and trimmed at once) nothing is
  allocated at creation and the prefix grows a page at a time: trimming blocks allocated and never
  written frees them (on a disk mounted with ``discard``, discards them too); with pages, a trim
  cuts only holes and the tail of the last written block.
* An existing file with holes (an active segment's index left untrimmed by a kill) counts its
  entries up to its first hole: its blocks are allocated chunk by chunk from the start, so no
  entry was ever stored past it. Kafka counts every slot, the zeros of the holes too; those are
  no entries either, and recovery rebuilds that segment's indexes anyway. So opening it needs no
  free space, and a disk still full after the kill loads: a writable index maps the allocated
  prefix and grows it as above. (Allocating the whole file first took that directory offline
  until ``segment.index.bytes`` were free.)
* A read-only index of a file with holes reads its entries into memory instead of mapping them:
  a writer may trim the file under a reader (the active segment's index, at a roll).

The OSError reaches the caller like any failed write, and the LogManager takes that log dir
offline (``io_guard``).

Concurrency: one ``threading.RLock`` guards every access to the map. Appends come from one writer,
lookups from readers, truncate/resize/close are exclusive; lookups take the lock too, because a
resize or close replaces (unmaps) the map under them. The lock is held for microseconds.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Generic, Self, TypeVar

import numpy as np
import numpy.typing as npt

from logkeeper.errors import IndexOffsetOverflowError
from logkeeper.fileio import allocate_blocks, as_path, first_hole, pwrite_all
from logkeeper.index.search import entries_below, search

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024  # segment.index.bytes default
INT32_MAX = 2**31 - 1
_INT32 = struct.Struct(">i")
EntryT = TypeVar("EntryT")
# Kafka's "warm section": lookups near the end of the index (in-sync readers) only touch the last
# 8 KiB of entries, keeping those pages hot in the page cache. See search.py.
WARM_SECTION_BYTES = 8192
# How far ahead of the entries a writable index allocates blocks: 16 pages, i.e. 8,192 offset
# entries (32 MiB of log at the default index.interval.bytes) per fallocate and remap.
ALLOCATION_CHUNK_BYTES = 64 * 1024


def _round_down(number: int, factor: int) -> int:
    return factor * (number // factor)


def _round_up(number: int, factor: int) -> int:
    return factor * -(-number // factor)


class AbstractIndex(ABC, Generic[EntryT]):
    """An index of fixed-size entries in a memory-mapped file; subclasses define the entries
    (``EntryT``, read by ``_parse``), each holding its offset relative to the base offset as an
    int32 at ``relative_offset_field``."""

    entry_size: ClassVar[int]
    relative_offset_field: ClassVar[int]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
        writable: bool = True,
        lazy_blocks: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        # blocks allocated a chunk at a time, the first at creation; lazily, a page at a time as
        # entries reach them (module docstring: for an index written at once and trimmed)
        self._chunk = mmap.PAGESIZE if lazy_blocks else ALLOCATION_CHUNK_BYTES
        self._lazy = lazy_blocks
        self._path = as_path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._warm_entries = WARM_SECTION_BYTES // self.entry_size
        self._mm: mmap.mmap | None = None  # None while closed, or when nothing is mapped
        # a read-only index of a file with holes is read into memory instead (module docstring)
        self._copy: bytes | None = None
        self._closed = False
        self._length = 0  # the file's length
        # bytes from the start of the file that the map covers and may store to; a writable index has
        # them allocated (after a trim the map may reach on to the end of that page: resize)
        self._mapped = 0
        self._max_entries = 0
        # created: the file did not exist, this index made it; filled: the bytes holding entries
        self.created, filled = self._open_and_map()
        self._entries = filled // self.entry_size
        self._refresh_last_entry()

    # ----------------------------------------------------------------------------------------
    # Opening and mapping
    # ----------------------------------------------------------------------------------------
    def _open_and_map(self) -> tuple[bool, int]:
        """Open (creating and preallocating a missing file when writable) and map; whether it was
        created, and the bytes of it that hold entries: none in a new file; an existing one is
        taken as full of valid entries up to its first hole (module docstring).

        Raw descriptors rather than ``open()``: a buffered file object costs an isatty probe and
        several seeks per open, and a cleaned segment opens each of its indexes three times
        (create, first entries, trim)."""
        created = False
        filled = 0
        if self._writable:
            # the file is there when a log loads (thousands of them): try that first, and create
            # it (O_EXCL: to know it was made here) only when it is missing
            try:
                fd = os.open(self._path, os.O_RDWR)
            except FileNotFoundError:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
                created = True
        else:
            fd = os.open(self._path, os.O_RDONLY)  # a missing file raises FileNotFoundError
        try:
            try:
                if created:
                    if self._max_index_size < self.entry_size:
                        raise ValueError(f"invalid max index size {self._max_index_size} for {self._path}")
                    length = _round_down(self._max_index_size, self.entry_size)
                    os.ftruncate(fd, length)  # sparse: the blocks are allocated chunk by chunk
                    allocated = 0 if self._lazy else min(length, ALLOCATION_CHUNK_BYTES)
                    allocate_blocks(fd, 0, allocated)  # on a full disk, fail here rather than at an append
                else:
                    length = os.fstat(fd).st_size
                    # a file with holes was left untrimmed by a kill: its entries end at the first
                    # hole (module docstring), and nothing is allocated to open it
                    allocated = filled = first_hole(fd, length)
                    if allocated < length and not self._writable:
                        self._copy = os.pread(fd, allocated, 0)
                        allocated = 0
            except BaseException:
                self._closed = True
                if created:  # a half-made file would be taken as full of entries next time
                    os.close(fd)
                    fd = -1
                    self._path.unlink(missing_ok=True)
                raise
            self._map(fd, allocated, length)
        finally:
            if fd >= 0:
                os.close(fd)
        return created, filled

    def _map(self, fd: int, allocated: int, length: int | None = None) -> None:
        """Map the first ``allocated`` bytes of the file (at most its ``length``, read from the
        file when not given), which must have blocks.

        mmap cannot map 0 bytes, so an index with nothing allocated has no map.
        """
        try:
            # a read-only copy is the file's entries as they were read (a writer may trim it meanwhile)
            if self._copy is not None:
                length = len(self._copy)
            elif length is None:
                length = os.fstat(fd).st_size
            mapped = min(allocated, length)
            access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
            self._mm = mmap.mmap(fd, mapped, access=access) if mapped > 0 else None
        except BaseException:
            self._mm = None
            self._closed = True
            raise
        self._length = length
        self._mapped = mapped
        self._max_entries = length // self.entry_size

    def _unmap(self) -> None:
        self._copy = None
        self._mapped = 0
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _reserve(self, end: int, fd: int | None = None) -> None:
        """Make bytes ``[0, end)`` allocated and mapped before an entry is stored there (lock held).

        Allocates up to the next chunk boundary (never past the file's length) and remaps; an
        OSError (a full or failing disk) leaves the index as it was.
        """
        if end <= self._mapped:
            return
        own = fd is None
        if fd is None:
            fd = os.open(self._path, os.O_RDWR)
        try:
            length = os.fstat(fd).st_size
            target = min(length, _round_up(end, self._chunk))
            if target < end:
                raise ValueError(f"index {self._path} has {length} bytes, {end} are needed")
            allocate_blocks(fd, self._mapped, target)
            self._unmap()
            self._map(fd, target, length)
        finally:
            if own:
                os.close(fd)

    def _buffer(self) -> mmap.mmap | bytes | bytearray:
        """The map to read or write; raises ValueError once the index has been closed or unmapped."""
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        if self._mm is not None:
            return self._mm
        return self._copy if self._copy is not None else bytearray()

    def _ensure_writable(self, action: str) -> None:
        if not self._writable:
            raise io.UnsupportedOperation(f"cannot {action}: index {self._path} is open read-only")

    # ----------------------------------------------------------------------------------------
    # What subclasses provide
    # ----------------------------------------------------------------------------------------
    @abstractmethod
    def _refresh_last_entry(self) -> None:
        """Reload the cached last entry after the entry count changed."""

    @abstractmethod
    def sanity_check(self) -> None:
        """Raise CorruptIndexError (naming the file) when the index is obviously corrupt."""

    @abstractmethod
    def _parse(self, n: int) -> EntryT:
        """The n-th entry, read from the map (no checks)."""

    def entry(self, n: int) -> EntryT:
        """The n-th entry (0-based); IndexError outside ``0..entries-1``."""
        with self._lock:
            self._buffer()
            if n < 0 or n >= self._entries:
                raise IndexError(f"entry {n} requested from index {self._path}, which has {self._entries} entries")
            return self._parse(n)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; no effect past the last entry."""
        with self._lock:
            self._buffer()
            kept = self._entries_below(offset - self._base_offset, _INT32, self.relative_offset_field)
            self._set_entries(kept)

    def _relative_offsets(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``offsets - base_offset`` for a bulk append; IndexOffsetOverflowError naming the first
        offset whose relative offset is not an int32."""
        relative = offsets - self._base_offset
        if int(relative.min()) < 0 or int(relative.max()) > INT32_MAX:
            bad = int(offsets[np.flatnonzero((relative < 0) | (relative > INT32_MAX))[0]])
            raise IndexOffsetOverflowError(bad, self._base_offset, str(self._path))
        return relative

    def _append_packed(self, packed: bytes, count: int) -> None:
        """Write ``count`` already-checked entries after the last one (bulk rebuilds)."""
        self._buffer()  # raises once closed
        self._ensure_writable("append")
        if self._entries + count > self._max_entries:
            from logkeeper.errors import IndexFullError

            raise IndexFullError(
                f"cannot append {count} entries to index {self._path}: {self._entries} of "
                f"{self._max_entries} slots are used"
            )
        start = self._entries * self.entry_size
        # Written to the file, not stored through the map (which shares its page cache, so it
        # reads the entries at once): on ext4 the first store into a hole of the sparse,
        # preallocated file faults far longer than where the page holds data
        # (bench/results/design_figures.md: index, bulk append), and a bulk append is usually
        # the first write of a new segment's index (the cleaner's windows, an index rebuild).
        # flush's msync covers these pages.
        # The blocks are allocated first (``_reserve``), so the map grows over them.
        if packed:  # (a file without a map has no room: refused above)
            fd = os.open(self._path, os.O_RDWR)
            try:
                self._reserve(start + len(packed), fd)
                pwrite_all(fd, packed, start)
            finally:
                os.close(fd)
        self._entries += count
        self._refresh_last_entry()

    def truncate(self) -> None:
        """Remove all entries (the file keeps its length)."""
        with self._lock:
            self._buffer()
            self._set_entries(0)

    # ----------------------------------------------------------------------------------------
    # Properties
    # ----------------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def length(self) -> int:
        """Length in bytes of the file (preallocated space included; only a prefix is mapped)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries."""
        return self._entries * self.entry_size

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; raises IndexOffsetOverflowError when it does not fit an int32."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(offset, self._base_offset, str(self._path))
        return relative

    # ----------------------------------------------------------------------------------------
    # File operations
    # ----------------------------------------------------------------------------------------
    def resize(self, new_size: int) -> bool:
        """Set file and map length to ``new_size`` rounded down to the entry size; False if unchanged.

        Entries are kept; shrinking below ``size_in_bytes`` raises ValueError without touching the
        file (Kafka fails there too, after cutting the file).
        """
        with self._lock:
            self._buffer()
            self._ensure_writable("resize")
            if new_size < 0:
                raise ValueError(f"invalid size {new_size} for index {self._path}")
            rounded = _round_down(new_size, self.entry_size)
            if rounded == self._length:
                return False
            if rounded < self.size_in_bytes:
                raise ValueError(
                    f"cannot resize index {self._path} to {rounded} bytes: its {self._entries} entries "
                    f"use {self.size_in_bytes} bytes"
                )
            fd = os.open(self._path, os.O_RDWR)
            try:
                if rounded < self._length and self._mapped <= _round_up(rounded, mmap.PAGESIZE):
                    # No mapped page is left wholly past the new end (the trim of an index whose
                    # blocks come a page at a time: each cleaned segment's): the map is kept. Its
                    # bytes past the end read as zeros and are never stored to: ``_reserve``
                    # allocates and remaps before an entry goes past ``_mapped``.
                    os.ftruncate(fd, rounded)
                    self._length, self._mapped = rounded, min(self._mapped, rounded)
                    self._max_entries = rounded // self.entry_size
                else:
                    # Unmap before cutting the file: touching a mapped page past EOF raises SIGBUS.
                    # What stays allocated is the mapped prefix (a shrink may cut it); a grown tail
                    # is a hole, allocated by ``_reserve`` when entries reach it.
                    allocated = self._mapped
                    self._unmap()
                    try:
                        os.ftruncate(fd, rounded)
                    except BaseException:
                        self._map(fd, allocated)  # the file's length now, read back: the cut failed
                        raise
                    self._map(fd, allocated, rounded)
            finally:
                os.close(fd)
            self._refresh_last_entry()
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail: file length becomes ``entries * entry_size``."""
        with self._lock:
            self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Remove all entries and grow the file back to ``max_index_size``."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def flush(self) -> None:
        """msync the map to disk."""
        with self._lock:
            self._buffer()
            if self._writable and self._mm is not None:
                self._mm.flush()

    def close(self, *, sync: bool = False) -> None:
        """Trim to the valid size (writable only) and unmap. Raises ValueError if already unmapped.
        With ``sync``, the entries and the trimmed length are fsynced too (a clean shutdown: the
        next start trusts the index as it is on disk)."""
        with self._lock:
            self._buffer()
            if self._writable:
                self.trim_to_valid_size()
            self.close_handler()
            if sync and self._writable:
                fd = os.open(self._path, os.O_RDONLY)  # fsync writes the mapped pages and the length
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close_handler(self) -> None:
        """Unmap without trimming; safe to repeat. Every later use of the index raises ValueError."""
        with self._lock:
            self._unmap()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap and delete the file; True if this call deleted it, False if it did not exist."""
        self.close_handler()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        """Atomically rename the file; as in Kafka, the new path is adopted even if the rename fails."""
        with self._lock:
            try:
                os.replace(self._path, path)
            finally:
                self._path = as_path(path)

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Point at the same file name in another directory (after the directory was renamed)."""
        with self._lock:
            self._path = Path(parent_dir) / self._path.name

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries}, writable={self._writable})"
        )

    # ----------------------------------------------------------------------------------------
    # Helpers for subclasses (call with the lock held)
    # ----------------------------------------------------------------------------------------
    def _set_entries(self, entries: int) -> None:
        self._entries = entries
        self._refresh_last_entry()

    def _search(self, target: int, field: struct.Struct, field_offset: int, upper: bool) -> int:
        """search.py's bisect over one field of the entries (``upper``: a slot of an entry >=
        target, else the largest entry <= target; -1 when none)."""
        if self._entries == 0:
            return -1
        return search(self._buffer(), self._entries, self.entry_size, self._warm_entries, target, field,
                      field_offset, upper)

    def _entries_below(self, target: int, field: struct.Struct, field_offset: int) -> int:
        """How many leading entries have ``field < target`` (the entry count after truncate_to)."""
        if self._entries == 0:
            return 0
        return entries_below(self._buffer(), self._entries, self.entry_size, self._warm_entries, target, field,
                             field_offset)
