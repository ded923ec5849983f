"""LogSegment, mirroring the scenarios of Kafka's LogSegmentTest."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from logkeeper.errors import LogSegmentOffsetOverflowError
from logkeeper.index.txn_index import AbortedTxn
from logkeeper.log import names
from logkeeper.log.file_records import WouldBlock
from logkeeper.log.segment import AppendedBatch, LogSegment
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from tests.helpers import NOW_MS, ManualClock


def seg_at(tmp_path: Path, base: int = 40, interval: int = 10, max_index_size: int = 1000,
           **kw: object) -> LogSegment:
    return LogSegment(tmp_path, base, index_interval_bytes=interval, max_index_size=max_index_size, **kw)  # type: ignore[arg-type]


def append(seg: LogSegment, offset: int, *values: bytes, ts: int = NOW_MS) -> bytes:
    data = build_batch([Record(offset + i, ts + i, None, v) for i, v in enumerate(values)])
    h = BatchHeader.parse(data)
    seg.append([AppendedBatch(h.last_offset, h.max_timestamp, h.size)], data)
    return data


def values(data: bytes) -> list[bytes | None]:
    return [r.value for r in read_records(data)]


def test_append_offset_overflow_raises(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, base=0)
    with pytest.raises(LogSegmentOffsetOverflowError):
        append(seg, (1 << 31), b"x")
    seg.close()


def test_read_on_empty_segment_returns_none(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    assert seg.read(40, 300) is None
    seg.close()


def test_read_before_first_offset_returns_first_batch(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    append(seg, 50, b"hello", b"there", b"little", b"bee")
    fetched = seg.read(41, 300)
    assert fetched is not None
    assert values(fetched.records) == [b"hello", b"there", b"little", b"bee"]
    assert fetched.first_offset == 50
    seg.close()


def test_read_after_last_returns_none(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    append(seg, 50, b"hello", b"there")
    assert seg.read(52, 200) is None
    seg.close()


def test_read_from_gap_returns_next_batch(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    append(seg, 50, b"hello", b"there")
    second = append(seg, 60, b"alpha", b"beta")
    fetched = seg.read(55, 200)
    assert fetched is not None and fetched.records == second
    seg.close()


def test_read_is_batch_aligned_and_respects_max_bytes(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    first = append(seg, 40, b"a" * 50)
    append(seg, 41, b"b" * 50)
    one = seg.read(40, len(first) + 10)
    assert one is not None and one.records == first
    # min_one_batch: a limit smaller than the first batch still returns it whole
    small = seg.read(40, 1)
    assert small is not None and small.records == first
    none = seg.read(40, 1, min_one_batch=False)
    assert none is not None and none.records == b""
    capped = seg.read(40, 10_000, max_position=len(first))
    assert capped is not None and capped.records == first
    seg.close()


def test_truncate_to(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    offset = 40
    for i in range(30):
        append(seg, offset, b"hello", b"there")
        seg.truncate_to(offset + 1)  # removes the batch holding offset + 1: the whole batch
        assert seg.read_next_offset() == offset, i
        append(seg, offset, b"hello", b"there")
        offset += 2
    assert seg.read_next_offset() == offset
    seg.close()


def test_truncate_empty_segment_resets_indexes(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    seg.offset_index.trim_to_valid_size()
    assert seg.truncate_to(0) == 0
    assert seg.offset_index.max_entries == 1000 // 8  # resized back for appends
    seg.close()


def test_truncate_full_then_largest_timestamp_reloads(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    append(seg, 40, b"hello", b"there", ts=NOW_MS)
    append(seg, 42, b"x", ts=NOW_MS + 100)
    assert seg.max_timestamp_so_far == NOW_MS + 100
    seg.truncate_to(42)
    assert seg.max_timestamp_so_far == NOW_MS + 1
    assert seg.read_next_offset() == 42
    seg.truncate_to(0)
    assert seg.size_in_bytes == 0
    assert seg.read(0, 1024) is None
    seg.close()


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, interval=1)
    for i in range(10):
        append(seg, 40 + i * 2, b"a", b"b", ts=NOW_MS + i * 10)
    found = seg.find_offset_by_timestamp(NOW_MS + 35, 40)
    assert found is not None
    assert found == (NOW_MS + 41, 48)  # the batch whose max timestamp first reaches the target
    assert seg.find_offset_by_timestamp(NOW_MS + 10_000, 40) is None
    seg.close()


def test_next_offset_calculation(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    assert seg.read_next_offset() == 40
    append(seg, 50, b"hello", b"there", b"you")
    assert seg.read_next_offset() == 53
    seg.close()


def test_change_file_suffixes(tmp_path: Path) -> None:
    seg = seg_at(tmp_path)
    append(seg, 40, b"x")
    seg.change_file_suffixes("", names.DELETED_SUFFIX)
    assert seg.log.path.name == "00000000000000000040.log.deleted"
    assert seg.offset_index.path.name == "00000000000000000040.index.deleted"
    assert seg.time_index.path.name == "00000000000000000040.timeindex.deleted"
    assert seg.log.path.exists() and seg.offset_index.path.exists()
    seg.close()


def test_txn_index_without_a_file_renames_flushes_and_dates_as_the_others(tmp_path: Path) -> None:
    """No transaction was aborted: the segment has no .txnindex, and renaming, flushing and
    dating it must not make one; once an entry exists, it follows the segment's renames."""
    seg = seg_at(tmp_path)
    append(seg, 40, b"x")
    seg.set_last_modified_ms(NOW_MS)
    seg.flush()
    seg.change_file_suffixes("", names.DELETED_SUFFIX)
    assert not seg.txn_index.path.exists()
    assert seg.txn_index.path.name == "00000000000000000040.txnindex.deleted"
    seg.change_file_suffixes(names.DELETED_SUFFIX, "")
    seg.txn_index.append(AbortedTxn(7, 40, 41, 42))
    seg.flush()
    seg.change_file_suffixes("", names.SWAP_SUFFIX)
    assert seg.txn_index.path.name == "00000000000000000040.txnindex.swap" and seg.txn_index.path.exists()
    assert int(seg.log.path.stat().st_mtime * 1000) == NOW_MS
    seg.close()


