"""LogSegments: a log's segments ordered by base offset, with floor and range lookups."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from .segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._by_offset: dict[int, LogSegment] = {}
        self._last: LogSegment | None = None  # kept on every change: read on each append, without the lock
        self._lock = threading.Lock()

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert (or replace) the segment at its base offset; return the one replaced."""
        with self._lock:
            old = self._by_offset.get(segment.base_offset)
            if old is None:
                bisect.insort(self._offsets, segment.base_offset)
            self._by_offset[segment.base_offset] = segment
            self._last = self._by_offset[self._offsets[-1]]
            return old

    def remove(self, base_offset: int) -> LogSegment | None:
        with self._lock:
            seg = self._by_offset.pop(base_offset, None)
            if seg is not None:
                self._offsets.pop(bisect.bisect_left(self._offsets, base_offset))
                self._last = self._by_offset[self._offsets[-1]] if self._offsets else None
            return seg

    def clear(self) -> None:
        with self._lock:
            self._offsets.clear()
            self._by_offset.clear()
            self._last = None

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.values())

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._by_offset

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_offset.get(base_offset)

    def _span(self, from_offset: int | None, to_offset: int | None) -> tuple[int, int]:
        """The positions in _offsets of values(from_offset, to_offset); under the lock."""
        offsets = self._offsets
        lo = 0
        if from_offset is not None:
            if to_offset is not None and from_offset == to_offset:
                return 0, 0
            lo = max(0, bisect.bisect_right(offsets, from_offset) - 1)
        hi = len(offsets) if to_offset is None else bisect.bisect_left(offsets, to_offset)
        return lo, hi

    def values(self, from_offset: int | None = None, to_offset: int | None = None) -> list[LogSegment]:
        """Segments that may hold offsets in [from_offset, to_offset): from the floor segment of
        ``from_offset`` up to (excluding) the first segment based at or after ``to_offset``."""
        with self._lock:
            lo, hi = self._span(from_offset, to_offset)
            return [self._by_offset[o] for o in self._offsets[lo:hi]]

    def count(self, from_offset: int | None = None, to_offset: int | None = None) -> int:
        """len(values(from_offset, to_offset)) without making the list."""
        with self._lock:
            lo, hi = self._span(from_offset, to_offset)
            return max(0, hi - lo)

    def floor_segment(self, offset: int) -> LogSegment | None:
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset) - 1
            return self._by_offset[self._offsets[i]] if i >= 0 else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset)
            return self._by_offset[self._offsets[i]] if i < len(self._offsets) else None

    def higher_segments(self, offset: int) -> list[LogSegment]:
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset)
            return [self._by_offset[o] for o in self._offsets[i:]]

    @property
    def first(self) -> LogSegment | None:
        with self._lock:
            return self._by_offset[self._offsets[0]] if self._offsets else None

    @property
    def last(self) -> LogSegment | None:
        return self._last

    def base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._offsets)

    def size_in_bytes(self) -> int:
        return sum(s.size_in_bytes for s in self.values())
