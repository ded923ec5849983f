"""The bytes of request frames held at once, over every connection (Kafka's queued.max.request.bytes).

A connection that has read a frame's 4-byte size asks the pool for that many bytes before it
reads (or allocates) the frame; when they are not free it stops reading its socket until they
are, so a client that sends faster than the node handles waits in TCP (backpressure), and a
flood of large frames cannot take more memory than the pool's capacity. The bytes go back once
the request has been handled.

Strict and first come, first served: a request is granted only when it fits in what is free, and
never ahead of an earlier waiter (a large frame is not starved by a stream of small ones). Kafka's
pool lets one allocation overshoot instead; here the config check (queued >= socket.request.max.bytes)
makes every valid frame fit in an empty pool, so waiting always ends.

Frame buffers: a frame of ``MMAP_THRESHOLD`` bytes or more lives in an anonymous mmap, whose
pages become resident only as the client's bytes arrive (a claimed size costs nothing until it
is sent) and go back to the kernel when the frame is closed, so big requests leave no heap
behind them; smaller ones are plain bytearrays.
"""

from __future__ import annotations

import asyncio
import mmap
from collections import deque

MMAP_THRESHOLD = 256 * 1024


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


def allocate_frame(size: int) -> bytearray | mmap.mmap:
    """A writable buffer of ``size`` bytes for one frame (see the module docstring)."""
    if size >= MMAP_THRESHOLD:
        return mmap.mmap(-1, size)
    return bytearray(size)


def free_frame(buf: bytearray | mmap.mmap | None) -> None:
    """Give an mmap'd frame back at once; a view still alive somewhere leaves it to the collector."""
    if isinstance(buf, mmap.mmap):
        try:
            buf.close()
        except BufferError:
            pass
