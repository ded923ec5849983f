"""Whether a range of a file is in the page cache, and bringing it there.

The Kafka listener sends a fetch's records from their segment with sendfile (connection.py).
sendfile reads the file on the event loop's thread: bytes not in the page cache would stall every
connection of the loop on the disk. So a fetch first asks ``cached``: Linux's ``cachestat``
(6.5+) counts the cached pages of a range in one system call without touching the bytes. When
it says no, or cannot say (an older kernel, a seccomp filter refusing an unknown call), the fetch
goes to a thread, which ``warm``s the range (reads it, so the kernel caches it) before the loop
sends it; a page evicted in between costs the loop that one read, as it would cost Kafka's
network thread.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import threading

PAGE = mmap.PAGESIZE
_SYS_CACHESTAT = 451  # the same number on every architecture (the generic syscall table, 6.5+)
_WARM_CHUNK = 1 << 20
log = logging.getLogger(__name__)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64), ("nr_writeback", ctypes.c_uint64),
                ("nr_evicted", ctypes.c_uint64), ("nr_recently_evicted", ctypes.c_uint64)]


def _syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_CALL = _syscall()
_supported = _CALL is not None and os.uname().sysname == "Linux"
_local = threading.local()


def queryable() -> bool:
    """Whether ``cached`` can still answer True (False once the kernel refused the query)."""
    return _supported


def cached(fd: int, position: int, size: int) -> bool:
    """True when every page of ``[position, position + size)`` of ``fd`` is in the page cache;
    False when one is not, or when this kernel cannot tell."""
    global _supported
    if size <= 0:
        return True
    if not _supported or _CALL is None:
        return False
    rng, stat = _Range(position, size), _Stat()
    if _CALL(ctypes.c_long(_SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(rng), ctypes.byref(stat),
             ctypes.c_uint(0)) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter. Not on this node, ever
            _supported = False
            log.info("the page cache cannot be queried here (cachestat: %s): every fetch of records goes to a "
                     "thread, which reads them into the page cache before they are sent", os.strerror(err))
        return False
    pages = (position + size + PAGE - 1) // PAGE - position // PAGE
    return bool(stat.nr_cache >= pages)


def warm(fd: int, position: int, size: int) -> None:
    """Read ``[position, position + size)`` of ``fd`` into a scratch buffer of this thread, so
    that the kernel holds it in the page cache (for a thread, which may wait for the disk)."""
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(_WARM_CHUNK)
    view = memoryview(buf)
    end = position + size
    while position < end:
        n = os.preadv(fd, [view[:min(_WARM_CHUNK, end - position)]], position)
        if n <= 0:
            return  # the file is shorter: the send finds out and closes the connection
        position += n
