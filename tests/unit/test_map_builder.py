"""Building a round's offset map (cleaner/map_builder.py, map_kernel.py): each window's records
hashed ahead on a helper thread, then put into the table in offset order."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from logkeeper.cleaner import map_builder
from logkeeper.cleaner import map_kernel as mk
from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.errors import CorruptRecordError
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import crc32c
from tests.cleaner_logs import append_kvs

RECORD_COUNT_AT = 57  # the header's recordCount (int32, big-endian)
CRC_AT = 17  # the header's CRC-32C of bytes 21..end


def make_log(tmp_path: Path) -> Log:
    # policy delete (unkeyed records allowed): the map is built the same
    config = LogConfig.from_props({"segment.bytes": 1 << 24})
    return Log(tmp_path / "t-0", config, clock_ms=lambda: 0)


def build(log: Log, slots: int, load_factor: float = 0.75) -> SipHashOffsetMap:
    m = SipHashOffsetMap(slots=slots, load_factor=load_factor)
    cleaner = Cleaner(0, m, clock_ms=lambda: 0, load_factor=load_factor)
    cleaner.build_offset_map(log, 0, log.log_end_offset, m, CleanerStats())
    return m


def fill(log: Log, batches: int, per_batch: int, n_keys: int, seed: int = 1) -> dict[bytes, int]:
    """Appends random keys (some unkeyed records); returns each key's latest offset."""
    rng = np.random.default_rng(seed)
    latest: dict[bytes, int] = {}
    for _ in range(batches):
        keys = [None if k < 0 else f"k{k}".encode() for k in rng.integers(-1, n_keys, per_batch).tolist()]
        first = append_kvs(log, [(k, b"v") for k in keys])
        for i, k in enumerate(keys):
            if k is not None:
                latest[k] = first + i
    log.roll()
    return latest


def rewrite_record_count(log: Log, batch: int, count: int) -> tuple[Path, int, int]:
    """Sets batch number ``batch`` of the first segment to claim ``count`` records, with a valid
    CRC (only walking its records can tell); returns the file, the batch's position and size."""
    segment = log.segments.values()[0]
    table = segment.log.scan()
    position, size = int(table.position[batch]), int(table.size[batch])
    path = segment.log.path
    log.close()
    with open(path, "r+b") as f:
        f.seek(position)
        data = bytearray(f.read(size))
        struct.pack_into(">i", data, RECORD_COUNT_AT, count)
        struct.pack_into(">I", data, CRC_AT, crc32c(bytes(data[21:])))
        f.seek(position)
        f.write(data)
    return path, position, size


def reopen(log: Log) -> Log:
    return Log(log.dir, log.config, clock_ms=lambda: 0)


def hashing_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "offset-map-hashing"]


@pytest.mark.parametrize("window_bytes", [1, 50_000, 1 << 24])
def test_the_map_holds_each_keys_latest_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               window_bytes: int) -> None:
    """One batch a window, a few batches a window, one window: the same map. Its 79k keys grow
    the table past its first 64k slots, at a batch inside a window."""
    monkeypatch.setattr(map_builder, "WINDOW_BYTES", window_bytes)
    log = make_log(tmp_path)
    latest = fill(log, batches=100, per_batch=1000, n_keys=200_000)
    m = build(log, slots=1 << 20)
    assert m.views()[0].shape[0] > 1 << 16  # it grew
    assert m.size == len(latest)
    assert m.latest_offset == log.log_end_offset - 1
    assert all(m.get(k) == o for k, o in latest.items())
    assert not hashing_threads()
    log.close()


def test_a_full_map_stops_at_the_same_record_whatever_the_windows(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    log = make_log(tmp_path)
    fill(log, batches=30, per_batch=100, n_keys=1000)
    results = []
    for window_bytes in (1, 3000, 1 << 24):
        monkeypatch.setattr(map_builder, "WINDOW_BYTES", window_bytes)
        m = build(log, slots=400)
        results.append((m.size, m.latest_offset))
    assert results[0][0] == 300 and results[0][1] < log.log_end_offset - 1  # a partial map
    assert results == [results[0]] * 3
    log.close()


def test_a_batch_whose_records_do_not_parse_fails_the_build_naming_file_and_position(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(map_builder, "WINDOW_BYTES", 1)  # the bad batch is hashed ahead of its puts
    log = make_log(tmp_path)
    fill(log, batches=10, per_batch=20, n_keys=50)
    path, position, size = rewrite_record_count(log, batch=6, count=21)
    log = reopen(log)
    with pytest.raises(CorruptRecordError, match="fewer than recordCount") as info:
        build(log, slots=1000)
    assert path.name in str(info.value)
    assert position < info.value.position <= position + size
    assert not hashing_threads()
    log.close()


def test_an_absurd_record_count_fails_the_walk_not_the_allocation(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    fill(log, batches=3, per_batch=20, n_keys=50)
    _, _, size = rewrite_record_count(log, batch=1, count=(1 << 31) - 1)
    log = reopen(log)
    with pytest.raises(CorruptRecordError, match="fewer than recordCount"):
        build(log, slots=1000)
    rows = np.zeros(2, dtype=mk.MAP_ROW)
    rows["record_count"] = [20, (1 << 31) - 1]
    rows["area_start"] = [0, 1000]
    rows["area_end"] = rows["area_start"] + np.array([900, size - 61])
    assert mk.hashed_rows(rows) <= 20 + (size - 61) // 5 + 1
    log.close()


def test_a_bad_batch_after_the_map_fills_is_never_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka stops reading where the map fills: a bad batch further on, already hashed ahead in
    its window, does not fail the build."""
    monkeypatch.setattr(map_builder, "WINDOW_BYTES", 1)
    log = make_log(tmp_path)
    fill(log, batches=20, per_batch=50, n_keys=10_000)
    rewrite_record_count(log, batch=15, count=51)
    log = reopen(log)
    m = build(log, slots=200)  # fills at 150 keys, in the fourth batch
    assert m.size == 150 and m.latest_offset < 200
    assert not hashing_threads()
    log.close()
