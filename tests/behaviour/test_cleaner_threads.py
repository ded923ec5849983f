"""The LogCleaner with its threads: cleaning in the background, metrics, uncleanable partitions retried,
abort and pause waiting for a thread, and appends and reads going on during cleaning and swaps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.cleaner.staging import STAGING_DIR_NAME
from logkeeper.cleaner.states import Paused
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.batch import BatchHeader
from logkeeper.records.scan import first_crc_mismatch, scan_batches
from tests.cleaner_logs import append_kvs, batch_records, ensure_valid_segments, keys_in_log

START_MS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START_MS
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            return self.now


def compact_log(log_dir: Path, tp: TopicPartition, clock: Clock, **props: object) -> Log:
    config = {"segment.bytes": 2048, "cleanup.policy": "compact", "file.delete.delay.ms": 60000,
              "min.cleanable.dirty.ratio": 0.01}
    config.update({k.replace("_", "."): v for k, v in props.items()})
    return Log(log_dir / str(tp), LogConfig.from_props(config), clock_ms=clock)


def fill(log: Log, n: int, keys: int) -> None:
    for i in range(n):
        append_kvs(log, [(str(i % keys).encode(), f"{i % keys}:{i}".encode())])


def cleaner_config(**props: object) -> CleanerConfig:
    base: dict[str, object] = {"log.cleaner.backoff.ms": 20, "log.cleaner.dedupe.buffer.size": 24 * 100_000}
    base.update(props)
    return CleanerConfig.from_props(base)


def test_threads_clean_every_compacted_log_and_report_metrics(tmp_path: Path) -> None:
    clock = Clock()
    tps = [TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("c", 0)]
    logs = {tp: compact_log(tmp_path, tp, clock) for tp in tps[:2]}
    logs[tps[2]] = compact_log(tmp_path, tps[2], clock, cleanup_policy="delete")
    for log in logs.values():
        fill(log, 300, 10)
        log.roll()
    lines: list[str] = []
    cleaner = LogCleaner(cleaner_config(**{"log.cleaner.threads": 2}), [tmp_path], lambda: logs, clock_ms=clock,
                         stats_sink=lines.append)
    cleaner.startup()
    try:
        for tp in tps[:2]:
            assert cleaner.await_cleaned(tp, logs[tp].active_segment.base_offset, max_wait_ms=30000)
        metrics = cleaner.metrics()
    finally:
        cleaner.shutdown()
    assert cleaner.threads == []
    for tp in tps[:2]:
        assert sorted(set(keys_in_log(logs[tp]))) == sorted({str(i).encode() for i in range(10)})
        assert len(keys_in_log(logs[tp])) < 300
    assert len(keys_in_log(logs[tps[2]])) == 300  # cleanup.policy=delete is never compacted
    assert any("Log cleaner thread" in line and "size reduction" in line for line in lines)
    d = metrics.to_dict()
    assert d["DeadThreadCount"] == 0
    assert d["uncleanable-partitions-count"] == {str(tmp_path.resolve()): 0}
    assert 0 <= d["max-buffer-utilization-percent"] <= 100
    assert d["cleaner-recopy-percent"] < 100
    assert d["max-dirty-percent"] >= 0 and d["time-since-last-run-ms"] >= 0
    assert set(d) >= {"max-clean-time-secs", "max-compaction-delay-secs", "uncleanable-bytes"}


def test_disabled_cleaner_starts_no_thread(tmp_path: Path) -> None:
    cleaner = LogCleaner(cleaner_config(**{"log.cleaner.enable": "false"}), [tmp_path], dict)
    cleaner.startup()
    assert cleaner.threads == []
    assert cleaner.metrics().dead_thread_count == 0


def test_without_the_offload_old_staging_directories_are_still_removed(tmp_path: Path) -> None:
    """The offload's modules are not loaded when it is off; what an earlier process with the
    offload on left in the staging directory is removed at start all the same."""
    left = tmp_path / STAGING_DIR_NAME / "t-0" / "attempt-1"
    left.mkdir(parents=True)
    cleaner = LogCleaner(cleaner_config(**{"log.cleaner.threads": 1}), [tmp_path], dict)
    assert cleaner.offloader is None
    cleaner.startup()
    try:
        assert not (tmp_path / STAGING_DIR_NAME).exists()
        assert cleaner.offload_status() == {} and cleaner.metrics().offloads == {}
    finally:
        cleaner.shutdown()


def test_uncleanable_partition_is_retried_after_backoff(tmp_path: Path) -> None:
    clock = Clock()
    tp = TopicPartition("bad", 0)
    log = compact_log(tmp_path, tp, clock)
    fill(log, 200, 5)
    log.roll()
    first = log.segments.values()[0]
    with open(first.log.path, "r+b") as f:  # break the CRC of the first batch
        f.seek(70)
        f.write(b"\xff\xfe")
    logs = {tp: log}
    cleaner = LogCleaner(cleaner_config(**{"log.cleaner.uncleanable.retry.initial.ms": 1000}), [tmp_path],
                         lambda: logs, clock_ms=clock)
    worker = cleaner.new_worker(0)
    assert not worker.try_clean_filthiest_log()
    assert worker.last_failure is not None and "CRC" in str(worker.last_failure)
    metrics = cleaner.metrics([worker])
    assert metrics.uncleanable_partitions_count == {str(tmp_path.resolve()): 1}
    assert metrics.uncleanable_bytes[str(tmp_path.resolve())] > 0
    assert not worker.try_clean_filthiest_log() and worker.last_failure is None  # backing off
    with open(first.log.path, "r+b") as f:  # repaired (as a recovery would)
        data = first.log.path.read_bytes()
        f.seek(70)
        f.write(fixed_bytes(data))
    with clock.lock:
        clock.now += 1000
    assert worker.try_clean_filthiest_log()
    assert cleaner.manager.uncleanable_partitions(tmp_path) == {}
    assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name]


def fixed_bytes(data: bytes) -> bytes:
    """The two bytes at 70 that make the first batch's CRC right again (found by trying them all)."""
    import crc32c

    header = BatchHeader.parse(data, 0)
    buf = bytearray(data[:header.size])
    for a in range(256):
        for b in range(256):
            buf[70], buf[71] = a, b
            if crc32c.crc32c(bytes(buf[21:])) == header.crc:
                return bytes([a, b])
    raise ValueError("no repair found")


