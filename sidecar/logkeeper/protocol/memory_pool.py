"""Bytes held at once over every connection: request frames (Kafka's queued.max.request.bytes)
and the records of fetch answers (``kafka.queued.max.response.bytes``), a pool each.

A connection that has read a frame's 4-byte size asks the pool for that many bytes before it
reads (or allocates) the frame; when they are not free it stops reading its socket until they
are, so a client that sends faster than the node handles waits in TCP (backpressure), and a
flood of large frames cannot take more memory than the pool's capacity. The bytes go back once
the request has been handled.

Strict and first come, first served: a request is granted only when it fits in what is free, and
never ahead of an earlier waiter (a large frame is not starved by a stream of small ones). Kafka's
pool lets one allocation overshoot instead; here the config check (queued >= socket.request.max.bytes)
makes every valid frame fit in an empty pool, so waiting always ends.

Fetch answers over TLS: Kafka's broker, and this listener on plaintext connections, send a
fetch's records from the page cache (sendfile), so an answer a client does not read holds no
memory; over TLS they are read into the heap to be encrypted, so a client that asks for
fetch.max.bytes (50 MiB) and never reads held 50 MiB until its connection went idle (20 such
connections: 2 GiB). Such a fetch takes its bytes with ``acquire_up_to`` before it reads: as many
as are free up to what it may answer, after waiting in turn for ``least`` of them when fewer are
free, and reads no more than it got (a fetch may always answer less than it asked for). The bytes
go back once the answer is written to the socket (the connection holds them until then). The
first batch of a fetch is answered whole, so an answer may pass its grant by part of one batch:
``take`` counts that past the capacity, which later grants wait for.

Frame buffers: a frame of ``MMAP_THRESHOLD`` bytes or more lives in an anonymous mmap, whose
pages become resident only as the client's bytes arrive (a claimed size costs nothing until it
is sent) and go back to the kernel when the frame is unmapped, so big requests leave no heap
behind them; smaller ones are plain bytearrays.

Mappings of up to ``REUSE_MAX`` are made in sizes of powers of two and kept, ``REUSE_BYTES`` in
all, for the next frames of their size, until no such frame was asked for in a few seconds
(FrameCache.trim): a producer's stream of 1 MiB requests then writes into pages already resident
instead of faulting in 256 fresh ones a MiB (on a VM the faults, not the copy, were the frame's
cost: bench/results/design_figures.md, request frames). A mapping is kept only when no view of it
is alive, so a reused frame never changes bytes someone still reads; a frame is sliced to its
size, so the bytes of an earlier request past it are never read. What is resident stays under
twice the pool's count (a reused mapping may hold pages past a smaller frame; its power of two
is less than twice the frame) plus the ``REUSE_BYTES`` kept.
"""

from __future__ import annotations

import asyncio
import mmap
from collections import deque

MMAP_THRESHOLD = 256 * 1024
REUSE_MAX = 4 << 20  # frames up to this size are reused: a producer's batches (1 MiB at most by default)
REUSE_BYTES = 16 << 20  # mapped bytes kept for reuse, per listener: at most this much stays resident unused


class MemoryPool:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"pool capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.available = capacity
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def used(self) -> int:
        return self.capacity - self.available

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` bytes now if they are free and nobody waits before us."""
        self._check(size)
        if self._waiters or size > self.available:
            return False
        self.available -= size
        return True

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting in turn until they are free. Cancelling gives them back."""
        if self.try_acquire(size):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(size)  # granted and cancelled in the same step
            else:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
                self._grant()  # a waiter behind us may fit now
            raise

    def try_acquire_up_to(self, want: int, least: int) -> int:
        """Take as many bytes as are free, up to ``want``, if at least ``least`` are and nobody
        waits before us; how many (0: none taken)."""
        self._check(least)
        if least < 1 or want < least:
            raise ValueError(f"cannot take {least} to {want} bytes")
        if self._waiters or least > self.available:
            return 0
        got = min(want, self.available)
        self.available -= got
        return got

    async def acquire_up_to(self, want: int, least: int) -> int:
        """Take between ``least`` and ``want`` bytes: as many as are free, after waiting in turn for
        ``least`` when fewer are free; how many. Cancelling while waiting takes none."""
        got = self.try_acquire_up_to(want, least)
        if got:
            return got
        await self.acquire(least)
        more = 0 if self._waiters else max(0, min(want - least, self.available))
        self.available -= more
        return least + more

    def take(self, size: int) -> None:
        """Take ``size`` more bytes whether or not they are free (an answer past its grant by part
        of a batch); later grants wait until they are back."""
        if size < 0:
            raise ValueError(f"cannot take {size} bytes")
        self.available -= size

    def release(self, size: int) -> None:
        self.available += size
        if self.available > self.capacity:
            raise RuntimeError(f"memory pool released more than it lent ({self.available} > {self.capacity})")
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            size, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if size > self.available:
                return
            self._waiters.popleft()
            self.available -= size
            fut.set_result(None)

    def _check(self, size: int) -> None:
        if not 0 <= size <= self.capacity:
            raise ValueError(f"{size} bytes can never fit in a pool of {self.capacity}")


def _unmap(buf: mmap.mmap) -> None:
    """Unmap at once; a view still alive somewhere leaves it to the collector."""
    try:
        buf.close()
    except BufferError:
        pass


def _unexported(m: mmap.mmap) -> bool:
    """True when no buffer (memoryview, numpy array...) of ``m`` is alive: CPython refuses to resize
    a mapping with exports, and resizing to its own length changes nothing else."""
    try:
        m.resize(len(m))
    except (BufferError, OSError, SystemError, ValueError):  # exported; or no mremap here: not reused
        return False
    return True


class FrameCache:
    """Frames of one listener, their mappings reused (see the module docstring). Used from the
    listener's event loop only."""

    def __init__(self, keep_bytes: int = REUSE_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.kept_bytes = 0
        self._kept: dict[int, list[mmap.mmap]] = {}
        self.reused = 0
        self._taken_since_trim = False

    def frame(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes; give its buffer back with ``release``."""
        if size < MMAP_THRESHOLD:
            return memoryview(bytearray(size))
        mapped = 1 << (size - 1).bit_length()  # the power of two it is kept and found by
        if mapped > REUSE_MAX:
            return memoryview(mmap.mmap(-1, size))
        self._taken_since_trim = True
        kept = self._kept.get(mapped)
        if kept:
            m = kept.pop()
            self.kept_bytes -= mapped
            self.reused += 1
        else:
            m = mmap.mmap(-1, mapped)
        return memoryview(m)[:size]

    def release(self, view: memoryview) -> None:
        """Done with a frame from ``frame``: its view is released, its mapping kept or unmapped."""
        buf = view.obj
        view.release()
        if not isinstance(buf, mmap.mmap):
            return
        size = len(buf)
        # frame() maps every size up to REUSE_MAX as a power of two: those are the ones kept
        if size <= REUSE_MAX and self.kept_bytes + size <= self.keep_bytes and _unexported(buf):
            self._kept.setdefault(size, []).append(buf)
            self.kept_bytes += size
        else:
            _unmap(buf)

    def trim(self) -> None:
        """Unmap the kept frames when none was taken since the last call (the listener calls it every
        few seconds): a sidecar at rest keeps no frame memory resident."""
        if not self._taken_since_trim:
            self.clear()
        self._taken_since_trim = False

    def clear(self) -> None:
        """Unmap every kept frame."""
        for kept in self._kept.values():
            for m in kept:
                _unmap(m)
        self._kept.clear()
        self.kept_bytes = 0
