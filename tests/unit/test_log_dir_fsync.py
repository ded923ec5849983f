"""The partition directory is fsynced after every change of its entries that a promise relies on.

A file's fsync makes its bytes durable, not its name: after a power cut, a segment created by a
roll (or the first segment of a log) whose directory was never fsynced is gone with its fsynced
data, and a rename to ``.deleted`` not synced comes back undone. ``fsync_dir`` is replaced by a
recorder that notes, at each call, which directory and what it held then, and whether the
recovery point had moved yet. tests/crash/test_power_cut.py checks the same end to end on a file
system that forgets what was not fsynced.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper.log import log as log_module
from logkeeper.log import names
from logkeeper.log.log import Log
from logkeeper.log.retention import delete_old_segments
from tests.cleaner_logs import TxnProducer
from tests.helpers import ManualClock, batch, make_log


class DirSyncs:
    """Calls of ``fsync_dir``: (directory, its file names then, the log's recovery point then)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, set[str], int]] = []
        self.log: Log | None = None

    def __call__(self, directory: Path) -> None:
        rp = self.log.recovery_point if self.log is not None and hasattr(self.log, "recovery_point") else -1
        self.calls.append((Path(directory), {p.name for p in Path(directory).iterdir()}, rp))

    def clear(self) -> None:
        self.calls.clear()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> DirSyncs:
    recorder = DirSyncs()
    monkeypatch.setattr(log_module, "fsync_dir", recorder)
    return recorder


def test_first_flush_of_a_new_log_syncs_its_directory_before_the_recovery_point_moves(
        tmp_path: Path, syncs: DirSyncs) -> None:
    lg = make_log(tmp_path)
    syncs.log = lg
    lg.append(batch(3))
    lg.flush()
    assert [(d, rp) for d, _names, rp in syncs.calls] == [(lg.dir, 0)]
    assert names.log_file(lg.dir, 0).name in syncs.calls[0][1]
    assert lg.recovery_point == 3
    syncs.clear()
    lg.append(batch(2))
    lg.flush()
    assert syncs.calls == []  # nothing created since: no more directory fsyncs on the flush path


def test_the_first_aborted_transaction_of_a_segment_makes_its_index_file_durable_before_the_recovery_point_moves(
        tmp_path: Path, syncs: DirSyncs) -> None:
    """An ABORT marker's entry creates the segment's transaction index file. Recovery trusts a
    segment below the recovery point with the index files it finds: had the power cut taken the new
    file's name, a read_committed consumer would read the aborted records (found by writing this
    check: the flush fsynced the file, never the directory holding its name)."""
    lg = make_log(tmp_path)
    syncs.log = lg
    lg.append(batch(3))
    lg.flush()
    syncs.clear()
    txn = TxnProducer(lg, 7)
    txn.append([0, 1])
    txn.abort()
    txn_index = lg.active_segment.txn_index.path
    assert txn_index.exists()
    lg.flush()
    assert [(d, txn_index.name in files, rp) for d, files, rp in syncs.calls] == [(lg.dir, True, 3)]
    assert lg.recovery_point == 6
    syncs.clear()  # a second aborted transaction appends to the file: its name is durable already
    txn.append([2, 3])
    txn.abort()
    lg.flush()
    assert syncs.calls == []


def test_a_load_that_changed_files_syncs_the_directory_after_the_transaction_indexes_it_rebuilt(
        tmp_path: Path, syncs: DirSyncs) -> None:
    """Recovery empties a segment's transaction index and the producer state's rebuild writes its
    aborted transactions again, creating the file when a power cut had taken it. The load's own
    directory fsync (here for a torn tail it cut) came before that rebuild, and cleared the
    flag that has the first flush fsync the directory: the file's name was never made durable."""
    lg = make_log(tmp_path)
    txn = TxnProducer(lg, 7)
    txn.append([0, 1])
    txn.abort()
    lg.flush()
    txn_index = lg.active_segment.txn_index.path
    segment_log = lg.active_segment.log.path
    lg.close()
    txn_index.unlink()  # its name lost in a cut
    with open(segment_log, "ab") as f:
        f.write(b"\x00" * 7)  # a torn tail: the load truncates it (a change it fsyncs the directory for)
    syncs.clear()
    again = make_log(tmp_path, had_clean_shutdown=False)  # recovers from 0, the default recovery point
    syncs.log = again
    assert again.load_report.truncated and txn_index.exists()
    again.flush()
    assert any(d == again.dir and txn_index.name in files for d, files, _rp in syncs.calls)


def test_roll_syncs_the_directory_with_the_new_segment_in_it(tmp_path: Path, syncs: DirSyncs) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.flush()
    syncs.clear()
    new = lg.roll()
    assert len(syncs.calls) == 1
    directory, files, _rp = syncs.calls[0]
    assert directory == lg.dir
    assert {new.log.path.name, new.offset_index.path.name, new.time_index.path.name} <= files


def test_roll_after_a_full_flush_makes_the_old_segments_final_indexes_durable(
        tmp_path: Path, syncs: DirSyncs, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.flush()  # recovery point == log end: recovery will trust the old segment as it is on disk
    old = lg.active_segment
    flushed: list[str] = []
    monkeypatch.setattr(old.time_index, "flush", lambda: flushed.append("timeindex"))
    lg.roll()
    assert flushed == ["timeindex"]


def test_retention_syncs_the_directory_after_the_deleted_renames_and_after_the_unlinks(
        tmp_path: Path, syncs: DirSyncs) -> None:
    clock = ManualClock()
    lg = make_log(tmp_path, {"segment.bytes": 300, "retention.bytes": 10, "file.delete.delay.ms": 1000},
                  clock=clock)
    for k in range(4):
        lg.append(batch(3, start=3 * k))
    doomed = [s.base_offset for s in lg.segments.values()][:-1]
    assert doomed
    syncs.clear()
    result = delete_old_segments(lg, clock())
    assert result.by_size == len(doomed)
    assert len(syncs.calls) == 1
    _d, files, _rp = syncs.calls[0]
    for base in doomed:
        assert names.log_file(lg.dir, base).name + names.DELETED_SUFFIX in files
        assert names.log_file(lg.dir, base).name not in files
    syncs.clear()
    clock.advance(1000)
    assert lg.delete_expired_files() == len(doomed)
    assert len(syncs.calls) == 1
    assert not any(name.endswith(names.DELETED_SUFFIX) for name in syncs.calls[0][1])


def test_truncation_syncs_the_directory_after_removing_segments(tmp_path: Path, syncs: DirSyncs) -> None:
    lg = make_log(tmp_path, {"segment.bytes": 300})
    for k in range(4):
        lg.append(batch(3, start=3 * k))
    later = [s.base_offset for s in lg.segments.values()][1:]
    syncs.clear()
    lg.truncate_to(later[0])
    assert len(syncs.calls) == 1
    files = syncs.calls[0][1]
    assert not any(names.log_file(lg.dir, base).name in files for base in later[1:])


def test_a_load_that_changed_files_syncs_the_directory(tmp_path: Path, syncs: DirSyncs) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.flush()
    lg.close()
    leftover = names.log_file(lg.dir, 100).with_name(names.log_file(lg.dir, 100).name + names.DELETED_SUFFIX)
    leftover.write_bytes(b"")
    syncs.clear()
    again = make_log(tmp_path)
    assert again.load_report.deleted_files == [leftover.name]
    assert [d for d, _f, _rp in syncs.calls] == [again.dir]
    assert leftover.name not in syncs.calls[0][1]


def test_a_clean_close_fsyncs_the_active_indexes_after_their_final_entry_and_trim(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shutdown flushes, then closing appends the final time index entry and trims both
    indexes; the clean-shutdown marker written next tells the next start to trust them, so they
    must be on disk before it (found by the power-cut harness: the loader had to rebuild them)."""
    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.flush()
    active = lg.active_segment
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.append((path.name, path.stat().st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    lg.close(clean_shutdown=True)
    sizes = dict(synced)
    assert sizes[active.offset_index.path.name] == active.offset_index.path.stat().st_size  # trimmed, then synced
    assert sizes[active.time_index.path.name] == active.time_index.path.stat().st_size == 12  # its final entry


def test_a_plain_close_writes_no_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(3))
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    lg.close()
    assert calls == []
