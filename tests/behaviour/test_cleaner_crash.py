"""A crash at each step of swapping a cleaned segment in (Kafka's LogCleanerTest.testRecoveryAfterCrash),
then a reload: the log is either exactly as before the clean or exactly as after it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.grouping import group_segments_by_size
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.cleaner.stats import CleanerStats
from logkeeper.cleaner.txn import CleanedTransactionMetadata
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from tests.cleaner_logs import append_kvs, ensure_valid_segments, read_log

START_MS = 1_700_000_000_000
LONG_MAX = (1 << 63) - 1
CONFIG = LogConfig.from_props({"segment.bytes": 300, "index.interval.bytes": 1, "file.delete.delay.ms": 10,
                               "cleanup.policy": "compact"})


class Crash(Exception):
    pass


def make_log(path: Path, *, recovered: bool = False) -> Log:
    return Log(path, CONFIG, clock_ms=lambda: START_MS, had_clean_shutdown=not recovered, recovery_point=0)


def build(path: Path) -> Log:
    log = make_log(path)
    while len(log.segments) < 10:
        append_kvs(log, [(str(log.log_end_offset).encode(), str(log.log_end_offset).encode())])
    return log


def odd_keys_map(log: Log) -> SipHashOffsetMap:
    m = SipHashOffsetMap(slots=1 << 20)
    for k in range(1, log.log_end_offset, 2):
        m.put(str(k).encode(), LONG_MAX)
    return m


def clean_nine(log: Log, crash_at: str | None) -> None:
    def hook(step: str) -> None:
        if step == crash_at:
            raise Crash(step)

    cleaner = Cleaner(0, SipHashOffsetMap(slots=1024), clock_ms=lambda: START_MS, crash_hook=hook)
    segments = log.segments.values()[:9]
    cleaner.clean_segments(log, segments, odd_keys_map(log), START_MS, CleanerStats(), CleanedTransactionMetadata(),
                           log.active_segment.base_offset)


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in read_log(log)]


def temp_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted")))


Rows = list[tuple[int, bytes | None, bytes | None]]


@pytest.fixture
def before_after(tmp_path: Path) -> tuple[Rows, Rows]:
    log = build(tmp_path / "reference-0")
    before = records(log)
    clean_nine(log, None)
    after = records(log)
    log.close()
    assert before != after
    return before, after


# step -> whether the reload must show the cleaned log (True) or the original one (False)
STEPS = {"written": False, "swapped": True, "old-deleted": True, "renamed": True}


def crash_at(path: Path, step: str, before: Rows) -> None:
    """Build the log in ``path`` (the reference's records), crash its cleaning at ``step`` of the
    replacement and close it, as the crashed process left it."""
    log = build(path)
    assert records(log) == before
    with pytest.raises(Crash):
        clean_nine(log, step)
    log.close()


def reload_as(path: Path, expected: Rows) -> Log:
    """Reload the crashed log: it holds ``expected`` and no temporary file is left."""
    reloaded = make_log(path, recovered=True)
    assert records(reloaded) == expected
    assert temp_files(path) == []
    return reloaded


@pytest.mark.parametrize("step", list(STEPS))
def test_crash_at_each_replacement_step(tmp_path: Path, step: str, before_after: tuple[list, list]) -> None:
    before, after = before_after
    path = tmp_path / "topic-0"
    crash_at(path, step, before)
    reloaded = reload_as(path, after if STEPS[step] else before)
    ensure_valid_segments(reloaded)
    # the log goes on: appends and another clean work
    append_kvs(reloaded, [(b"x", b"y")])
    reloaded.roll()
    end, _stats = Cleaner(0, SipHashOffsetMap(slots=1 << 16), clock_ms=lambda: START_MS).clean(
        LogToClean(reloaded, 0, reloaded.active_segment.base_offset))
    assert end == reloaded.active_segment.base_offset
    ensure_valid_segments(reloaded)
    reloaded.close()


def test_crash_with_some_cleaned_files_renamed_to_swap(tmp_path: Path, before_after: tuple[list, list]) -> None:
    """Kafka's case 2: a crash while renaming .cleaned to .swap: the replacement is rolled back."""
    before, _after = before_after
    path = tmp_path / "topic-0"
    crash_at(path, "written", before)
    cleaned_log = next(p for p in path.iterdir() if p.name.endswith(".log.cleaned"))
    cleaned_log.rename(cleaned_log.with_name(cleaned_log.name.replace(".cleaned", ".swap")))
    reload_as(path, before).close()


def test_crash_with_some_swap_files_renamed_back(tmp_path: Path, before_after: tuple[list, list]) -> None:
    """Kafka's case 5: a crash while dropping the .swap suffixes: the replacement completes."""
    before, after = before_after
    path = tmp_path / "topic-0"
    crash_at(path, "old-deleted", before)
    swap_time_index = next(p for p in path.iterdir() if p.name.endswith(".timeindex.swap"))
    swap_time_index.rename(swap_time_index.with_name(swap_time_index.name[: -len(".swap")]))
    reload_as(path, after).close()


def test_crash_in_second_group_keeps_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round of several groups: a crash in the second replacement keeps the first one done and the
    rest as it was. (A round swaps groups in by batches, group_writer.write_batches: here a batch is one
    group, so that each group is its own replacement; tests/unit/test_cleaner_output_cost.py crashes
    a batch of several.)"""
    monkeypatch.setattr("logkeeper.cleaner.group_writer.WRITE_BATCH_GROUPS", 1)
    path = tmp_path / "topic-0"
    log = make_log(path)
    while len(log.segments) < 10:
        append_kvs(log, [(str(log.log_end_offset % 7).encode(), str(log.log_end_offset).encode())])
    log.roll()
    shutil.copytree(path, tmp_path / "copy-0")
    before = records(log)
    first_uncleanable = log.active_segment.base_offset
    groups = group_segments_by_size(log.segments.values(0, first_uncleanable), CONFIG.segment_bytes,
                                    CONFIG.max_index_size, first_uncleanable)
    assert len(groups) >= 2
    second_base = groups[1][0].base_offset
    writes: list[str] = []

    def hook(step: str) -> None:
        writes.append(step)
        if writes.count("written") == 2:
            raise Crash(step)

    with pytest.raises(Crash):
        Cleaner(0, SipHashOffsetMap(slots=1 << 16), clock_ms=lambda: START_MS, crash_hook=hook).clean(
            LogToClean(log, 0, first_uncleanable))
    log.close()
    reference = make_log(tmp_path / "copy-0")
    Cleaner(0, SipHashOffsetMap(slots=1 << 16), clock_ms=lambda: START_MS).clean(
        LogToClean(reference, 0, first_uncleanable))
    after = records(reference)
    reference.close()
    reloaded = make_log(path, recovered=True)
    assert temp_files(path) == []
    expected = [r for r in after if r[0] < second_base] + [r for r in before if r[0] >= second_base]
    assert records(reloaded) == expected
    ensure_valid_segments(reloaded)
    reloaded.close()
