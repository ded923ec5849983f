"""A round's cleaning pass takes the records the offset map's build decompressed (cleaner/inflated.py)
instead of decompressing each compressed batch again; within a byte budget, with the same output."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.cleaner import cleaner as cleaner_module
from logkeeper.cleaner import segment_view
from logkeeper.cleaner.inflated import InflatedBatches, inflated_budget
from logkeeper.log.log import Log
from logkeeper.records.compression import Codec
from tests.cleaner_logs import Clock, append_kvs, ltc, make_cleaner, make_log, read_log

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.NONE]
BATCHES = 40


def _mixed_log(tmp_path: Path, clock: Clock) -> Log:
    """40 batches of 20 records over 100 keys, the codec changing every batch (one in five
    uncompressed), in several segments; rolled, so that all of it is cleanable."""
    log = make_log(tmp_path, clock, segment_bytes=4096, segment_index_bytes=4096)
    for i in range(BATCHES):
        append_kvs(log, [(b"k%03d" % ((i * 20 + j) % 100), b"value %d of batch %d" % (j, i)) for j in range(20)],
                   codec=CODECS[i % len(CODECS)])
    log.roll()
    return log


def _clean_counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None) -> tuple[int, list]:
    """Clean the mixed log in one round; (decompressions of its batches, the records after)."""
    calls = 0
    real = segment_view.decompress

    def counting(codec: Codec, data: memoryview, position: int = 0) -> bytes:
        nonlocal calls
        calls += 1
        return real(codec, data, position)

    monkeypatch.setattr(segment_view, "decompress", counting)
    if budget is not None:
        monkeypatch.setattr(cleaner_module, "inflated_budget", lambda _slots: budget)
    clock = Clock()
    log = _mixed_log(tmp_path, clock)
    try:
        make_cleaner(clock).clean(ltc(log, 0))
        return calls, [(r.offset, r.key, r.value) for r in read_log(log)]
    finally:
        log.close()


def test_a_round_decompresses_each_compressed_batch_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compressed = sum(1 for i in range(BATCHES) if CODECS[i % len(CODECS)] != Codec.NONE)
    once, kept = _clean_counting(tmp_path / "kept", monkeypatch, None)
    twice, again = _clean_counting(tmp_path / "none", monkeypatch, 0)  # nothing may be kept: as before
    assert (once, twice) == (compressed, 2 * compressed)
    assert kept == again  # the same records survive either way
    assert len({k for _, k, _ in kept}) == 100 == len(kept)


def test_the_budget_bounds_what_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # room for a few batches' records only: those are taken, the others decompressed again
    compressed = sum(1 for i in range(BATCHES) if CODECS[i % len(CODECS)] != Codec.NONE)
    calls, _ = _clean_counting(tmp_path, monkeypatch, 2000)
    assert compressed < calls < 2 * compressed


def test_kept_records_are_given_once_and_leave_the_budget() -> None:
    a, b = object(), object()  # two segments' FileRecords: a key is the object, not a name
    cache = InflatedBatches(100)
    cache.keep(a, 0, b"x" * 60)
    cache.keep(a, 80, b"y" * 60)  # over the budget: not kept
    assert cache.held_bytes == 60
    assert cache.take(b, 0) is None
    assert cache.take(a, 0) == b"x" * 60
    assert cache.take(a, 0) is None and cache.held_bytes == 0
    cache.keep(a, 80, b"y" * 60)  # room again
    assert cache.take(a, 80) == b"y" * 60
    assert (cache.kept, cache.taken) == (2, 2)


def test_the_budget_is_half_the_offset_maps_memory() -> None:
    # 128 MiB of dedupe buffer (Kafka's default, one thread) is 5,592,405 slots of 24 bytes
    slots = (128 << 20) // 24
    assert inflated_budget(slots) == slots * 24 // 2