def test_abort_and_pause_waits_for_a_cleaning_thread(tmp_path: Path) -> None:
    clock = Clock()
    tp = TopicPartition("big", 0)
    log = compact_log(tmp_path, tp, clock, segment_bytes=1 << 20)
    fill(log, 3000, 50)
    log.roll()
    logs = {tp: log}
    started = threading.Event()
    release = threading.Event()
    cleaner = LogCleaner(cleaner_config(), [tmp_path], lambda: logs, clock_ms=clock)
    original_checker = cleaner.manager.check_cleaning_aborted

    def slow_check(t: TopicPartition) -> None:
        started.set()
        release.wait(5)
        original_checker(t)

    cleaner.manager.check_cleaning_aborted = slow_check  # type: ignore[method-assign]
    cleaner.startup()
    try:
        assert started.wait(10)
        aborter = threading.Thread(target=cleaner.abort_and_pause_cleaning, args=(tp, 20))
        aborter.start()
        time.sleep(0.1)
        assert aborter.is_alive()  # waiting for the thread to notice
        release.set()
        aborter.join(20)
        assert not aborter.is_alive()
        assert cleaner.manager.cleaning_state(tp) == Paused(1)
        assert cleaner.metrics().states == {str(tp): "paused(1)"}
        assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name]
        assert len(keys_in_log(log)) == 3000  # nothing swapped in
        cleaner.resume_cleaning([tp])
        assert cleaner.await_cleaned(tp, log.active_segment.base_offset, max_wait_ms=30000)
    finally:
        release.set()
        cleaner.shutdown()
    assert len(keys_in_log(log)) == 50


