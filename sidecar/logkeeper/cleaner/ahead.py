"""Work done a few items ahead on a helper thread, its results taken in order.

Why: a round's map is built window by window in two steps (map_kernel.py): parsing the
window's records and hashing their keys, then putting the hashes into the table in offset
order. Only the puts must be in order, so while the cleaner's thread puts one window, a helper
parses and hashes the next; the compiled kernels run without the GIL, so the two steps use two
cores. ``Ahead`` is that helper, independent of what the work is.

``Ahead(fn, items, depth)`` calls ``fn`` on each item in order on its thread, at most ``depth``
results waiting, and iterating over it yields the results in order. An exception of ``fn`` is
raised where its item's result would have been yielded, and the helper then starts nothing more:
the consumer sees the error at the point it would have seen it without the helper, and results
it never reaches are never taken (a round that stops early, when its map is full, never raises
the error of a window it did not need). ``close`` (also leaving the ``with`` block) stops the
helper starting items and waits for the one it is working on, so nothing the items refer to (a
mapped segment) is used after the block.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Generic, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")


class Ahead(Generic[T, R]):
    """Results of ``fn`` over ``items``, computed ``depth`` items ahead (see the module docstring)."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], *, depth: int = 2, name: str = "ahead") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._fn = fn
        self._items = items
        self._depth = depth
        self._results: deque[tuple[R | None, BaseException | None]] = deque()  # (result, error)
        self._cond = threading.Condition()
        self._stopped = False
        self._finished = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._items:
                with self._cond:
                    while len(self._results) >= self._depth and not self._stopped:
                        self._cond.wait()
                    if self._stopped:
                        return
                result: R | None = None
                error: BaseException | None = None
                try:
                    result = self._fn(item)
                except BaseException as e:  # raised on the consumer's thread
                    error = e
                with self._cond:
                    self._results.append((result, error))
                    self._cond.notify_all()
                if error is not None:
                    return
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def __iter__(self) -> Iterator[R]:
        while True:
            with self._cond:
                while not self._results and not self._finished:
                    self._cond.wait()
                if not self._results:
                    return
                result, error = self._results.popleft()
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