def test_index_entry_every_interval_pairs_last_offset_with_batch_start(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, base=0, interval=200)
    positions = []
    for i in range(10):
        positions.append(seg.size_in_bytes)
        append(seg, i * 3, b"x" * 60, b"y" * 60, b"z" * 60)
    entries = [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)]
    assert entries, "index entries expected"
    for e in entries:
        i = positions.index(e.position)
        assert e.offset == i * 3 + 2  # the LAST offset of the batch starting there
    seg.close()


@pytest.mark.parametrize("corrupt", ["offset", "time"])
def test_recovery_fixes_corrupt_index(tmp_path: Path, corrupt: str) -> None:
    seg = seg_at(tmp_path, base=0, interval=1, max_index_size=4096)
    for i in range(100):
        append(seg, i, str(i).encode(), ts=NOW_MS + i)
    before = ([seg.offset_index.entry(n) for n in range(seg.offset_index.entries)],
              [seg.time_index.entry(n) for n in range(seg.time_index.entries)])
    idx = seg.offset_index if corrupt == "offset" else seg.time_index
    with open(idx.path, "r+b") as f:
        f.write(b"\x7f" * 64)
    seg.recover()
    after = ([seg.offset_index.entry(n) for n in range(seg.offset_index.entries)],
             [seg.time_index.entry(n) for n in range(seg.time_index.entries)])
    assert after[0] == before[0]
    assert after[1][: len(before[1])] == before[1]
    for i in range(100):
        got = seg.read(i, 1024)
        assert got is not None and read_records(got.records)[0].offset == i
    seg.close()


def test_recovery_with_corrupt_tail_cuts_it(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, base=0)
    sizes = []
    for i in range(20):
        sizes.append(len(append(seg, i, b"payload-%d" % i)))
    valid = sum(sizes[:12])
    with open(seg.log.path, "r+b") as f:
        f.seek(valid + 30)
        f.write(b"\xff\xee")
    result = seg.recover()
    assert result.valid_bytes == valid
    assert result.truncated_bytes == sum(sizes[12:])
    assert "CRC" in result.reason
    assert seg.read_next_offset() == 12
    seg.close()


