"""records/codec_pool.py: the same results in the same order as a loop, the earliest item's
error raised, and batches of every codec cleaned alike through it."""

from __future__ import annotations

import pytest

from logkeeper.records import codec_pool
from logkeeper.records.codec_pool import codec_map
from logkeeper.records.compression import Codec, compress, decompress


def test_results_in_order_and_the_first_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_pool, "_THREADS", 2)
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
    monkeypatch.setattr(codec_pool, "_THREADS", 2)
    payloads = [bytes([i % 251]) * (1000 + i) for i in range(64)]
    packed = codec_map(lambda p: compress(codec, p), payloads)
    assert codec_map(lambda c: decompress(codec, c), packed) == payloads
