"""cleaner/ahead.py: work done ahead on a helper thread, results taken in order."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from logkeeper.cleaner import ahead as ahead_module
from logkeeper.cleaner.ahead import Ahead


def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_results_in_order() -> None:
    with Ahead(lambda x: x * x, list(range(50)), depth=3) as ahead:
        assert list(ahead) == [x * x for x in range(50)]


def test_the_helper_and_the_waiting_consumer_both_compute() -> None:
    """With slow items the consumer, instead of waiting for the helper's item, computes the next
    one: both threads do about half."""
    by_thread: dict[int, int] = {}

    def slow(x: int) -> int:
        time.sleep(0.01)
        by_thread[threading.get_ident()] = by_thread.get(threading.get_ident(), 0) + 1
        return x

    with Ahead(slow, list(range(40)), depth=2) as ahead:
        assert list(ahead) == list(range(40))
    assert len(by_thread) == 2 and threading.get_ident() in by_thread
    assert min(by_thread.values()) >= 10


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_at_most_depth_results_wait(depth: int) -> None:
    calls: list[int] = []

    def record(x: int) -> int:
        calls.append(x)
        return x

    with Ahead(record, list(range(20)), depth=depth) as ahead:
        results = iter(ahead)
        assert next(results) == 0
        wait_until(lambda: len(calls) == 1 + depth)
        time.sleep(0.05)  # nothing more starts while `depth` results wait
        assert calls == list(range(1 + depth))
        assert next(results) == 1
        wait_until(lambda: len(calls) == 2 + depth)


def test_an_error_is_raised_at_its_item_and_nothing_after_it_starts() -> None:
    calls: list[int] = []

    def fail_at_3(x: int) -> int:
        calls.append(x)
        if x == 3:
            raise ValueError("item 3")
        return x

    got: list[int] = []
    with Ahead(fail_at_3, list(range(1, 40)), depth=4) as ahead, pytest.raises(ValueError, match="item 3"):
        for x in ahead:
            got.append(x)
    assert got == [1, 2]
    assert max(calls) <= 3 + 3  # at most depth items were started when item 3 failed
    assert ahead._helper.done()


def test_an_error_never_reached_is_not_raised() -> None:
    def fail_after_0(x: int) -> int:
        if x > 0:
            raise ValueError("never taken")
        return x

    with Ahead(fail_after_0, [0, 1, 2]) as ahead:
        for x in ahead:
            assert x == 0
            wait_until(ahead._helper.done)  # item 1 failed on the helper
            break


def test_close_waits_for_the_running_item_and_starts_no_more() -> None:
    started = threading.Event()
    finished: list[int] = []
    calls: list[int] = []

    def slow_after_0(x: int) -> int:
        calls.append(x)
        if x == 1:
            started.set()
            time.sleep(0.2)
            finished.append(x)
        return x

    ahead = Ahead(slow_after_0, list(range(10)), depth=1)
    assert next(iter(ahead)) == 0
    assert started.wait(5)
    ahead.close()
    assert finished == [1]
    assert calls == [0, 1]
    assert ahead._helper.done()


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        Ahead(lambda x: x, [1], depth=0)


def test_an_interrupt_of_the_consumer_while_it_helps_is_raised_at_once() -> None:
    """Ctrl-C arrives on the main thread: when it comes while the consumer computes a later item
    (instead of waiting), it is raised there, not stored until that item's turn."""
    consumer = threading.get_ident()
    interrupted: list[int] = []

    def work(x: int) -> int:
        if threading.get_ident() == consumer and x > 0:
            interrupted.append(x)
            raise KeyboardInterrupt
        time.sleep(0.05)
        return x

    got: list[int] = []
    with Ahead(work, list(range(10)), depth=2) as ahead, pytest.raises(KeyboardInterrupt):
        for x in ahead:
            got.append(x)
    # raised where it happened: at the wanted item, or at a later one while the helper computed
    # the wanted one (which is then never yielded)
    assert interrupted and got == list(range(len(got))) and len(got) in (interrupted[0] - 1, interrupted[0])
    assert ahead._helper.done()


