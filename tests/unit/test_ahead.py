"""cleaner/ahead.py: work done ahead on a helper thread, results taken in order."""

from __future__ import annotations

import threading
import time

import pytest

from logkeeper.cleaner.ahead import Ahead


def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_results_in_order_computed_on_the_helper() -> None:
    threads: set[int] = set()

    def square(x: int) -> int:
        threads.add(threading.get_ident())
        return x * x

    with Ahead(square, list(range(50)), depth=3) as ahead:
        assert list(ahead) == [x * x for x in range(50)]
    assert threads == {ahead._thread.ident}
    assert threading.get_ident() not in threads


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
    with Ahead(fail_at_3, [1, 2, 3, 4, 5], depth=4) as ahead, pytest.raises(ValueError, match="item 3"):
        for x in ahead:
            got.append(x)
    assert got == [1, 2]
    assert calls == [1, 2, 3]


def test_an_error_never_reached_is_not_raised() -> None:
    def fail_after_0(x: int) -> int:
        if x > 0:
            raise ValueError("never taken")
        return x

    with Ahead(fail_after_0, [0, 1, 2]) as ahead:
        for x in ahead:
            assert x == 0
            wait_until(lambda: ahead._finished)
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
    assert not ahead._thread.is_alive()


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        Ahead(lambda x: x, [1], depth=0)
