"""Loading a partition directory, mirroring the scenarios of Kafka's LogLoaderTest, plus a crash
after each numbered step of a segment replacement (replace.py)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from logkeeper.errors import CorruptRecordError
from logkeeper.log import names
from logkeeper.log.file_records import WouldBlock
from logkeeper.log.log import Log
from logkeeper.log.segment import AppendedBatch, LogSegment
from logkeeper.records.batch import BatchHeader
from logkeeper.records.reader import read_records
from logkeeper.tools.verify import verify_path
from tests.cleaner_logs import TxnProducer
from tests.helpers import batch, log_records, make_log, offsets_of

PROPS = {"segment.bytes": 1000, "index.interval.bytes": 100}


def filled_log(tmp_path: Path, batches: int = 20, n: int = 3) -> Log:
    log = make_log(tmp_path, PROPS)
    for _ in range(batches):
        log.append(batch(n))
    return log


def reopen(tmp_path: Path, **kw: object) -> Log:
    return make_log(tmp_path, PROPS, **kw)  # type: ignore[arg-type]


def files(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir())


def test_recovery_after_crash_restores_log_end(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.close()
    again = reopen(tmp_path, recovery_point=0, had_clean_shutdown=False)
    assert again.log_end_offset == end
    assert len(again.load_report.recovered_segments) == len(again.segments)
    assert offsets_of(log_records(again)) == list(range(end))
    again.close()


def test_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.flush()
    log.close()
    again = reopen(tmp_path, recovery_point=end, had_clean_shutdown=True)
    assert again.load_report.recovered_segments == []
    assert again.recovery_point == end == again.log_end_offset
    again.close()


def test_unclean_shutdown_recovers_from_the_recovery_point_segment(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    bases = [s.base_offset for s in log.segments]
    log.close()
    again = reopen(tmp_path, recovery_point=bases[2] + 1, had_clean_shutdown=False)
    recovered = [names.offset_from_file_name(n) for n in again.load_report.recovered_segments]
    assert recovered == bases[2:]
    assert again.recovery_point == bases[2] + 1  # not advanced until flushed
    again.close()


@pytest.mark.parametrize("which", ["index", "timeindex", "both"])
def test_missing_indexes_are_rebuilt_identically(tmp_path: Path, which: str) -> None:
    log = filled_log(tmp_path)
    log.close()
    d = tmp_path / "topic-0"
    originals = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    for p in list(d.iterdir()):
        if (which in ("index", "both") and p.suffix == ".index") or (
                which in ("timeindex", "both") and p.suffix == ".timeindex"):
            p.unlink()
    again = reopen(tmp_path, recovery_point=log.log_end_offset)
    assert again.load_report.rebuilt_indexes
    again.close()
    rebuilt = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert rebuilt == originals


def test_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    log.close()
    d = tmp_path / "topic-0"
    first_index = sorted(d.glob("*.index"))[0]
    good = first_index.read_bytes()
    first_index.write_bytes(good + b"\x00\x01\x02")  # not a multiple of 8
    again = reopen(tmp_path, recovery_point=log.log_end_offset)
    assert first_index.name.replace(".index", ".log") in again.load_report.rebuilt_indexes
    again.close()
    assert first_index.read_bytes() == good


def _opened(seg: LogSegment) -> tuple[bool, bool]:
    return seg._offset_index.is_open, seg._time_index.is_open


def test_only_the_last_segments_indexes_open_at_load(tmp_path: Path) -> None:
    """As Kafka's LazyIndex: a clean load opens the last segment's indexes (checked whole), and
    the others' when a read first needs them; they answer as they did before."""
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.close()
    indexes = {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix in (".index", ".timeindex")}
    again = reopen(tmp_path, recovery_point=end)
    *old, last = again.segments.values()
    assert len(old) >= 3
    assert [_opened(s) for s in old] == [(False, False)] * len(old)
    assert _opened(last) == (True, True)
    middle = old[len(old) // 2]
    offset = middle.base_offset + 4  # inside the segment: the offset index is looked up
    fetched = again.read(offset, 10_000)
    assert _opened(middle)[0]
    assert [r.offset for r in read_records(fetched.records)][:3] == [offset - offset % 3 + i for i in range(3)]
    assert _opened(old[0]) == (False, False)
    again.close()
    # opened or not, every index is closed as it was found
    assert {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix in (".index", ".timeindex")} == indexes


def test_a_read_from_the_page_cache_alone_leaves_opening_an_index_to_a_thread(tmp_path: Path) -> None:
    """The Kafka listener reads on its event loop with ``cached_only`` and hands a read that would
    wait for the disk to a thread (WouldBlock). Opening an index not opened yet maps its file and
    reads its pages (and rebuilds a damaged one from the log): that read goes to the thread,
    which opens it; the next answers from the event loop."""
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.close()
    again = reopen(tmp_path, recovery_point=end)
    middle = again.segments.values()[2]
    offset = middle.base_offset + 4
    with pytest.raises(WouldBlock, match="index"):
        again.read(offset, 10_000, cached_only=True)
    assert _opened(middle) == (False, False)
    where = again.read(offset, 10_000)  # on the thread
    assert _opened(middle)[0]
    assert again.read(offset, 10_000, cached_only=True).records == where.records
    again.close()


def test_segments_never_opened_are_renamed_and_deleted(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.close()
    again = make_log(tmp_path, {**PROPS, "file.delete.delay.ms": 0}, recovery_point=end)
    doomed = again.segments.values()[:2]
    again.delete_segments(doomed)
    assert [_opened(s) for s in doomed] == [(False, False)] * 2
    left = files(again.dir)
    for seg in doomed:
        assert not any(name.startswith(names.filename_prefix(seg.base_offset)) for name in left)
    again.close()


def _damaged_old_segment(tmp_path: Path, suffix: str, damage: bytes) -> tuple[Log, LogSegment, Path, bytes]:
    """A clean shutdown, then an old segment's index file overwritten with ``damage``; the log
    reopened (that index is not opened by the load)."""
    log = filled_log(tmp_path)
    end = log.log_end_offset
    first = log.segments.values()[1]
    log.close()
    index = names.segment_file(first.directory, first.base_offset, suffix)
    good = index.read_bytes()
    index.write_bytes(damage)
    again = reopen(tmp_path, recovery_point=end)
    assert again.load_report.rebuilt_indexes == []
    return again, again.segments.values()[1], index, good


def test_a_damaged_offset_index_of_an_old_segment_is_rebuilt_by_the_read_that_opens_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Below the recovery point after a clean shutdown only an index's file is checked at load
    (there, whole entries); its entries are checked when a read opens it. One that fails is
    rebuilt from the segment's log there and then, as the loader rebuilds a damaged index: the
    read answers what it would have, and the file is the one appends wrote."""
    again, seg, index, good = _damaged_old_segment(
        tmp_path, names.INDEX_SUFFIX, b"\xff\xff\xff\xff\x00\x00\x00\x00" * 2)  # offsets below the base
    offset = seg.base_offset + 4
    with caplog.at_level("WARNING", logger="logkeeper.index.lazy_index"):
        fetched = again.read(offset, 10_000)
    assert [r.offset for r in read_records(fetched.records)][:3] == [offset - offset % 3 + i for i in range(3)]
    assert index.name in caplog.text and "rebuilt" in caplog.text
    assert index.read_bytes() == good  # rebuilt, and on disk at once
    again.close()
    assert index.read_bytes() == good


def test_a_damaged_time_index_of_an_old_segment_is_rebuilt_by_the_lookup_that_opens_it(tmp_path: Path) -> None:
    again, seg, index, good = _damaged_old_segment(
        tmp_path, names.TIME_INDEX_SUFFIX,
        (1 << 40).to_bytes(8, "big") + (0).to_bytes(4, "big") + (0).to_bytes(12, "big"))  # time going back
    assert seg.max_timestamp_so_far == int.from_bytes(good[-12:-4], "big")  # its last entry
    assert index.read_bytes() == good
    again.close()


def test_an_old_index_is_not_rebuilt_from_a_damaged_log(tmp_path: Path) -> None:
    """The rebuild reads the segment's batches; where they stop early the log itself is damaged,
    and the read fails naming the log file and the position, instead of serving a segment whose
    index covers part of it."""
    again, seg, _, _ = _damaged_old_segment(
        tmp_path, names.INDEX_SUFFIX, b"\xff\xff\xff\xff\x00\x00\x00\x00" * 2)
    data = seg.log.path.read_bytes()
    second = 12 + int.from_bytes(data[8:12], "big")  # where the second batch starts
    with open(seg.log.path, "r+b") as f:
        f.seek(second + 16)  # its magic byte
        f.write(b"\x07")
    with pytest.raises(CorruptRecordError, match=re.escape(seg.log.path.name) + f".*position {second}"):
        again.read(seg.base_offset + 4, 10_000)
    again.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_torn_transaction_index_is_rebuilt(tmp_path: Path, clean: bool) -> None:
    """A power cut can leave part of an aborted transaction's index entry (a size that is no
    multiple of 34). The index is read when its segment is opened, and that read raised before
    the loader's sanity check could rebuild it: the log did not load at all (found by reading the
    loader for the power-cut test's transactions). Now it is rebuilt from the log, as the other
    indexes are, with or without a clean shutdown."""
    log = make_log(tmp_path)
    txn = TxnProducer(log, 7)
    txn.append([0, 1])
    txn.abort()
    log.append(batch(1, start=3))
    log.flush()
    txn_index = log.active_segment.txn_index.path
    good = txn_index.read_bytes()
    assert len(good) == 34
    log.close()
    txn_index.write_bytes(good + good[:11])  # a torn second entry
    again = reopen(tmp_path, recovery_point=log.log_end_offset, had_clean_shutdown=clean)
    assert again.load_report.rebuilt_indexes == [names.log_file(again.dir, 0).name]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in again.active_segment.txn_index.entries] == \
        [(7, 0, 2)]
    assert again.log_end_offset == 4
    again.close()
    assert txn_index.read_bytes() == good


def test_the_load_looks_for_a_transaction_index_only_where_the_listing_has_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Most segments have no .txnindex, and trying to open each one was a good part of loading
    a segment: the loader takes their absence from the directory's listing. A segment that has
    one still loads its aborted transactions (and a clean load no longer tries the others)."""
    log = make_log(tmp_path, PROPS)
    for _ in range(10):
        log.append(batch(3))
    txn = TxnProducer(log, 7)
    txn.append([0, 1])
    txn.abort()
    for _ in range(10):
        log.append(batch(3))
    with_txn = [s.base_offset for s in log.segments.values() if s.txn_index.path.exists()]
    assert len(with_txn) == 1 and len(log.segments) > 3
    end = log.log_end_offset
    log.flush()
    log.close()
    tried: list[str] = []
    real_open = os.open

    def counting_open(path: object, *args: object, **kw: object) -> int:
        if str(path).endswith(names.TXN_INDEX_SUFFIX):
            tried.append(Path(str(path)).name)
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting_open)
    again = reopen(tmp_path, recovery_point=end, had_clean_shutdown=True)
    assert tried == [names.filename_prefix(with_txn[0]) + names.TXN_INDEX_SUFFIX]
    aborted = [(t.producer_id, t.first_offset) for s in again.segments.values() for t in s.txn_index.entries]
    assert aborted == [(7, 30)]
    again.close()


