"""Reads that may refuse to wait for the disk: how an event loop serves a fetch on its own thread.

A Kafka fetch of data a consumer just produced is in the page cache. Handing it to an I/O thread
and taking the answer back costs two thread wake-ups a fetch, each waiting for a core. The
consumer waits for each answer before it fetches again, so those wake-ups add to every fetch.
Reading on the event loop is safe only when no read can block on the disk, because one slow read
there stalls every connection.

``no_wait()`` marks such a block. ``pread`` inside it uses ``preadv2`` with ``RWF_NOWAIT``: the
kernel reads only what the page cache holds. If a read would need the disk, or reads short, it
raises ``WouldBlock``. The same happens where the file system does not offer ``RWF_NOWAIT``
(EOPNOTSUPP). The caller then does the whole operation again on an I/O thread, outside
``no_wait``.

``WouldBlock`` is not an OSError, so LogManager.io_guard never takes it for a failing disk.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_NO_WAIT: ContextVar[bool] = ContextVar("logkeeper_no_wait", default=False)
# RWF_NOWAIT's absence in a build of Python, or a file system without it, is a "would block": the
# I/O thread serves the read
_REFUSED = (errno.EAGAIN, errno.EOPNOTSUPP, errno.EINVAL)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)
# a bigger read goes to the I/O thread (it is no fetch an event loop should copy), and this bounds
# the scratch buffer a thread keeps
MAX_READ_BYTES = 8 << 20
_local = threading.local()


class WouldBlock(Exception):
    """A read under ``no_wait()`` would have waited for the disk: nothing failed."""


@contextmanager
def no_wait() -> Iterator[None]:
    """Inside: ``pread`` raises WouldBlock instead of waiting for the disk."""
    token = _NO_WAIT.set(True)
    try:
        yield
    finally:
        _NO_WAIT.reset(token)


def pread(fd: int, size: int, position: int) -> bytes:
    """``os.pread``; under ``no_wait()``, all ``size`` bytes from the page cache or WouldBlock."""
    if not _NO_WAIT.get():
        return os.pread(fd, size, position)
    if _RWF_NOWAIT is None:
        raise WouldBlock(f"no RWF_NOWAIT: {size} bytes at {position}")
    if size > MAX_READ_BYTES:
        raise WouldBlock(f"{size} bytes at {position}: more than a no-wait read takes")
    with memoryview(_scratch(size))[:size] as view:
        try:
            got = os.preadv(fd, [view], position, _RWF_NOWAIT)
        except OSError as e:
            if e.errno in _REFUSED:
                raise WouldBlock(f"{size} bytes at {position}: {e.strerror}") from None
            raise
        if got < size:  # part of the range is not cached (or the file shrank): the I/O thread reads it
            raise WouldBlock(f"{got} of {size} bytes at {position} cached")
        return bytes(view)


def _scratch(size: int) -> bytearray:
    """This thread's buffer for no-wait reads, at least ``size`` bytes. preadv needs a writable
    buffer; a new one each read, copied into the bytes returned, made two fresh allocations of the
    read's size live at once, and their page faults cost many times the read itself."""
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = _local.buf = bytearray(max(size, 1 << 20))
    return buf
