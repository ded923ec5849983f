"""Scheduler: periodic and one-shot tasks in virtual time (tick) and in a real thread."""

from __future__ import annotations

import threading

import pytest

from logkeeper.log.scheduler import ManualClock, Scheduler


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000)


def test_periodic_task_runs_at_delay_then_every_period(clock: ManualClock) -> None:
    s = Scheduler(clock)
    runs: list[int] = []
    s.schedule("t", lambda: runs.append(clock()), delay_ms=100, period_ms=50)
    assert s.tick() == 0
    clock.advance(99)
    assert s.tick() == 0
    clock.advance(1)
    assert s.tick() == 1
    assert runs == [1_100]
    clock.advance(50)
    s.tick()
    assert runs == [1_100, 1_150]
    assert s.due_ms("t") == 1_200


def test_missed_periods_are_skipped_not_replayed(clock: ManualClock) -> None:
    s = Scheduler(clock)
    runs: list[int] = []
    s.schedule("t", lambda: runs.append(clock()), delay_ms=0, period_ms=10)
    clock.advance(1_000)
    assert s.tick() == 1
    assert s.due_ms("t") == 2_010  # phase kept: the next multiple of the period after now
    assert len(runs) == 1


def test_once_task_runs_once_and_can_reschedule_itself(clock: ManualClock) -> None:
    s = Scheduler(clock)
    runs: list[int] = []

    def again() -> None:
        runs.append(clock())
        if len(runs) < 3:
            s.schedule_once("once", again, 0)  # due now: runs in the same tick

    s.schedule_once("once", again, 5)
    clock.advance(5)
    assert s.tick() == 3
    assert not s.is_scheduled("once")


def test_due_tasks_run_earliest_first_then_in_scheduling_order(clock: ManualClock) -> None:
    s = Scheduler(clock)
    order: list[str] = []
    s.schedule_once("b", lambda: order.append("b"), 10)
    s.schedule_once("a", lambda: order.append("a"), 20)
    s.schedule_once("c", lambda: order.append("c"), 10)
    clock.advance(30)
    s.tick()
    assert order == ["b", "c", "a"]


def test_failing_task_is_counted_and_stays_scheduled(clock: ManualClock) -> None:
    s = Scheduler(clock)

    def boom() -> None:
        raise RuntimeError("boom")

    s.schedule("bad", boom, period_ms=10)
    s.tick()
    assert s.errors == 1
    assert s.is_scheduled("bad")


def test_cancel_and_replace(clock: ManualClock) -> None:
    s = Scheduler(clock)
    runs: list[str] = []
    s.schedule("t", lambda: runs.append("first"), period_ms=10)
    s.schedule("t", lambda: runs.append("second"), period_ms=10)
    s.tick()
    s.cancel("t")
    clock.advance(100)
    s.tick()
    assert runs == ["second"]
    assert s.task_names() == []


def test_zero_or_negative_period_means_once(clock: ManualClock) -> None:
    s = Scheduler(clock)
    s.schedule("t", lambda: None, period_ms=0)
    s.tick()
    assert not s.is_scheduled("t")


def test_manual_clock_never_goes_back() -> None:
    with pytest.raises(ValueError):
        ManualClock(5).advance(-1)


def test_thread_runner_runs_tasks_and_shutdown_stops_it() -> None:
    s = Scheduler()
    ran = threading.Event()
    s.schedule("t", ran.set, delay_ms=10, period_ms=10)
    s.start()
    try:
        assert ran.wait(5)
    finally:
        s.shutdown()
    assert not s.is_started
    assert s.task_names() == []


def test_thread_runner_wakes_up_for_a_new_earlier_task() -> None:
    s = Scheduler()
    s.schedule("late", lambda: None, delay_ms=60_000)
    s.start()
    try:
        ran = threading.Event()
        s.schedule_once("soon", ran.set, 0)
        assert ran.wait(5)  # woken for it, not left sleeping until the late task's 60 s
    finally:
        s.shutdown()


def test_cancel_waits_for_a_running_task() -> None:
    s = Scheduler()
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        entered.set()
        release.wait(5)
        finished.set()

    s.schedule_once("slow", slow, 0)
    s.start()
    try:
        assert entered.wait(5)
        threading.Timer(0.1, release.set).start()
        s.cancel("slow")
        assert finished.is_set()
    finally:
        s.shutdown()