def test_bogus_index_files_are_removed(tmp_path: Path) -> None:
    log = filled_log(tmp_path, batches=2)
    log.close()
    d = tmp_path / "topic-0"
    (d / "00000000000000000500.index").write_bytes(b"\x00" * 16)
    (d / "00000000000000000500.timeindex").write_bytes(b"\x00" * 24)
    again = reopen(tmp_path)
    assert "00000000000000000500.index" in again.load_report.deleted_files
    assert not (d / "00000000000000000500.index").exists()
    assert not (d / "00000000000000000500.timeindex").exists()
    again.close()


def test_obsolete_temp_files_are_deleted(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    log.close()
    d = tmp_path / "topic-0"
    first = sorted(d.glob("*.log"))[0]
    shutil.copy(first, d / (first.name + names.DELETED_SUFFIX))
    shutil.copy(first, d / ("00000000000000999999.log" + names.CLEANED_SUFFIX))
    again = reopen(tmp_path)
    assert not any(n.endswith((".deleted", ".cleaned", ".swap")) for n in files(d))
    assert again.log_end_offset == log.log_end_offset
    again.close()


def test_corrupt_log_tail_is_cut(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    end = log.log_end_offset
    log.close()
    last = sorted((tmp_path / "topic-0").glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x63garbage-bytes-at-the-tail")
    again = reopen(tmp_path, recovery_point=0, had_clean_shutdown=False)
    assert again.load_report.truncated and again.load_report.truncated[0][0] == last.name
    assert again.log_end_offset == end
    again.close()
    assert verify_path(tmp_path / "topic-0").ok


def test_segments_after_a_cut_segment_are_deleted(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    bases = [s.base_offset for s in log.segments]
    log.close()
    victim = tmp_path / "topic-0" / f"{bases[1]:020d}.log"
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    again = reopen(tmp_path, recovery_point=0, had_clean_shutdown=False)
    assert [s.base_offset for s in again.segments] == bases[:2]
    assert again.load_report.deleted_segments
    remaining = offsets_of(log_records(again))
    assert remaining == list(range(again.log_end_offset))
    again.close()


def test_log_start_beyond_end_deletes_segments(tmp_path: Path) -> None:
    log = filled_log(tmp_path, batches=3)
    log.close()
    again = reopen(tmp_path, log_start_offset=100)
    assert [s.base_offset for s in again.segments] == [100]
    assert again.log_start_offset == again.log_end_offset == 100
    again.close()


def test_over_compacted_segment_is_split(tmp_path: Path) -> None:
    """A segment written by an old cleaner holding offsets beyond base + 2^31 - 1 (KAFKA-6264)."""
    d = tmp_path / "topic-0"
    d.mkdir()
    far = (1 << 31) + 100
    parts = [batch(2, start=0), batch(2, start=5), batch(2, start=far), batch(2, start=far + 10)]
    (d / "00000000000000000000.log").write_bytes(b"".join(parts))
    log = reopen(tmp_path, recovery_point=0, had_clean_shutdown=False)
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.load_report.split_segments == ["00000000000000000000.log"]
    assert offsets_of(log_records(log)) == [0, 1, 5, 6, far, far + 1, far + 10, far + 11]
    assert log.log_end_offset == far + 12
    log.close()
    assert verify_path(d).ok
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in files(d))


# --------------------------------------------------------------------------- replacement crash steps
STEPS = ["written", "swapped", "old-deleted", "renamed", None]


class Crash(Exception):
    pass


def compact_first_segments(log: Log, crash_at: str | None) -> list[int]:
    """Replace the first two segments by one holding every other batch of theirs."""
    old = log.segments.values()[:2]
    kept_offsets = []
    new = log.new_cleaned_segment(old[0].base_offset)
    for seg in old:
        raw = seg.log.read(0, seg.size_in_bytes)
        pos, i = 0, 0
        while pos < len(raw):
            h = BatchHeader.parse(raw, pos)
            if i % 2 == 0:
                new.append([AppendedBatch(h.last_offset, h.max_timestamp, h.size)], raw[pos:pos + h.size])
                kept_offsets += [r.offset for r in read_records(raw[pos:pos + h.size])]
            pos += h.size
            i += 1
    new.flush()

    def hook(step: str) -> None:
        if step == crash_at:
            raise Crash(step)

    try:
        log.replace_segments([new], old, crash_hook=hook)
    except Crash:
        pass
    return kept_offsets


@pytest.mark.parametrize("crash_at", STEPS)
def test_crash_at_each_replacement_step(tmp_path: Path, crash_at: str | None) -> None:
    log = filled_log(tmp_path)
    before = offsets_of(log_records(log))
    second_base = log.segments.values()[2].base_offset
    kept = compact_first_segments(log, crash_at)
    after = kept + [o for o in before if o >= second_base]
    log.close()
    for seg in log.segments.values():
        seg.close_handlers()
    again = reopen(tmp_path, recovery_point=0, had_clean_shutdown=False)
    got = offsets_of(log_records(again))
    # steps 1 and 2 roll back (the .cleaned output is discarded); from step 3 on the swap completes
    expected = before if crash_at in ("written",) else after
    assert got == expected, crash_at
    again.close()
    d = tmp_path / "topic-0"
    assert not any(n.endswith((".cleaned", ".swap")) for n in files(d))
    assert verify_path(d).ok
