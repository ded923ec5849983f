"""The cleaner's per-group fixed costs cut for small segments (issue 23), and what must not change
with them: the cleaned segments' indexes allocated at the group's bound (the same trimmed bytes as
with segment.index.bytes), small groups appended inline (an error still leaves no .cleaned file and
the old segments intact), the producers' last records read once a round."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logkeeper.cleaner import cleaner as cleaner_module
from logkeeper.cleaner import group_writer
from logkeeper.cleaner.appender import INLINE_GROUP_BYTES, InlineAppender, WindowAppender, appender_for
from logkeeper.cleaner.clean_command import ReplacedFiles
from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.group_writer import cleaned_index_bound, write_batches
from logkeeper.cleaner.offset_map import SipHashOffsetMap
from logkeeper.cleaner.selection import LogToClean
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from tests.cleaner_logs import append_kvs, read_log

START_MS = 1_700_000_000_000
CONFIG = LogConfig.from_props({"segment.bytes": 4096, "index.interval.bytes": 64, "cleanup.policy": "compact"})


def build(path: Path, clock_ms: Callable[[], int] = lambda: START_MS) -> Log:
    log = Log(path, CONFIG, clock_ms=clock_ms)
    i = 0
    while len(log.segments) < 12:
        append_kvs(log, [(b"k%d" % (i % 7), b"v%06d" % i)], timestamp=START_MS + i)
        i += 1
    return log


def build_keeping(path: Path) -> Log:
    """As ``build``, with mostly distinct keys: every group keeps records (each appends)."""
    log = Log(path, CONFIG, clock_ms=lambda: START_MS)
    i = 0
    while len(log.segments) < 12:
        append_kvs(log, [(b"k%d" % i if i % 3 else b"dup", b"v%06d" % i)], timestamp=START_MS + i)
        i += 1
    return log


def clean(log: Log) -> None:
    c = Cleaner(0, SipHashOffsetMap(slots=1 << 12), clock_ms=lambda: START_MS)
    c.clean(LogToClean(log, 0, log.active_segment.base_offset))


def index_bytes(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.iterdir()) if p.suffix in (".index", ".timeindex")}


def test_bound_covers_an_entry_per_interval_and_never_exceeds_the_config() -> None:
    assert cleaned_index_bound(0, CONFIG) >= 8 * 12
    # B bytes make at most B // interval + 2 entries in either index
    assert cleaned_index_bound(100_000, CONFIG) >= (100_000 // 64 + 2) * 12
    assert cleaned_index_bound(1 << 40, CONFIG) == CONFIG.max_index_size


def test_bounded_indexes_are_the_same_bytes_as_full_size_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bounded = build(tmp_path / "bounded-0")
    clean(bounded)
    full = build(tmp_path / "full-0")
    monkeypatch.setattr(group_writer, "cleaned_index_bound", lambda _b, config: config.max_index_size)
    clean(full)
    assert read_log(bounded) == read_log(full)
    assert index_bytes(bounded) == index_bytes(full)
    assert len(index_bytes(bounded)) > 2  # cleaned segments with entries were compared
    bounded.close()
    full.close()
    # and a reload trusts them as they are
    again = Log(tmp_path / "bounded-0", CONFIG, clock_ms=lambda: START_MS)
    assert read_log(again) == read_log(full)
    again.close()


def test_small_groups_append_inline_big_ones_on_a_helper(tmp_path: Path) -> None:
    log = build(tmp_path / "t-0")
    seg = log.new_cleaned_segment(0)
    assert isinstance(appender_for(seg, INLINE_GROUP_BYTES), InlineAppender)
    helper = appender_for(seg, INLINE_GROUP_BYTES + 1)
    with helper:
        assert isinstance(helper, WindowAppender)
    seg.delete_if_exists()
    log.close()


def test_an_error_during_an_inline_group_leaves_no_cleaned_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = build(tmp_path / "t-0")
    latest = {r.key: (r.offset, r.value) for r in read_log(log)}

    def fail(self: InlineAppender, batches: object, data: memoryview) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(InlineAppender, "append", fail)
    with pytest.raises(OSError):
        clean(log)
    # groups emptied of every record were swapped before the first append failed; the group that
    # failed is untouched and its .cleaned files are gone
    assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name or ".swap" in p.name]
    assert {r.key: (r.offset, r.value) for r in read_log(log)} == latest
    log.close()


def test_an_error_after_some_groups_of_a_batch_leaves_no_cleaned_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The groups of a swap batch are cleaned as one stream: when a later group fails, the cleaned
    segments of the batch's finished groups go too, and the log is as it was."""
    log = build_keeping(tmp_path / "t-0")
    latest = {r.key: (r.offset, r.value) for r in read_log(log)}
    files = sorted(p.name for p in log.dir.iterdir())
    real = InlineAppender.append
    calls: list[int] = []

    def fail_third(self: InlineAppender, batches: object, data: memoryview) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(5, "Input/output error")
        real(self, batches, data)  # type: ignore[arg-type]

    monkeypatch.setattr(InlineAppender, "append", fail_third)
    with pytest.raises(OSError, match="Input/output"):
        clean(log)
    assert len(calls) == 3
    assert sorted(p.name for p in log.dir.iterdir()) == files
    assert {r.key: (r.offset, r.value) for r in read_log(log)} == latest
    log.close()


