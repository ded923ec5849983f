"""Progress of long work as lines on stderr, for the commands that can run for minutes
(``logkeeper clean``'s rounds, ``logkeeper verify``): the first line once the work has run
``every_s`` seconds, then at most one every ``every_s``; short work prints none.

The work calls ``tick`` as it goes (at each abort check of a cleaning round, after each segment
verified), so no thread of its own is needed; ``tick`` asks for the line only when one is due, and
then only writes it when the work has run long enough by its own count of elapsed seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

EVERY_S = 10.0  # the commands' interval: a line every 10 s of work that runs longer
MIB = 1024 * 1024  # the lines' MB are Kafka's (MiB), as in the cleaner's stats line
# (seconds the work has run, its line), or None when there is no work in progress now
Progress = Callable[[], "tuple[float, str] | None"]


class ProgressLines:
    def __init__(self, err: TextIO, every_s: float, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._err = err
        self._every_s = every_s
        self._clock_s = clock_s
        self._last_s = -float("inf")

    def tick(self, progress: Progress) -> None:
        now = self._clock_s()
        if now - self._last_s < self._every_s:
            return
        current = progress()
        if current is None or current[0] < self._every_s:
            return
        self._last_s = now
        self._err.write(current[1] + "\n")
        self._err.flush()
