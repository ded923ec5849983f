"""records/codec_pool.py: the same results in the same order as a loop, the earliest item's
error raised, and batches of every codec cleaned alike through it."""

from __future__ import annotations

import threading
import time

import pytest

from logkeeper.records import codec_pool
from logkeeper.records.codec_pool import codec_map
from logkeeper.records.compression import Codec, compress, decompress


def test_results_in_order_and_the_first_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_pool, "POOL_THREADS", 2)
    items = list(range(100))
    assert codec_map(lambda x: x * 2, items) == [x * 2 for x in items]

    def fail_at(x: int) -> int:
        if x in (37, 80):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 37"):
        codec_map(fail_at, items)
    assert codec_map(lambda x: x, [1, 2]) == [1, 2]  # few items: the caller's thread


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_round_trips_through_the_pool(codec: Codec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_pool, "POOL_THREADS", 2)
    payloads = [bytes([i % 251]) * (1000 + i) for i in range(64)]
    packed = codec_map(lambda p: compress(codec, p), payloads)
    assert codec_map(lambda c: decompress(codec, c), packed) == payloads


def test_one_run_of_items_per_thread_the_first_on_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a task per item (a submit and a wake-up per batch): one run of consecutive items per
    thread, the caller computing the first."""
    monkeypatch.setattr(codec_pool, "POOL_THREADS", 3)
    by_thread: dict[int, list[int]] = {}

    def note(x: int) -> int:
        by_thread.setdefault(threading.get_ident(), []).append(x)
        return x

    assert codec_map(note, list(range(90))) == list(range(90))
    assert by_thread.pop(threading.get_ident()) == list(range(30))
    runs = sorted(tuple(got[i:i + 30]) for got in by_thread.values() for i in range(0, len(got), 30))
    assert runs == [tuple(range(30, 60)), tuple(range(60, 90))]  # whole runs, on pool threads


def test_an_error_returns_only_once_no_item_is_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The items point into the caller's buffers (a mapped segment it closes on the error)."""
    monkeypatch.setattr(codec_pool, "POOL_THREADS", 2)
    running: list[int] = []

    def slow_after_fail(x: int) -> int:
        if x == 0:
            raise ValueError("item 0")
        running.append(x)
        time.sleep(0.002)
        running.remove(x)
        return x

    with pytest.raises(ValueError, match="item 0"):
        codec_map(slow_after_fail, list(range(40)))
    assert running == []
