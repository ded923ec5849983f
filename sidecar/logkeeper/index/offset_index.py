"""Kafka's offset index (``<base offset, 20 digits>.index``): offset -> file position in the .log.

On-disk format: an array of 8-byte entries, big-endian, no header; the file is preallocated with
zeros and trimmed to ``entries * 8`` bytes when the segment is closed or rolled.

| byte | field           | type        | meaning                                              |
|------|-----------------|-------------|------------------------------------------------------|
| 0    | relative offset | int32 (BE)  | offset - base offset of the segment (0..2**31-1)     |
| 4    | position        | int32 (BE)  | byte position in the .log where that batch starts    |

Entries are sparse (one per ``index.interval.bytes`` of appended batches) and strictly increasing
by offset; the segment pairs the LAST offset of a batch with the position where the batch starts.
``lookup(t)`` returns the entry with the greatest offset <= t, or ``(base_offset, 0)`` when none
is, so a reader scans the .log forward from that position.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from logkeeper.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from logkeeper.index.abstract_index import INT32_MAX, AbstractIndex

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")  # relative offset, position
_NP_ENTRY = np.dtype([("relative", ">i4"), ("position", ">i4")])
_INT32 = struct.Struct(">i")
_OFFSET_FIELD = 0
_POSITION_FIELD = 4


class OffsetPosition(NamedTuple):
    """An absolute offset and the byte position in the .log of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """A memory-mapped offset index; see the module docstring for the file format."""

    entry_size = ENTRY_SIZE
    relative_offset_field = _OFFSET_FIELD
    _last_offset: int

    # ----------------------------------------------------------------------------------------
    def _parse(self, n: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(self._buffer(), n * ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)

    def _refresh_last_entry(self) -> None:
        self._last_offset = self._parse(self._entries - 1).offset if self._entries else self._base_offset

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; the base offset while the index is empty."""
        return self._last_offset

    def sanity_check(self) -> None:
        """Kafka's checks: last offset below the base offset; length not a multiple of 8."""
        if self._entries != 0 and self._last_offset < self._base_offset:
            raise CorruptIndexError(
                f"corrupt offset index {self._path}: it has {self._entries} entries but its last offset "
                f"{self._last_offset} is below the base offset {self._base_offset}"
            )
        if self._length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"corrupt offset index {self._path}: length {self._length} bytes is not a multiple of "
                f"{ENTRY_SIZE}"
            )

    # ----------------------------------------------------------------------------------------
    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset <= ``target_offset``; ``(base_offset, 0)`` if none."""
        with self._lock:
            slot = self._search(target_offset - self._base_offset, _INT32, _OFFSET_FIELD, upper=False)
            if slot == -1:
                self._buffer()  # an empty but closed index still raises
                return OffsetPosition(self._base_offset, 0)
            return self._parse(slot)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """An entry surely past a fetch of ``fetch_size`` bytes from ``fetch_offset.position``.

        As in Kafka: an entry whose position is >= ``position + fetch_size`` (not always the
        smallest such one), or None when the index has none.
        """
        with self._lock:
            self._buffer()
            target = fetch_offset.position + fetch_size
            slot = self._search(target, _INT32, _POSITION_FIELD, upper=True)
            return None if slot == -1 else self._parse(slot)

    # ----------------------------------------------------------------------------------------
    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; the offset must be larger than the last entry's.

        Raises IndexFullError when full, InvalidOffsetError when out of order,
        IndexOffsetOverflowError when ``offset - base_offset`` is not an int32, ValueError for a
        position outside 0..2**31-1, io.UnsupportedOperation on a read-only index.
        """
        # checks inlined, and the lock taken without `with` (half the cost): this runs on every
        # index entry of the append path
        self._lock.acquire()
        try:
            if self._closed or not self._writable:
                self._buffer()
                self._ensure_writable("append")
            entries = self._entries
            if entries >= self._max_entries:
                raise IndexFullError(
                    f"cannot append to full offset index {self._path} ({entries} entries)"
                )
            if entries != 0 and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"cannot append offset {offset} at slot {entries} of offset index {self._path}: "
                    f"not larger than the last offset {self._last_offset}"
                )
            relative = offset - self._base_offset
            if relative < 0 or relative > INT32_MAX:
                raise IndexOffsetOverflowError(offset, self._base_offset, str(self._path))
            if not 0 <= position <= INT32_MAX:
                raise ValueError(f"position {position} for offset index {self._path} is not an int32 >= 0")
            end = (entries + 1) * ENTRY_SIZE
            if end > self._mapped:  # blocks first: a store into a hole faults on a full disk
                self._reserve(end)
            mm = self._mm
            assert mm is not None
            _ENTRY.pack_into(mm, entries * ENTRY_SIZE, relative, position)
            self._entries = entries + 1
            self._last_offset = offset
        finally:
            self._lock.release()

    def append_many(self, offsets: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]) -> None:
        """Append entries in bulk (a segment's index rebuilt after recovery); same rules as
        ``append``: offsets strictly increasing past the last entry, relative offsets and
        positions within int32."""
        if len(offsets) == 0:
            return
        with self._lock:
            first = int(offsets[0])
            if self._entries != 0 and first <= self._last_offset:
                raise InvalidOffsetError(
                    f"cannot append offset {first} to offset index {self._path}: not larger than "
                    f"the last offset {self._last_offset}"
                )
            if len(offsets) > 1 and bool(np.any(np.diff(offsets) <= 0)):
                raise InvalidOffsetError(f"offsets appended to {self._path} are not increasing")
            relative = self._relative_offsets(offsets)
            if int(positions.min()) < 0 or int(positions.max()) > INT32_MAX:
                raise ValueError(f"positions for offset index {self._path} must be int32 >= 0")
            packed = np.empty(len(offsets), dtype=_NP_ENTRY)
            packed["relative"] = relative
            packed["position"] = positions
            self._append_packed(packed.tobytes(), len(offsets))