def test_should_roll_on_segment_ms_with_jitter(tmp_path: Path) -> None:
    clock = ManualClock()
    seg = seg_at(tmp_path, base=0, rolling_jitter_ms=30, clock_ms=clock)
    append(seg, 0, b"x", ts=NOW_MS)
    kw = dict(segment_bytes=10_000, segment_ms=100, batches_bytes=10, max_offset_in_batches=1, now_ms=clock())
    assert seg.should_roll(max_timestamp_in_batches=NOW_MS + 70, **kw) is None  # type: ignore[arg-type]
    assert seg.should_roll(max_timestamp_in_batches=NOW_MS + 71, **kw) == "segment.ms"  # type: ignore[arg-type]
    seg.close()


def test_should_roll_on_size_and_offset_overflow(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, base=0)
    data = append(seg, 0, b"x" * 100)
    kw = dict(segment_ms=10**12, max_timestamp_in_batches=NOW_MS, now_ms=NOW_MS)
    assert seg.should_roll(segment_bytes=len(data) * 2, batches_bytes=len(data), max_offset_in_batches=1,
                           **kw) is None  # type: ignore[arg-type]
    assert seg.should_roll(segment_bytes=len(data) * 2 - 1, batches_bytes=len(data), max_offset_in_batches=1,
                           **kw) == "segment.bytes"  # type: ignore[arg-type]
    assert seg.should_roll(segment_bytes=10**9, batches_bytes=1, max_offset_in_batches=1 << 31,
                           **kw) == "relative offset overflow"  # type: ignore[arg-type]
    seg.close()


def test_close_trims_indexes_and_writes_final_time_entry(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, base=0, interval=10_000)
    append(seg, 0, b"a", ts=NOW_MS + 5)
    append(seg, 1, b"b", ts=NOW_MS + 9)
    seg.close()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 0
    raw = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    assert raw == struct.pack(">qi", NOW_MS + 9, 1)


@pytest.mark.parametrize("seed", range(16))
def test_appending_many_batches_at_once_indexes_as_one_at_a_time(tmp_path: Path, seed: int) -> None:
    """A list of batches (the cleaner's windows) gets its index entries planned at once
    (index_plan.py); they must be the entries, and the state, of appending the batches one by one,
    whatever the segment held before: timestamps that rise, stall and fall, sizes around the
    interval, a time index whose last entry is above the new batches' timestamps."""
    import random

    rng = random.Random(seed)
    interval = rng.choice([1, 50, 200, 4096])
    for d in ("one", "many"):
        (tmp_path / d).mkdir()
    one, many = seg_at(tmp_path / "one", interval=interval), seg_at(tmp_path / "many", interval=interval)
    offset, ts = 40, NOW_MS
    for _round in range(rng.randrange(1, 5)):
        group: list[tuple[AppendedBatch, bytes]] = []
        for _ in range(rng.randrange(1, 12)):
            n = rng.randrange(1, 4)
            ts += rng.choice([-5000, -1, 0, 0, 1, 7, 3000])
            data = build_batch([Record(offset + i, ts + rng.randrange(0, 3), None, b"v" * rng.randrange(0, 90))
                                for i in range(n)])
            h = BatchHeader.parse(data)
            group.append((AppendedBatch(h.last_offset, h.max_timestamp, h.size), data))
            offset += n + rng.choice([0, 0, 2])
        for batch, data in group:
            one.append([batch], data)
        many.append([b for b, _ in group], b"".join(d for _, d in group))
        state = (one.bytes_since_last_index_entry, one.max_timestamp_so_far, one.offset_of_max_timestamp_so_far)
        assert state == (many.bytes_since_last_index_entry, many.max_timestamp_so_far,
                         many.offset_of_max_timestamp_so_far)
        for index in ("offset_index", "time_index"):
            a, b = getattr(one, index), getattr(many, index)
            assert [a.entry(i) for i in range(a.entries)] == [b.entry(i) for i in range(b.entries)], index
    one.close()
    many.close()
    for suffix in (".log", ".index", ".timeindex"):
        name = names.segment_file(Path(), 40, suffix).name
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), suffix


