"""Appending a cleaned segment's windows on a helper thread, so that writing one window overlaps
cleaning the next; or on the cleaner's own thread for a small group (``appender_for``).

Why: the cleaning pass makes its output one window at a time (filter.py). Writing a window into
the page cache (pwrite), then to disk (the flush before the swap), was a visible part of a W1
round on the cleaner's thread (figures: bench/results/cleaner_output.md). The helper appends
each window and at once starts its writeback to disk (``FileRecords.start_writeback``), while
the cleaner's thread cleans the next window; the flush before the swap then mostly waits for the
last window. The helper only does the appends (their index entries and the I/O): the cleaning
itself stays on the cleaner's thread.

Order and errors: windows are appended one at a time in the order given, at most two waiting.
The first error of the helper is raised on the cleaner's thread by the next ``append`` or by
``close``; after it the helper appends nothing more. Leaving the ``with`` block waits for the
helper: normally until every window is appended, so the segment is whole before it is flushed;
when the block is left by an exception, until the helper has dropped what was waiting, so no
write goes on into a segment that is about to be deleted.

A group of small segments (Kafka's 1 MiB segment.bytes: a cleaned segment of a few windows) has
next to nothing to overlap, and a thread started and joined for each such group was a fixed cost
of every group (bench/results/cleaner_output.md); ``appender_for`` appends those inline.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from types import TracebackType

from ..log.segment import AppendedBatch, LogSegment

_DONE = None
Window = tuple[Sequence[AppendedBatch], memoryview]
# groups of at most this many input bytes are appended on the cleaner's thread
INLINE_GROUP_BYTES = 8 << 20


class InlineAppender:
    """``WindowAppender``'s interface, appending on the calling thread."""

    def __init__(self, dest: LogSegment) -> None:
        self._dest = dest

    def append(self, batches: Sequence[AppendedBatch], data: memoryview) -> None:
        self._dest.append(batches, data)

    def __enter__(self) -> InlineAppender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self._dest.log.start_writeback()  # as the helper does after each window


def appender_for(dest: LogSegment, group_bytes: int) -> WindowAppender | InlineAppender:
    """A helper thread for a big group, inline appends for a small one (module docstring)."""
    return InlineAppender(dest) if group_bytes <= INLINE_GROUP_BYTES else WindowAppender(dest)


class WindowAppender:
    """``append`` as ``LogSegment.append``, done by a helper thread (see the module docstring)."""

    def __init__(self, dest: LogSegment) -> None:
        self._dest = dest
        self._windows: queue.Queue[Window | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name=f"cleaned-{dest.base_offset}-appender",
                                        daemon=True)
        self._thread.start()

    def append(self, batches: Sequence[AppendedBatch], data: memoryview) -> None:
        self._raise_error()
        self._windows.put((batches, data))

    def __enter__(self) -> WindowAppender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self._abandoned = True  # the cleaner failed: its error is the one to raise
        self._windows.put(_DONE)
        self._thread.join()
        if exc is None:
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            window = self._windows.get()
            if window is _DONE:
                return
            if self._error is not None or self._abandoned:
                continue
            try:
                self._dest.append(*window)
                self._dest.log.start_writeback()
            except BaseException as e:  # handed to the cleaner's thread
                self._error = e
