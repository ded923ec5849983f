"""Work done a few items ahead, on a helper thread and by the consumer while it would wait; the
results taken in order.

Why: a round's map is built window by window in two steps (map_kernel.py): parsing the
window's records and hashing their keys, then putting the hashes into the table in offset
order; the cleaning pass likewise decides a window's records, then writes them (filter.py). Only
the second step must follow the windows' order, so the first can run ahead, on another core: the
compiled kernels run without the GIL. ``Ahead`` does that, independent of what the work is.

``Ahead(fn, items, depth)`` calls ``fn`` on the items, started in order, and iterating over it
yields the results in order. A helper thread starts the next item whenever it is free; so does
the consumer when the result it wants is still being computed (rather than wait idle, it computes
a later one), or computes the one it wants when nobody has started it. At most ``depth`` items are
started and not yet yielded, which bounds the memory results hold.

The helper is a thread of a pool shared by every Ahead of the process (``_helpers``), not one
started per Ahead: starting a thread waits until it runs, which with Kafka's 1 MiB segments (one
Ahead per segment cleaned) was a large fixed cost of each (bench/results/kafka_cleaner.md).

``items`` is any iterable, drawn one item at a time (under the lock, by whichever thread starts
the item) only when an item may start: a generator can open what its items need (a segment's
mapping) as they come, so a run of small segments is one stream of items whose work overlaps
across segment boundaries. An exception raised while drawing an item is that item's error.

An exception of ``fn`` is raised where its item's result would have been yielded, and no item
after it is started once it is known: the consumer sees the error where it would have seen it
without the helper, and an item it never reaches is never raised (a round that stops early, when
its map is full, does not fail on a window it did not need). An interrupt (KeyboardInterrupt) of
the consumer while it computes a later item is raised at once. ``close`` (also leaving the ``with``
block) stops the helper starting items and waits for the one it is working on, so nothing the
items refer to (a mapped segment) is used after the block.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Generic, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")

class _HelperTask:
    """One Ahead's helper loop, queued for a helper thread: cancelled if it has not started."""

    def __init__(self, fn: Callable[[], None], free: Callable[[], None]) -> None:
        self._fn = fn
        self._free = free  # gives the task's thread back to the pool
        self._lock = threading.Lock()
        self._state = "pending"  # running, then done; or cancelled
        self._finished = threading.Event()

    def run(self) -> None:
        with self._lock:
            if self._state != "pending":
                return  # cancelled: its cancel gave the thread back
            self._state = "running"
        try:
            self._fn()
        finally:
            self._state = "done"
            # The thread is back in the pool before anyone waiting learns the task is done: a
            # consumer that closes its Ahead and opens the next one at once must find it idle,
            # not start another thread.
            self._free()
            self._finished.set()

    def cancel(self) -> bool:
        """True when it had not started (it never will)."""
        with self._lock:
            if self._state != "pending":
                return False
            self._state = "cancelled"
            # The thread that dequeues it will skip it and take the next task at once, so it
            # counts as idle from now (it does not count itself again).
            self._free()
            self._finished.set()
            return True

    def done(self) -> bool:
        return self._finished.is_set()

    def wait(self) -> None:
        self._finished.wait()


class _Helpers:
    """Daemon threads kept for the process, running Aheads' helper loops: a thread is started
    only when none is idle. Daemon threads, as a thread per Ahead was: an Ahead its consumer never
    closed (a daemon cleaner thread at exit) must not hold the process at exit. A busy pool only
    delays a helper: the consumer computes whatever nobody has started, so an Ahead never depends
    on getting one."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[_HelperTask] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0

    def submit(self, fn: Callable[[], None]) -> _HelperTask:
        task = _HelperTask(fn, self._free)
        with self._lock:
            start = self._idle == 0
            if start:
                self._threads += 1
            else:
                self._idle -= 1  # this task's: another submit starts a thread rather than count on it
        if start:
            threading.Thread(target=self._work, name=f"ahead-{self._threads}", daemon=True).start()
        self._tasks.put(task)
        return task

    def _free(self) -> None:
        with self._lock:
            self._idle += 1

    def _work(self) -> None:
        while True:
            self._tasks.get().run()


_helpers = _Helpers()


class Ahead(Generic[T, R]):
    """Results of ``fn`` over ``items``, computed ahead (see the module docstring)."""

    def __init__(self, fn: Callable[[T], R], items: Iterable[T], *, depth: int = 2, name: str = "ahead") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._fn = fn
        self._items = iter(items)
        self._depth = depth
        self._results: dict[int, tuple[R | None, BaseException | None]] = {}  # index -> (result, error)
        self._next = 0  # the next item to start
        self._taken = 0  # results yielded
        self._end = sys.maxsize  # no item from here is started: the end once drawn, or just after a failed one
        self._stopped = False
        self._cond = threading.Condition()
        self._name = name
        self._helper = _helpers.submit(self._run)

    def _start_next(self, limit: int) -> tuple[int, T] | None:
        """Under the lock: the next item to start now and its index, if it is before ``limit``.
        None when there is none to start yet, or when drawing it found the end or failed (the end
        or the item's error is then recorded: callers check again before waiting)."""
        i = self._next
        if i >= self._end or i >= limit:
            return None
        try:
            item = next(self._items)
        except StopIteration:
            self._end = i
            self._cond.notify_all()
            return None
        except BaseException as e:  # the items' own failure: raised at item i, as fn's would be
            self._results[i] = (None, e)
            self._next = self._end = i + 1
            self._cond.notify_all()
            return None
        self._next = i + 1
        return i, item

    def _compute(self, i: int, item: T, *, by_consumer: bool = False) -> None:
        result: R | None = None
        error: BaseException | None = None
        try:
            result = self._fn(item)
        except Exception as e:  # raised on the consumer's thread, at item i
            error = e
        except BaseException as e:
            if by_consumer:  # an interrupt of the consumer itself (Ctrl-C): now, not at item i
                with self._cond:
                    self._end = min(self._end, i)
                raise
            error = e
        with self._cond:
            self._results[i] = (result, error)
            if error is not None:
                self._end = min(self._end, i + 1)
            self._cond.notify_all()

    def _run(self) -> None:
        me = threading.current_thread()
        pool_name, me.name = me.name, self._name  # named for what it does while it helps (py-spy, logs)
        try:
            self._help()
        finally:
            me.name = pool_name

    def _help(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped or self._next >= self._end:
                        return
                    started = self._start_next(self._taken + self._depth)
                    if started is not None:
                        break
                    if self._next < self._end:  # nothing to start until a result is taken
                        self._cond.wait()
            self._compute(*started)

    def __iter__(self) -> Iterator[R]:
        while True:
            i = self._taken
            with self._cond:
                while i not in self._results:
                    if i >= self._end:
                        return  # every item yielded (or the failed one raised)
                    # the wanted item when nobody started it, or a later one while the helper
                    # computes the wanted one
                    started = self._start_next(i + self._depth)
                    if started is not None:
                        self._cond.release()
                        try:
                            self._compute(*started, by_consumer=True)
                        finally:
                            self._cond.acquire()
                    elif i not in self._results and i < self._end:
                        self._cond.wait()  # the helper computes item i
                result, error = self._results.pop(i)
                self._taken = i + 1
                self._cond.notify_all()
            if error is not None:
                raise error
            yield cast(R, result)

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if not self._helper.cancel():  # it started: wait for the item it is on, if any
            self._helper.wait()

    def __enter__(self) -> Ahead[T, R]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