def test_a_slice_read_ends_anywhere_after_the_first_batch(tmp_path: Path) -> None:
    """``whole_batches=False`` reads as Kafka's LogSegment.read does for a fetch: the first batch
    whole (larger than the limit too, with min_one_batch), then up to the limit, mid-batch if the
    limit falls there (clients drop a trailing partial batch and fetch it again); no header past
    the first is read. Never past ``max_position`` (the last stable offset)."""
    seg = seg_at(tmp_path)
    first = append(seg, 40, b"a" * 50)
    second = append(seg, 41, b"b" * 50)
    third = append(seg, 42, b"c" * 50)
    whole = first + second + third
    half = seg.read(40, len(first) + len(second) // 2, whole_batches=False)
    assert half is not None and half.records == whole[:len(first) + len(second) // 2] and half.first_offset == 40
    assert seg.read(41, 10_000, whole_batches=False).records == second + third  # type: ignore[union-attr]
    sliced = seg.read(41, 10_000, whole_batches=False, zero_copy=True)
    assert sliced is not None and sliced.records.read() == second + third  # type: ignore[union-attr]
    assert sliced.first_offset == 41 and sliced.position == len(first)  # asked for, not read by the fetch
    small = seg.read(40, 1, whole_batches=False)  # min_one_batch: the first batch, whole
    assert small is not None and small.records == first
    none = seg.read(40, len(first) - 1, min_one_batch=False, whole_batches=False)
    assert none is not None and none.records == b""  # no whole batch fits: nothing, as a whole-batch read
    capped = seg.read(40, 10_000, max_position=len(first) + len(second), whole_batches=False)
    assert capped is not None and capped.records == first + second
    seg.close()


def test_a_cached_only_read_answers_from_the_page_cache_or_would_block(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``cached_only=True`` reads with RWF_NOWAIT: what the page cache holds (at least the first
    batch), else WouldBlock, so that the Kafka listener can read on its event loop and hand only a
    read that would wait for the disk to a thread."""
    seg = seg_at(tmp_path)
    first = append(seg, 40, b"a" * 50)
    second = append(seg, 41, b"b" * 50)
    hot = seg.read(40, 10_000, whole_batches=False, cached_only=True)
    assert hot is not None and hot.records == first + second
    assert seg.read(40, 10_000, cached_only=True).records == first + second  # type: ignore[union-attr]
    real = os.preadv

    def not_cached(fd: int, buffers: list[bytearray], offset: int, flags: int = 0) -> int:
        if flags & os.RWF_NOWAIT:
            raise BlockingIOError(errno.EAGAIN, "not cached")
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", not_cached)
    for whole in (False, True):
        with pytest.raises(WouldBlock):
            seg.read(40, 10_000, whole_batches=whole, cached_only=True)
    assert seg.read(40, 10_000, whole_batches=False).records == first + second  # type: ignore[union-attr]

    # a range partly cached answers with its cached part when that holds the first batch whole
    def partly(fd: int, buffers: list[bytearray], offset: int, flags: int = 0) -> int:
        return min(real(fd, buffers, offset, flags), len(first) + 3)

    monkeypatch.setattr(os, "preadv", partly)
    part = seg.read(40, 10_000, whole_batches=False, cached_only=True)
    assert part is not None and part.records == (first + second)[:len(first) + 3]
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset, flags=0: len(first) - 1)
    with pytest.raises(WouldBlock):
        seg.read(40, 10_000, whole_batches=False, cached_only=True)

    def unsupported(fd: int, buffers: list[bytearray], offset: int, flags: int = 0) -> int:
        raise OSError(errno.EOPNOTSUPP, "not supported")  # a file system without RWF_NOWAIT reads

    monkeypatch.setattr(os, "preadv", unsupported)
    with pytest.raises(WouldBlock):
        seg.read(40, 10_000, whole_batches=False, cached_only=True)
    seg.close()