def test_appends_and_reads_go_on_while_cleaning(tmp_path: Path) -> None:
    clock = Clock()
    tp = TopicPartition("busy", 0)
    log = compact_log(tmp_path, tp, clock, segment_bytes=4096)
    keys = 40
    fill(log, 400, keys)
    logs = {tp: log}
    cleaner = LogCleaner(cleaner_config(**{"log.cleaner.backoff.ms": 1}), [tmp_path], lambda: logs, clock_ms=clock)
    stop = threading.Event()
    errors: list[str] = []
    passes = [0]

    def appender() -> None:
        i = 400
        while not stop.is_set():
            append_kvs(log, [(str(i % keys).encode(), f"{i % keys}:{i}".encode())])
            i += 1
            if i % 150 == 0:
                log.roll()
            time.sleep(0.0005)

    def reader() -> None:
        while not stop.is_set():
            expected = {str(k).encode() for k in range(keys)}  # every key is in the log before this pass
            seen: set[bytes] = set()
            offset, last = log.log_start_offset, -1
            while offset < log.log_end_offset:
                data = log.read(offset, 1 << 16).records
                if not data:
                    break
                buf = np.frombuffer(data, dtype=np.uint8)
                table = scan_batches(buf)
                if first_crc_mismatch(buf, table) != -1:
                    errors.append(f"bad CRC read at {offset}")
                pos = 0
                for row in range(table.count):
                    header = BatchHeader.parse(data, int(table.position[row]))
                    raw = data[int(table.position[row]):int(table.position[row]) + header.size]
                    for rec in batch_records(header, raw):
                        if rec.offset <= last:
                            errors.append(f"offset {rec.offset} after {last}: duplicated or out of order")
                        last = rec.offset
                        if rec.key is not None:
                            seen.add(rec.key)
                            if rec.value is not None and not rec.value.startswith(rec.key + b":"):
                                errors.append(f"value {rec.value!r} under key {rec.key!r}")
                    pos = header.next_offset
                offset = max(offset + 1, pos)
            if not expected <= seen:
                errors.append(f"pass missed keys {sorted(expected - seen)[:5]}")
            passes[0] += 1

    threads = [threading.Thread(target=appender), threading.Thread(target=reader)]
    cleaner.startup()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline and not errors:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    rounds = cleaner.metrics().rounds
    cleaner.shutdown()
    assert errors == []
    assert rounds >= 3 and passes[0] >= 3
    ensure_valid_segments(log)
    log.close()
    reloaded = Log(log.dir, log.config, clock_ms=clock, had_clean_shutdown=False)
    ensure_valid_segments(reloaded)
    assert {k for k in keys_in_log(reloaded)} == {str(k).encode() for k in range(keys)}
    reloaded.close()


@pytest.mark.parametrize("rate", [200_000.0])
def test_throttled_cleaner_is_slower(tmp_path: Path, rate: float) -> None:
    from logkeeper.cleaner.throttler import Throttler

    now = [0]
    slept: list[float] = []

    def fake_sleep(s: float) -> None:
        slept.append(s)
        now[0] += int(s * 1e9)

    t = Throttler(rate, check_interval_ms=300, clock_ns=lambda: now[0], sleep_s=fake_sleep)
    for _ in range(10):
        now[0] += 100_000_000  # 100 ms
        t.maybe_throttle(100_000)  # 1 MB/s observed, against 200 kB/s wanted
    assert slept and t.total_observed == 1_000_000
    elapsed_s = now[0] / 1e9
    assert t.total_observed / elapsed_s <= rate * 1.5


def test_a_round_is_reported_after_its_checkpoint(tmp_path: Path) -> None:
    """Regression: the sidecar's status paired a just-reported round with the previous cleaner
    checkpoint (dirty ratio 1.0 after a round), as the round was reported before done_cleaning."""
    clock = Clock()
    tp = TopicPartition("a", 0)
    logs = {tp: compact_log(tmp_path, tp, clock)}
    fill(logs[tp], 300, 10)
    logs[tp].roll()
    seen: list[tuple[int, int | None]] = []
    cleaner: LogCleaner | None = None

    def sink(t: TopicPartition, start: int, end: int, stats: object, cleaner_id: int) -> None:
        assert cleaner is not None
        seen.append((end, cleaner.manager.all_cleaner_checkpoints().get(t)))

    cleaner = LogCleaner(cleaner_config(), [tmp_path], lambda: logs, clock_ms=clock, round_sink=sink)
    cleaner.startup()
    try:
        assert cleaner.await_cleaned(tp, logs[tp].active_segment.base_offset, max_wait_ms=30000)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        cleaner.shutdown()
    assert seen and all(end == checkpoint for end, checkpoint in seen), seen
