"""progress_lines.py: long work's lines on stderr, none for short work, at most one every interval."""

from __future__ import annotations

import io

from logkeeper.progress_lines import ProgressLines


def test_lines_wait_for_long_work_then_come_every_interval() -> None:
    clock = [0.0]
    asked = []
    err = io.StringIO()
    lines = ProgressLines(err, every_s=10, clock_s=lambda: clock[0])

    def progress() -> tuple[float, str] | None:
        asked.append(clock[0])
        return clock[0], f"{clock[0]:.0f} s in"

    lines.tick(lambda: None)  # no work in progress
    for t in (0, 4, 9.9):  # the work has not run 10 s yet
        clock[0] = t
        lines.tick(progress)
    assert err.getvalue() == ""
    for t in (10, 15, 20, 29):  # 15 and 29: less than 10 s after the last line
        clock[0] = t
        lines.tick(progress)
    assert err.getvalue().splitlines() == ["10 s in", "20 s in"]
    assert asked == [0, 4, 9.9, 10, 20]  # the line is only asked for when one may be due