def test_items_are_drawn_only_when_they_may_start() -> None:
    """A generator of items runs no further ahead than ``depth`` items past the one taken (it
    may open what each item needs: a segment's mapping)."""
    drawn: list[int] = []

    def items():  # type: ignore[no-untyped-def]
        for x in range(100):
            drawn.append(x)
            yield x

    with Ahead(lambda x: x, items(), depth=2) as ahead:
        results = iter(ahead)
        assert next(results) == 0
        wait_until(lambda: len(drawn) == 3)
        time.sleep(0.05)
        assert drawn == [0, 1, 2]
        assert list(results) == list(range(1, 100))


def test_an_error_drawing_an_item_is_raised_in_its_place() -> None:
    def items():  # type: ignore[no-untyped-def]
        yield from (1, 2, 3)
        raise OSError("cannot open item 4")

    got: list[int] = []
    with Ahead(lambda x: x * 10, items(), depth=3) as ahead, pytest.raises(OSError, match="item 4"):
        for x in ahead:
            got.append(x)
    assert got == [10, 20, 30]


def test_an_empty_stream_yields_nothing() -> None:
    with Ahead(lambda x: x, iter(())) as ahead:
        assert list(ahead) == []


def test_helpers_are_pool_threads_reused_by_every_ahead() -> None:
    """No thread is started per Ahead (a thread start waits until it runs: with 1 MiB segments,
    one per segment cleaned was a large fixed cost); the helpers are daemon threads."""
    helpers: set[int] = set()
    consumer = threading.get_ident()

    def note(x: int) -> int:
        if threading.get_ident() != consumer:
            helpers.add(threading.get_ident())
            # daemon, as a thread per Ahead was: one its consumer never closed holds no exit
            assert threading.current_thread().daemon
        time.sleep(0.001)
        return x

    threads_before = ahead_module._helpers._threads
    for _ in range(30):
        with Ahead(note, range(4)) as ahead:
            assert list(ahead) == [0, 1, 2, 3]
        # its thread is back in the pool once the Ahead is closed, so the next Ahead needs no new
        # one (it was counted idle only after the closing consumer went on: under load the next
        # Ahead then started a thread)
        assert ahead_module._helpers._idle >= 1
    assert helpers
    # the pool may hold threads earlier tests started (Aheads running at once, or one never
    # closed still holding its thread); these 30, one after the other, start at most one
    assert ahead_module._helpers._threads <= threads_before + 1


def test_a_closed_aheads_thread_is_idle_before_close_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the pool counted a thread idle after the task's waiters were released, so the
    next Ahead, opened at once, could find none idle and start another thread (a CI run saw three
    helpers for thirty Aheads one after the other). The pool's lock is made slow for its own
    threads, which widens that window to 50 ms."""
    real = ahead_module._helpers._lock
    consumer = threading.get_ident()

    class SlowForHelpers:
        def __enter__(self) -> None:
            if threading.get_ident() != consumer:
                time.sleep(0.05)
            real.acquire()

        def __exit__(self, *exc: object) -> None:
            real.release()

    monkeypatch.setattr(ahead_module._helpers, "_lock", SlowForHelpers())
    for _ in range(3):
        with Ahead(lambda x: x, range(4)) as ahead:
            assert list(ahead) == [0, 1, 2, 3]
        assert ahead_module._helpers._idle >= 1


def test_an_ahead_never_closed_does_not_hold_the_process_at_exit() -> None:
    """A consumer that never closes its Ahead (a daemon cleaner thread when the process exits)
    leaves a helper waiting for it: the process still exits (it hung with the helpers of a
    ThreadPoolExecutor, whose threads the interpreter joins at exit)."""
    code = ("from logkeeper.cleaner.ahead import Ahead\n"
            "it = iter(Ahead(lambda x: x, range(100), depth=2))\n"
            "assert next(it) == 0\n"
            "import time; time.sleep(0.1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
