"""A scheduler of named periodic and one-shot tasks, driven by a clock that is passed in.

Two ways to run it:

- ``tick(now_ms)`` runs every task due at ``now_ms`` in the caller's thread: tests advance a
  ``ManualClock`` and tick, so hours of background work run in virtual time.
- ``start()`` runs a daemon thread that sleeps until the next task is due (at most
  ``MAX_WAIT_S`` at a time, so clock changes are noticed) and ticks; ``shutdown()`` stops it.

Rules: a task is due when ``due_ms <= now``; due tasks run one at a time, earliest first (ties in
the order they were scheduled); a periodic task's next due time is its previous one plus the
period, skipping periods that have already passed (a late or long run is not followed by a burst of
catch-up runs); ``period_ms`` None or <= 0 means once. A task may schedule or cancel tasks,
itself included. An exception in a task is logged and counted, and the task stays scheduled.
Scheduling a name again replaces the earlier task of that name.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Clock = Callable[[], int]
Task = Callable[[], object]  # the result is ignored

MAX_WAIT_S = 1.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ManualClock:
    """A clock that only moves when told to (virtual time for tests and benchmarks)."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"cannot move a clock back by {ms} ms")
        with self._lock:
            self._now += ms
            return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = now_ms


@dataclass
class _Entry:
    name: str
    fn: Task
    due_ms: int
    period_ms: int | None
    seq: int


class Scheduler:
    def __init__(self, clock_ms: Clock = wall_clock_ms, *, thread_name: str = "logkeeper-scheduler") -> None:
        self._clock = clock_ms
        self._thread_name = thread_name
        self._tasks: dict[str, _Entry] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._running = threading.RLock()  # held while a task runs; cancel() waits on it
        self._thread: threading.Thread | None = None
        self._stop = False
        self.errors = 0
        self.runs = 0

    # ------------------------------------------------------------------ tasks
    def schedule(self, name: str, fn: Task, *, delay_ms: int = 0, period_ms: int | None = None) -> None:
        with self._cond:
            self._tasks[name] = _Entry(name, fn, self._clock() + max(0, delay_ms),
                                       period_ms if period_ms is not None and period_ms > 0 else None,
                                       next(self._seq))
            self._cond.notify_all()

    def schedule_once(self, name: str, fn: Task, delay_ms: int = 0) -> None:
        self.schedule(name, fn, delay_ms=delay_ms)

    def cancel(self, names: str | Iterable[str], *, wait: bool = True) -> None:
        """Remove tasks; with ``wait``, also wait for a task running in another thread to end."""
        wanted = {names} if isinstance(names, str) else set(names)
        with self._cond:
            for name in wanted:
                self._tasks.pop(name, None)
            self._cond.notify_all()
        if wait:
            with self._running:  # re-entrant: a task cancelling tasks does not wait on itself
                pass

    def is_scheduled(self, name: str) -> bool:
        with self._cond:
            return name in self._tasks

    def due_ms(self, name: str) -> int | None:
        with self._cond:
            entry = self._tasks.get(name)
            return entry.due_ms if entry is not None else None

    def task_names(self) -> list[str]:
        with self._cond:
            return sorted(self._tasks)

    # ------------------------------------------------------------------ running
    def _pop_due(self, now_ms: int) -> _Entry | None:
        with self._cond:
            due = [e for e in self._tasks.values() if e.due_ms <= now_ms]
            if not due:
                return None
            entry = min(due, key=lambda e: (e.due_ms, e.seq))
            if entry.period_ms is None:
                del self._tasks[entry.name]
            else:
                missed = (now_ms - entry.due_ms) // entry.period_ms + 1
                self._tasks[entry.name] = _Entry(entry.name, entry.fn, entry.due_ms + missed * entry.period_ms,
                                                 entry.period_ms, entry.seq)
            return entry

    def tick(self, now_ms: int | None = None) -> int:
        """Run every task due at ``now_ms`` (default: the clock); return how many ran."""
        now = self._clock() if now_ms is None else now_ms
        ran = 0
        while True:
            with self._running:
                entry = self._pop_due(now)
                if entry is None:
                    return ran
                try:
                    entry.fn()
                except Exception:
                    self.errors += 1
                    log.exception("scheduled task %s failed", entry.name)
                ran += 1
                self.runs += 1

    def start(self) -> None:
        """Run due tasks in a daemon thread until ``shutdown``."""
        with self._cond:
            if self._thread is not None:
                return
            self._stop = False
            self._thread = threading.Thread(target=self._loop, name=self._thread_name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                due = min((e.due_ms for e in self._tasks.values()), default=None)
                now = self._clock()
                if due is None or due > now:
                    wait_s = MAX_WAIT_S if due is None else min(MAX_WAIT_S, (due - now) / 1000)
                    self._cond.wait(wait_s)
                    continue
            self.tick(now)

    def shutdown(self) -> None:
        """Stop the thread (after the task it runs, if any) and drop every task."""
        with self._cond:
            self._stop = True
            thread, self._thread = self._thread, None
            self._tasks.clear()
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def is_started(self) -> bool:
        return self._thread is not None
