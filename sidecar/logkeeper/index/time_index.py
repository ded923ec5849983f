"""Kafka's time index (``<base offset, 20 digits>.timeindex``): timestamp -> offset.

On-disk format: an array of 12-byte entries, big-endian, no header and no padding; the file is
preallocated with zeros and trimmed to ``entries * 12`` bytes when the segment is closed or rolled.

| byte | field           | type        | meaning                                              |
|------|-----------------|-------------|------------------------------------------------------|
| 0    | timestamp       | int64 (BE)  | largest timestamp seen so far in the segment (ms)    |
| 8    | relative offset | int32 (BE)  | offset of the record with that timestamp - base      |

Rules (Kafka's):
* An entry is appended only when its timestamp is larger than the last entry's; the "last entry"
  of an empty index is ``(-1, base_offset)``, so -1 (no timestamp) never makes an entry.
* Timestamps strictly increase; offsets never decrease.
* One slot is kept free (``is_full`` is ``entries >= max_entries - 1``) for the final entry
  written with ``skip_full_check=True`` when the segment becomes inactive.
* ``lookup(t)`` returns the entry with the greatest timestamp <= t, else ``(-1, base_offset)``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from logkeeper.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from logkeeper.index.abstract_index import AbstractIndex

ENTRY_SIZE = 12
NO_TIMESTAMP = -1
_ENTRY = struct.Struct(">qi")  # timestamp, relative offset ('>' means no alignment padding)
_NP_ENTRY = np.dtype([("timestamp", ">i8"), ("relative", ">i4")])
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_TIMESTAMP_FIELD = 0
_OFFSET_FIELD = 8
_INT64_MAX = 2**63 - 1


class TimestampOffset(NamedTuple):
    """A timestamp (ms) and the absolute offset of the record that carries it."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex[TimestampOffset]):
    """A memory-mapped time index; see the module docstring for the file format."""

    entry_size = ENTRY_SIZE
    relative_offset_field = _OFFSET_FIELD
    _last_entry: TimestampOffset

    # ----------------------------------------------------------------------------------------
    def _parse(self, n: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(self._buffer(), n * ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _refresh_last_entry(self) -> None:
        if self._entries == 0:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            self._last_entry = self._parse(self._entries - 1)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry; ``(-1, base_offset)`` while the index is empty."""
        return self._last_entry

    def is_full(self) -> bool:
        """Full one slot early: the last slot is kept for the entry written on roll/close."""
        return self._entries >= self._max_entries - 1

    def sanity_check(self) -> None:
        """Kafka's checks: last timestamp below the first; last offset below the base offset;
        length not a multiple of 12."""
        last = self.last_entry
        if self._entries != 0:
            first_timestamp = self.entry(0).timestamp
            if last.timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: it has {self._entries} entries but its last "
                    f"timestamp {last.timestamp} is below the first timestamp {first_timestamp}"
                )
            if last.offset < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: it has {self._entries} entries but its last "
                    f"offset {last.offset} is below the base offset {self._base_offset}"
                )
        if self.length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"corrupt time index {self._path}: length {self.length} bytes is not a multiple of "
                f"{ENTRY_SIZE}"
            )

    # ----------------------------------------------------------------------------------------
    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= target; ``(-1, base_offset)`` if none."""
        with self._lock:
            slot = self._search(target_timestamp, _INT64, _TIMESTAMP_FIELD, upper=False)
            if slot == -1:
                self._buffer()  # an empty but closed index still raises
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._parse(slot)

    # ----------------------------------------------------------------------------------------
    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``timestamp -> offset`` if the timestamp is larger than the last entry's.

        An entry equal to the last one is ignored (it is re-offered when a segment is closed or
        rolled). Raises IndexFullError when full (always when no slot at all is left, even with
        ``skip_full_check``), InvalidOffsetError when the offset goes backwards, ValueError when
        the timestamp goes backwards or is not an int64, IndexOffsetOverflowError when the
        relative offset is not an int32, io.UnsupportedOperation on a read-only index.
        """
        # checks inlined, and the lock taken without `with` (half the cost): this runs on every
        # index entry of the append path
        self._lock.acquire()
        try:
            if self._closed or not self._writable:
                self._buffer()
                self._ensure_writable("append")
            entries = self._entries
            if not skip_full_check and entries >= self._max_entries - 1:  # is_full()
                raise IndexFullError(
                    f"cannot append to full time index {self._path} ({entries} entries)"
                )
            last_timestamp, last_offset = self._last_entry
            if entries != 0 and offset < last_offset:
                raise InvalidOffsetError(
                    f"cannot append offset {offset} at slot {entries} of time index {self._path}: "
                    f"smaller than the last offset {last_offset}"
                )
            if entries != 0 and timestamp < last_timestamp:
                raise ValueError(
                    f"cannot append timestamp {timestamp} at slot {entries} of time index "
                    f"{self._path}: smaller than the last timestamp {last_timestamp}"
                )
            if timestamp <= last_timestamp:
                return
            if entries >= self._max_entries:
                raise IndexFullError(f"no slot left in time index {self._path} ({entries} entries)")
            relative = self.relative_offset(offset)
            if timestamp > _INT64_MAX:
                raise ValueError(f"timestamp {timestamp} for time index {self._path} is not an int64")
            end = (entries + 1) * ENTRY_SIZE
            if end > self._mapped:  # blocks first: a store into a hole faults on a full disk
                self._reserve(end)
            mm = self._mm
            assert mm is not None
            _ENTRY.pack_into(mm, entries * ENTRY_SIZE, timestamp, relative)
            self._entries = entries + 1
            self._last_entry = TimestampOffset(timestamp, offset)
        finally:
            self._lock.release()

    def append_many(self, timestamps: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> None:
        """Append entries in bulk (an index rebuilt after recovery). The entries must already
        follow ``maybe_append``'s rules: timestamps strictly increasing past the last entry's,
        offsets not decreasing; one slot stays free for the final entry."""
        if len(timestamps) == 0:
            return
        with self._lock:
            last = self._last_entry
            if int(timestamps[0]) <= last.timestamp or (len(timestamps) > 1 and bool(np.any(np.diff(timestamps) <= 0))):
                raise ValueError(f"timestamps appended to time index {self._path} are not increasing")
            if (self._entries and int(offsets[0]) < last.offset) or (
                    len(offsets) > 1 and bool(np.any(np.diff(offsets) < 0))):
                raise InvalidOffsetError(f"offsets appended to time index {self._path} go backwards")
            relative = self._relative_offsets(offsets)
            if self._entries + len(timestamps) > self._max_entries - 1:
                raise IndexFullError(
                    f"cannot append {len(timestamps)} entries to time index {self._path}: "
                    f"{self._entries} of {self._max_entries} slots are used"
                )
            packed = np.empty(len(timestamps), dtype=_NP_ENTRY)
            packed["timestamp"] = timestamps
            packed["relative"] = relative
            self._append_packed(packed.tobytes(), len(timestamps))