def test_a_cleaned_segment_that_cannot_be_made_fails_the_batch_and_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When a group's cleaned segment cannot be made (a full disk), the error stops the round at
    that group and every segment made for the batch is deleted."""
    log = build_keeping(tmp_path / "t-0")
    latest = {r.key: (r.offset, r.value) for r in read_log(log)}
    files = sorted(p.name for p in log.dir.iterdir())
    real = Log.new_cleaned_segment
    made: list[int] = []

    def full_at_fourth(self: Log, base_offset: int, max_index_size: int | None = None) -> object:
        made.append(base_offset)
        if len(made) == 4:
            raise OSError(28, "No space left on device")
        return real(self, base_offset, max_index_size)

    monkeypatch.setattr(Log, "new_cleaned_segment", full_at_fourth)
    with pytest.raises(OSError, match="No space"):
        clean(log)
    assert sorted(p.name for p in log.dir.iterdir()) == files
    assert {r.key: (r.offset, r.value) for r in read_log(log)} == latest
    log.close()


def test_producers_read_once_a_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = build(tmp_path / "t-0")
    calls: list[int] = []
    real = cleaner_module.last_records_of_active_producers

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cleaner_module, "last_records_of_active_producers", counting)
    before = len(read_log(log))
    clean(log)
    assert len(read_log(log)) < before  # 11 groups cleaned
    assert len(calls) == 1
    log.close()


def test_groups_are_swapped_in_by_batches_each_syncing_the_directory_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logkeeper.log import replace

    log = build(tmp_path / "t-0")
    syncs: list[Path] = []
    real = replace.fsync_dir
    monkeypatch.setattr(replace, "fsync_dir", lambda d: (syncs.append(d), real(d))[1])
    monkeypatch.setattr(group_writer, "WRITE_BATCH_GROUPS", 4)
    batches: list[int] = []
    real_clean_groups = Cleaner.clean_groups

    def counting(self: Cleaner, log_: Log, groups: list[object], *args: object, **kwargs: object) -> None:
        batches.append(len(groups))
        real_clean_groups(self, log_, groups, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Cleaner, "clean_groups", counting)
    clean(log)
    assert batches == [4, 4, 3]  # 11 groups of one segment each
    assert len(syncs) == 2 * len(batches) + 1  # the last batch's renames synced too
    log.close()


def test_write_batches_bound_bytes_and_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = [100] * 11
    monkeypatch.setattr(group_writer, "WRITE_BATCH_BYTES", 300)
    batches = write_batches(sizes)
    assert [len(b) for b in batches] == [3, 3, 3, 2]
    assert [g for b in batches for g in b] == list(range(11))
    monkeypatch.setattr(group_writer, "WRITE_BATCH_BYTES", 1)
    assert [len(b) for b in write_batches(sizes)] == [1] * 11  # a group past the bound: a batch of its own
    monkeypatch.setattr(group_writer, "WRITE_BATCH_BYTES", 1 << 30)
    monkeypatch.setattr(group_writer, "WRITE_BATCH_GROUPS", 4)
    assert [len(b) for b in write_batches(sizes)] == [4, 4, 3]
    assert write_batches([]) == []


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["written", "swapped", "old-deleted", "renamed"])
def test_a_crash_at_each_step_of_a_batch_swap_recovers_before_or_after(tmp_path: Path, step: str) -> None:
    """A batch of several groups swapped in by one replacement: a crash after each step, then a
    load, leaves the log exactly as before the batch or exactly as after it."""
    reference = build(tmp_path / "ref-0")
    before = read_log(reference)
    clean(reference)
    after = read_log(reference)
    reference.close()
    log = build(tmp_path / "t-0")

    def hook(at: str) -> None:
        if at == step:
            raise Crash(at)

    c = Cleaner(0, SipHashOffsetMap(slots=1 << 12), clock_ms=lambda: START_MS, crash_hook=hook)
    with pytest.raises(Crash):
        c.clean(LogToClean(log, 0, log.active_segment.base_offset))
    log.close_handlers()
    again = Log(tmp_path / "t-0", CONFIG, clock_ms=lambda: START_MS, had_clean_shutdown=False, recovery_point=0)
    assert read_log(again) in (before, after)
    assert read_log(again) == (before if step == "written" else after)
    again.close()


@pytest.mark.parametrize("deleted_gone", [False, True])
def test_renames_of_step_4_lost_in_a_crash_are_completed_on_load(tmp_path: Path, deleted_gone: bool) -> None:
    """The renames a group no longer fsyncs itself (replace.py, step 4): a crash that loses them
    leaves the cleaned segments under their .swap names; the loader puts them into place."""
    log = build(tmp_path / "t-0")
    clean(log)
    cleaned = read_log(log)
    active = log.active_segment.base_offset
    log.close()
    for p in sorted(log.dir.iterdir()):
        if p.name.endswith(".deleted"):
            if deleted_gone:
                p.unlink()
        elif p.suffix in (".log", ".index", ".timeindex", ".txnindex") and int(p.name.split(".")[0]) < active:
            p.rename(p.with_name(p.name + ".swap"))
    assert any(p.name.endswith(".swap") for p in log.dir.iterdir())
    again = Log(tmp_path / "t-0", CONFIG, clock_ms=lambda: START_MS, had_clean_shutdown=False, recovery_point=0)
    assert read_log(again) == cleaned
    assert not [p for p in again.dir.iterdir() if p.name.endswith(".swap")]
    again.close()


def _replaced(log: Log) -> list[Path]:
    return [p for p in log.dir.iterdir() if p.name.endswith(".deleted")]


def test_replaced_files_wait_for_their_delay_while_the_command_runs(tmp_path: Path) -> None:
    """`logkeeper clean` keeps file.delete.delay.ms during its rounds (an unlink there slows the
    round's file creations) and removes what is due while it still runs."""
    now = [START_MS]
    log = build(tmp_path / "t-0", clock_ms=lambda: now[0])
    sweeper = ReplacedFiles({TopicPartition("t", 0): log})
    sweeper.remove()
    clean(log)  # leaves its old segments renamed .deleted
    time.sleep(3 * ReplacedFiles.SWEEP_INTERVAL_S)  # three sweeps, with the clock stopped
    assert _replaced(log)
    now[0] += CONFIG.file_delete_delay_ms
    deadline = time.monotonic() + 10
    while _replaced(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _replaced(log)
    sweeper.wait()
    log.close()


def test_replaced_files_all_go_when_the_command_ends(tmp_path: Path) -> None:
    log = build(tmp_path / "t-0")
    sweeper = ReplacedFiles({TopicPartition("t", 0): log})
    sweeper.remove()
    clean(log)
    assert _replaced(log)
    sweeper.wait()
    assert not _replaced(log)
    log.close()
