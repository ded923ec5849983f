"""Compressing and decompressing many batches at once on a pool of threads (issue 23).

The codec libraries (zlib-ng, cramjam, lz4) release the GIL while they work, so the
batches of a cleaning window are (de)compressed on every core: a mixed-codec log's cleaning is
bound by its codecs (bench/results/codec_ceiling.md). ``codec_map(fn, items)`` is
``[fn(x) for x in items]`` with the same order of results and the same first error (the earliest
item's, as the loop would raise); a few items, or a one-core machine, stay on the caller's thread.
The pool is made on first use and kept for the process (the interpreter joins its threads at
exit: each task is a bounded run of codec calls, which never waits on anything else).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MIN_ITEMS = 4  # fewer are not worth handing over
POOL_THREADS = min(os.cpu_count() or 1, 8)
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def codec_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    n = len(items)
    if n < MIN_ITEMS or POOL_THREADS < 2:
        return [fn(x) for x in items]
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="codec")
        pool = _pool
    # One run of consecutive items per thread, the first on the caller's: a task per item (what
    # ThreadPoolExecutor.map does; it ignores chunksize) cost a submit and a wake-up per batch,
    # which with 250-record batches was a visible part of a mixed-codec round.
    parts = min(POOL_THREADS, n)
    bounds = [n * k // parts for k in range(parts + 1)]

    def run(k: int) -> list[R]:
        return [fn(x) for x in items[bounds[k]:bounds[k + 1]]]

    others = [pool.submit(run, k) for k in range(1, parts)]
    try:
        out = run(0)
        for future in others:  # in order: the first error raised is the earliest item's
            out.extend(future.result())
    except BaseException:
        for future in others:
            future.cancel()
        wait(others)  # the items point into the caller's buffers (a mapped segment): none is used after
        raise
    return out
