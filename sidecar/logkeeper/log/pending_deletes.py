"""Segments out of a log whose files wait for file.delete.delay.ms before they are unlinked.

Kafka deletes a segment in two steps: its files are renamed ``.deleted`` at once (log.py), and
unlinked after the delay, so that a reader that found the segment before it left the log can
finish with it. This module holds the second step: what waits, until when, and the unlinks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..fileio import call_each

if TYPE_CHECKING:
    from .segment import LogSegment


def unlink_segments(doomed: Sequence[LogSegment]) -> None:
    """Delete the files of every segment, overlapped (``call_each``: every one is tried, the
    first error is raised)."""
    call_each(lambda segment: segment.delete_if_exists(), doomed)


class PendingDeletes:
    """The segments of one log waiting to be unlinked, each batch with the time it is due."""

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock = clock_ms
        self._lock = threading.Lock()
        self._waiting: list[tuple[int, list[LogSegment]]] = []

    def schedule(self, doomed: list[LogSegment], delay_ms: int) -> None:
        """Unlink ``doomed`` after ``delay_ms`` (before returning, when it is not positive)."""
        if delay_ms <= 0:
            unlink_segments(doomed)
            return
        with self._lock:
            self._waiting.append((self._clock() + delay_ms, doomed))

    def take_due(self, *, all_now: bool = False) -> list[LogSegment]:
        """The segments whose delay has passed (every one with ``all_now``), no longer waiting."""
        due_by = float("inf") if all_now else self._clock()
        with self._lock:
            due = [segment for when, segments in self._waiting if when <= due_by for segment in segments]
            self._waiting = [item for item in self._waiting if item[0] > due_by]
        return due

    def segments(self) -> list[LogSegment]:
        """Every segment still waiting (closing or deleting the log releases or removes them too)."""
        with self._lock:
            return [segment for _when, segments in self._waiting for segment in segments]
