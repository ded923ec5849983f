"""Positional writes that write everything.

``os.pwrite`` may write fewer bytes than asked (a signal, a nearly full disk); the callers that
must not lose the rest (a segment's appends, an index's bulk entries) finish with this loop.
"""

from __future__ import annotations

import os


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int, written: int = 0) -> None:
    """Write ``data[written:]`` at ``position + written``, again after each short write."""
    view = memoryview(data)
    while written < len(view):
        written += os.pwrite(fd, view[written:], position + written)
