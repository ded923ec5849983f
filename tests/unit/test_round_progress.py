"""round_progress.py: a running round's phase and bytes, its line, and how often clean prints it."""

from __future__ import annotations

import io

from logkeeper.cleaner.round_progress import MIB, LiveRound, ProgressLines, RoundProgress
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.log.names import TopicPartition

TP = TopicPartition("orders", 0)


def test_the_line_names_the_partition_phase_bytes_and_time() -> None:
    p = RoundProgress(TP, "indexing", 512 * MIB, 1_126 * MIB, 12_400)
    assert p.percent == 45
    assert p.line() == "orders-0: indexing 512.0 of 1,126.0 MB (45%), 12 s into the round"
    assert RoundProgress(TP, "cleaning", 10, 0, 0).percent == 0  # total not known yet
    assert RoundProgress(TP, "cleaning", 11, 10, 0).percent == 100  # a snapshot lagging its total


def test_a_live_round_indexes_then_cleans() -> None:
    now = [1_000]
    stats = CleanerStats(lambda: now[0])
    live = LiveRound(TP, stats, dirty_bytes=4_000)
    stats.index_bytes_read(1_000)
    now[0] = 1_500
    assert live.snapshot() == RoundProgress(TP, "indexing", 1_000, 4_000, 500)
    stats.index_done()
    live.rewrite_bytes = 9_000
    stats.read_messages(3, 3_000)
    now[0] = 2_000
    assert live.snapshot() == RoundProgress(TP, "cleaning", 3_000, 9_000, 1_000)


def test_progress_lines_wait_for_a_long_round_then_come_every_interval() -> None:
    clock = [0.0]
    elapsed = [0]
    err = io.StringIO()
    lines = ProgressLines(err, every_s=10, clock_s=lambda: clock[0])
    lines.tick()  # no round to watch yet
    lines.watch(lambda: RoundProgress(TP, "indexing", 1, 2, elapsed[0]))
    for t in (0, 4, 9.9):  # the round has not run 10 s yet
        clock[0], elapsed[0] = t, int(t * 1000)
        lines.tick()
    assert err.getvalue() == ""
    clock[0], elapsed[0] = 10, 10_000
    lines.tick()
    clock[0], elapsed[0] = 15, 15_000
    lines.tick()  # 5 s after the last line: none
    clock[0], elapsed[0] = 20, 20_000
    lines.tick()
    assert err.getvalue().splitlines() == ["orders-0: indexing 0.0 of 0.0 MB (50%), 10 s into the round",
                                           "orders-0: indexing 0.0 of 0.0 MB (50%), 20 s into the round"]
    lines.watch(lambda: None)  # between rounds
    clock[0] = 40
    lines.tick()
    assert len(err.getvalue().splitlines()) == 2
