"""round_progress.py: a running round's phase and bytes, its line, and how often clean prints it."""

from __future__ import annotations

from logkeeper.cleaner.round_progress import LiveRound, RoundProgress, progress_of
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.log.names import TopicPartition
from logkeeper.progress_lines import MIB

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


def test_progress_of_a_round_is_its_seconds_and_line() -> None:
    p = RoundProgress(TP, "cleaning", 1, 2, 12_500)
    assert progress_of(p) == (12.5, p.line()) and progress_of(None) is None
