"""The cleaned segment's helper-thread appender (cleaner/appender.py): windows in order, errors
raised on the cleaner's thread, nothing written after the cleaner fails; and the writeback hint
it gives (FileRecords.start_writeback)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from logkeeper.cleaner.appender import WindowAppender
from logkeeper.log.file_records import FileRecords, _sync_file_range
from logkeeper.log.segment import AppendedBatch, LogSegment
from logkeeper.records.builder import Record, build_batch


class FakeSegment:
    """Records the windows appended, from which thread; fails at window ``fail_at``; can be held
    at ``hold_at`` until released."""

    base_offset = 0

    def __init__(self, fail_at: int = -1, hold_at: int = -1) -> None:
        self.windows: list[bytes] = []
        self.threads: set[str] = set()
        self.writebacks = 0
        self.fail_at = fail_at
        self.hold_at = hold_at
        self.held = threading.Event()
        self.release = threading.Event()
        self.log = self

    def append(self, batches: Any, data: memoryview) -> None:
        n = data[0]  # the window's number (see window())
        if n == self.hold_at:
            self.held.set()
            self.release.wait(5)
        if n == self.fail_at:
            raise OSError(28, "No space left on device")
        self.windows.append(bytes(data))
        self.threads.add(threading.current_thread().name)

    def start_writeback(self) -> None:
        self.writebacks += 1


def window(i: int) -> tuple[list[AppendedBatch], memoryview]:
    return [AppendedBatch(i, 0, 1)], memoryview(bytes([i]))


def test_windows_are_appended_in_order_by_the_helper() -> None:
    dest = FakeSegment()
    with WindowAppender(cast(LogSegment, dest)) as appender:
        for i in range(20):
            appender.append(*window(i))
    assert dest.windows == [bytes([i]) for i in range(20)]
    assert dest.threads == {"cleaned-0-appender"} and dest.writebacks == 20


def test_an_error_of_the_helper_is_raised_on_the_cleaners_thread_and_stops_the_appends() -> None:
    dest = FakeSegment(fail_at=2, hold_at=2)
    with pytest.raises(OSError, match="No space left"), WindowAppender(cast(LogSegment, dest)) as appender:
        for i in range(5):
            appender.append(*window(i))  # the helper is held in window 2; 3 and 4 wait
        assert dest.held.wait(5)
        dest.release.set()  # window 2 fails; the block ends normally and raises it
    assert dest.windows == [b"\x00", b"\x01"]  # nothing after the failed window


def test_an_error_of_the_last_window_is_raised_when_the_block_ends() -> None:
    dest = FakeSegment(fail_at=0)
    with pytest.raises(OSError, match="No space left"), WindowAppender(cast(LogSegment, dest)) as appender:
        appender.append(*window(0))


def test_when_the_cleaner_fails_what_waits_is_dropped_and_its_error_wins() -> None:
    dest = FakeSegment(hold_at=1)
    with pytest.raises(KeyError, match="aborted"), WindowAppender(cast(LogSegment, dest)) as appender:
        for i in range(4):
            appender.append(*window(i))  # the helper is held in window 1; 2 and 3 wait
        assert dest.held.wait(5)
        threading.Timer(0.2, dest.release.set).start()  # after the block has been left
        raise KeyError("aborted")
    assert dest.windows == [b"\x00", b"\x01"]  # the window being written finished; 2 and 3 dropped


def test_a_real_segment_gets_the_same_bytes_and_index_as_direct_appends(tmp_path: Path) -> None:
    batches = [build_batch([Record(o, 1000 + o, b"k%d" % o, b"v" * 300)], base_offset=o) for o in range(40)]

    def appended(i: int) -> tuple[list[AppendedBatch], memoryview]:
        group = batches[4 * i:4 * i + 4]
        return ([AppendedBatch(4 * i + j, 1000 + 4 * i + j, len(b)) for j, b in enumerate(group)],
                memoryview(b"".join(group)))

    (tmp_path / "direct").mkdir()
    (tmp_path / "helped").mkdir()
    direct = LogSegment(tmp_path / "direct", 0, index_interval_bytes=1000, max_index_size=4096)
    helped = LogSegment(tmp_path / "helped", 0, index_interval_bytes=1000, max_index_size=4096)
    for i in range(10):
        direct.append(*appended(i))
    with WindowAppender(helped) as appender:
        for i in range(10):
            appender.append(*appended(i))
    for seg in (direct, helped):
        seg.flush()
        seg.close()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
        assert (tmp_path / "helped" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes(), name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_start_writeback_reaches_the_kernel(tmp_path: Path) -> None:
    # the hint the appender gives after each window: libc's sync_file_range, bound with ctypes
    f = FileRecords(tmp_path / "0.log")
    f.append(build_batch([Record(0, 1, b"k", b"v" * 5000)]))
    start = _sync_file_range()
    assert start is not None
    assert start(f.fd, 0, 0, 2) == 0  # SYNC_FILE_RANGE_WRITE on a real descriptor
    assert start(-1, 0, 0, 2) == -1  # a bad descriptor: refused, not a crash
    f.start_writeback()
    f.close()
