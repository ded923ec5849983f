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

An exception of ``fn`` is raised where its item's result would have been yielded, and no item
after it is started once it is known: the consumer sees the error where it would have seen it
without the helper, and an item it never reaches is never raised (a round that stops early, when
its map is full, does not fail on a window it did not need). An interrupt (KeyboardInterrupt) of
the consumer while it computes a later item is raised at once. ``close`` (also leaving the ``with``
block) stops the helper starting items and waits for the one it is working on, so nothing the
items refer to (a mapped segment) is used after the block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Generic, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")


class Ahead(Generic[T, R]):
    """Results of ``fn`` over ``items``, computed ahead (see the module docstring)."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], *, depth: int = 2, name: str = "ahead") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._fn = fn
        self._items = items
        self._depth = depth
        self._results: dict[int, tuple[R | None, BaseException | None]] = {}  # index -> (result, error)
        self._next = 0  # the next item to start
        self._taken = 0  # results yielded
        self._end = len(items)  # no item from here is started: the end, or just after a failed one
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _start_next(self, limit: int) -> int | None:
        """Under the lock: the index of the item to start now, if it is before ``limit``."""
        i = self._next
        if i >= self._end or i >= limit:
            return None
        self._next = i + 1
        return i

    def _compute(self, i: int, *, by_consumer: bool = False) -> None:
        result: R | None = None
        error: BaseException | None = None
        try:
            result = self._fn(self._items[i])
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
        while True:
            with self._cond:
                while True:
                    if self._stopped or self._next >= self._end:
                        return
                    i = self._start_next(self._taken + self._depth)
                    if i is not None:
                        break
                    self._cond.wait()
            self._compute(i)

    def __iter__(self) -> Iterator[R]:
        while True:
            i = self._taken
            with self._cond:
                while i not in self._results:
                    if i >= self._end:
                        return  # every item yielded (or the failed one raised)
                    # the wanted item when nobody started it, or a later one while the helper
                    # computes the wanted one
                    j = self._start_next(i + self._depth)
                    if j is not None:
                        self._cond.release()
                        try:
                            self._compute(j, by_consumer=True)
                        finally:
                            self._cond.acquire()
                    else:
                        self._cond.wait()
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
        self._thread.join()

    def __enter__(self) -> Ahead[T, R]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
