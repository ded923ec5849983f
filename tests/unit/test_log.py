"""Log: append with validation and offset assignment, rolls, reads, flush, truncation."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import (
    CrcMismatchError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from logkeeper.log.file_records import WouldBlock
from logkeeper.log.log import Log
from logkeeper.records.batch import TimestampType, crc32c
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from logkeeper.records.reader import read_records
from tests.helpers import NOW_MS, ManualClock, batch, log_records, make_log, offsets_of


def log_of_batches(tmp_path: Path, count: int, per_segment: int, *, records: int = 5,
                   props: dict[str, object] | None = None, clock: ManualClock | None = None) -> tuple[Log, bytes]:
    """A log of ``count`` appends of one batch of ``records`` records, ``per_segment`` batches to a
    segment (segment.bytes is that many batches' size; ``props`` add to it); the log and the batch."""
    one = batch(records)
    log = make_log(tmp_path, {"segment.bytes": len(one) * per_segment, **(props or {})}, clock=clock)
    for _ in range(count):
        log.append(one)
    return log, one


def test_append_assigns_consecutive_offsets(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    infos = [log.append(batch(3)) for _ in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert offsets_of(log_records(log)) == list(range(12))
    log.close()


@pytest.mark.parametrize("codec", list(Codec))
def test_append_and_read_back_every_codec(tmp_path: Path, codec: Codec) -> None:
    log = make_log(tmp_path)
    recs = [Record(i, NOW_MS + i, b"key%d" % i, b"value" * i, (("h", b"1"), ("n", None))) for i in range(20)]
    log.append(build_batch(recs, codec=codec))
    log.append(build_batch(recs, codec=codec))
    fetched = log.read(20, 1 << 20)
    got = read_records(fetched.records)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (20 + r.offset, r.key, r.value, r.headers) for r in recs]
    log.close()


def test_multi_batch_request_is_assigned_in_order(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    info = log.append(batch(2) + batch(3) + batch(1))
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (0, 5, 3, 6)
    assert offsets_of(log_records(log)) == list(range(6))
    log.close()


def test_log_append_time_sets_max_timestamp_and_keeps_crc_valid(tmp_path: Path) -> None:
    clock = ManualClock(NOW_MS + 5000)
    log = make_log(tmp_path, {"message.timestamp.type": "LogAppendTime"}, clock=clock)
    info = log.append(batch(3))
    assert info.log_append_time_ms == NOW_MS + 5000
    raw = log.read(0, 4096).records
    assert raw[22] & 0x08  # timestamp type bit (low byte of the int16 attributes)
    assert int.from_bytes(raw[17:21], "big") == crc32c(raw[21:])
    assert [r.timestamp for r in read_records(raw)] == [NOW_MS + 5000] * 3
    log.close()


def test_max_message_bytes_rejects_and_writes_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path, {"max.message.bytes": 200})
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        log.append(batch(10))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    log.close()


@pytest.mark.parametrize(("delta", "ok"), [(-10_000, False), (0, True), (3_600_000, True), (3_700_000, False)])
def test_create_time_bounds(tmp_path: Path, delta: int, ok: bool) -> None:
    log = make_log(tmp_path, {"message.timestamp.before.max.ms": 5000})
    data = batch(1, ts=NOW_MS + delta)
    if ok:
        log.append(data)
    else:
        with pytest.raises(InvalidTimestampError, match="timestamp"):
            log.append(data)
        assert log.size_in_bytes == 0
    log.close()


def test_compacted_topic_rejects_null_keys(tmp_path: Path) -> None:
    log = make_log(tmp_path, {"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="without a key"):
        log.append(build_batch([Record(0, NOW_MS, None, b"v")]))
    log.append(build_batch([Record(0, NOW_MS, b"k", None)]))  # a tombstone is fine
    log.close()


def test_client_control_batch_and_bad_crc_rejected(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    marker = build_marker_batch(ControlType.COMMIT, offset=0, timestamp=NOW_MS, producer_id=1, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control"):
        log.append(marker)
    corrupt = bytearray(batch(2))
    corrupt[-3] ^= 0x01
    with pytest.raises(CrcMismatchError):
        log.append(bytes(corrupt))
    assert log.log_end_offset == 0
    log.close()


def test_roll_on_segment_bytes(tmp_path: Path) -> None:
    log, _ = log_of_batches(tmp_path, 7, 3)
    assert [s.base_offset for s in log.segments] == [0, 15, 30]
    assert offsets_of(log_records(log)) == list(range(35))
    log.close()


def test_roll_on_segment_ms_with_clock(tmp_path: Path) -> None:
    clock = ManualClock()
    log = make_log(tmp_path, {"segment.ms": 1000}, clock=clock)
    log.append(batch(1, ts=clock()))
    clock.advance(500)
    log.append(batch(1, ts=clock()))
    assert len(log.segments) == 1
    clock.advance(600)
    log.append(batch(1, ts=clock()))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_offset_index_full(tmp_path: Path) -> None:
    log = make_log(tmp_path, {"segment.index.bytes": 8 * 3, "index.interval.bytes": 1})
    for _ in range(10):
        log.append(batch(1))
    assert len(log.segments) > 1
    assert all(s.offset_index.entries <= 3 for s in log.segments)
    assert offsets_of(log_records(log)) == list(range(10))
    log.close()


def test_roll_on_relative_offset_overflow(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(2, start=0), assign_offsets=False)
    far = (1 << 31) + 10
    log.append(batch(2, start=far), assign_offsets=False)
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 2
    log.close()


def test_appends_with_offsets_must_not_go_back(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(3, start=10), assign_offsets=False)
    with pytest.raises(InvalidRecordError, match="below"):
        log.append(batch(3, start=11), assign_offsets=False)
    log.close()


def test_flush_moves_recovery_point(tmp_path: Path) -> None:
    log = make_log(tmp_path, {"segment.bytes": 400})
    for _ in range(6):
        log.append(batch(2))
    assert log.recovery_point == 0
    log.flush(5)
    assert log.recovery_point == 5
    log.flush()
    assert log.recovery_point == log.log_end_offset == 12
    log.close()


def test_flush_messages_triggers_flush(tmp_path: Path) -> None:
    log = make_log(tmp_path, {"flush.messages": 4})
    log.append(batch(3))
    assert log.recovery_point == 0
    log.append(batch(3))
    assert log.recovery_point == 6
    log.close()


def test_read_across_segments_and_ranges(tmp_path: Path) -> None:
    log, _ = log_of_batches(tmp_path, 6, 2)
    for start in range(30):
        got = read_records(log.read(start, 1).records)
        assert got[0].offset <= start <= got[-1].offset
    assert log.read(30, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(31, 100)
    everything = read_records(log.read(0, 1 << 20).records)
    assert offsets_of(everything) == list(range(10))  # one segment at a time, as Kafka
    capped = read_records(log.read(0, 1 << 20, max_offset=5).records)
    assert offsets_of(capped) == list(range(5))
    log.close()


def test_a_read_from_the_page_cache_alone_finds_its_bound_there_too(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A read_committed fetch on the Kafka listener's event loop (``cached_only``) also searches
    the position of its bound (the last stable offset) from the page cache only: a search that
    would wait for the disk is WouldBlock, so the fetch goes to a thread, never stalls the loop."""
    log, one = log_of_batches(tmp_path, 6, 6, props={"index.interval.bytes": 1})  # every batch indexed
    bound_at = 3 * len(one)  # where the search for offset 20 starts: offset 19's index entry, the 4th batch
    assert offsets_of(read_records(log.read(0, 1 << 20, max_offset=20, cached_only=True).records)) == \
        list(range(20))
    real = os.preadv

    def cold_from_bound(fd: int, buffers: list[bytearray], offset: int, flags: int = 0) -> int:
        if flags & os.RWF_NOWAIT and offset >= bound_at:
            raise BlockingIOError(errno.EAGAIN, "not cached")
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", cold_from_bound)
    with pytest.raises(WouldBlock):
        log.read(0, 1 << 20, max_offset=20, cached_only=True)
    assert offsets_of(read_records(log.read(0, 1 << 20, max_offset=20).records)) == list(range(20))
    log.close()


def test_truncate_to_middle_and_append_again(tmp_path: Path) -> None:
    log, one = log_of_batches(tmp_path, 6, 2)
    assert log.truncate_to(17)  # inside a batch: the whole batch 15..19 goes
    assert log.log_end_offset == 15
    assert [s.base_offset for s in log.segments] == [0, 10]
    log.append(one)
    assert offsets_of(log_records(log)) == list(range(20))
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and [s.base_offset for s in log.segments] == [0]
    log.close()


def test_delete_segments_below_log_start_offset(tmp_path: Path) -> None:
    log, _ = log_of_batches(tmp_path, 6, 2, props={"file.delete.delay.ms": 0})
    assert log.maybe_increment_log_start_offset(22)
    deleted = log.delete_segments_below_start()
    assert [s.base_offset for s in deleted] == [0, 10]
    assert [s.base_offset for s in log.segments] == [20]
    assert log.log_start_offset == 22
    with pytest.raises(OffsetOutOfRangeError):
        log.read(19, 100)
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    log.close()


def test_delayed_file_deletion(tmp_path: Path) -> None:
    clock = ManualClock()
    log, _ = log_of_batches(tmp_path, 3, 1, props={"file.delete.delay.ms": 1000}, clock=clock)
    log.maybe_increment_log_start_offset(10)
    log.delete_segments_below_start()
    assert sorted(p.name for p in log.dir.iterdir() if p.name.endswith(".deleted"))
    clock.advance(999)
    assert log.delete_expired_files() == 0
    clock.advance(1)
    assert log.delete_expired_files() == 2
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    log.close()


def test_all_pending_files_deleted_now_whatever_the_delay(tmp_path: Path) -> None:
    # logkeeper clean has no readers to wait for: it removes replaced segments after each round
    log, _ = log_of_batches(tmp_path, 3, 1, props={"file.delete.delay.ms": 60_000}, clock=ManualClock())
    log.maybe_increment_log_start_offset(10)
    log.delete_segments_below_start()
    assert log.delete_expired_files() == 0
    assert log.delete_expired_files(all_now=True) == 2
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    assert log.delete_expired_files(all_now=True) == 0
    log.close()


def test_due_files_unlinked_in_parallel_all_tried_when_one_fails(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from logkeeper.fileio import FILE_CALL_THREADS
    from logkeeper.log.segment import LogSegment

    count = FILE_CALL_THREADS + 4  # more than the threads: the parallel path
    log, _ = log_of_batches(tmp_path, count + 1, 1, props={"file.delete.delay.ms": 60_000}, clock=ManualClock())
    log.maybe_increment_log_start_offset(count * 5)
    log.delete_segments_below_start()
    replaced = sorted(p for p in log.dir.iterdir() if p.name.endswith(".log.deleted"))
    assert len(replaced) == count
    failing = replaced[1].name
    real = LogSegment.delete_if_exists

    def delete(segment: LogSegment) -> None:
        if segment.log.path.name == failing:
            raise OSError(5, "Input/output error", failing)
        real(segment)

    monkeypatch.setattr(LogSegment, "delete_if_exists", delete)
    with pytest.raises(OSError, match="Input/output error"):
        log.delete_expired_files(all_now=True)
    assert [p.name for p in log.dir.iterdir() if p.name.endswith(".log.deleted")] == [failing]
    log.close()


def test_aborted_transaction_goes_to_txn_index_and_lso(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(2))
    txn = build_batch([Record(0, NOW_MS, b"a", b"1"), Record(1, NOW_MS, b"b", b"2")], producer_id=7,
                      producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(txn)
    assert log.last_stable_offset == 2
    marker = build_marker_batch(ControlType.ABORT, offset=4, timestamp=NOW_MS, producer_id=7, producer_epoch=0)
    log.append(marker, assign_offsets=False)
    assert log.last_stable_offset == log.log_end_offset == 5
    entries = log.active_segment.txn_index.entries
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries] == [(7, 2, 4, 5)]
    log.close()
    reloaded = make_log(tmp_path)
    assert [e.last_offset for e in reloaded.active_segment.txn_index.entries] == [4]
    reloaded.close()


def test_no_reader_sees_a_transaction_below_the_last_stable_offset_before_its_state_is_in_place(
        tmp_path: Path) -> None:
    """Found by the power-cut test's compacted transactional log: the last stable offset was
    computed on each read from the log end offset and the producer state, and the append moved the
    end offset before the producer state knew the transaction its batch opened; a marker's append
    closed the transaction before its abort was in the transaction index. A reader without the
    log's lock (the cleaner choosing how far to clean, a read_committed fetch) could see the
    transaction's records below the last stable offset in both windows: the cleaner let them
    supersede committed records of their keys, and the transaction then aborted."""
    log = make_log(tmp_path)
    log.append(batch(2))
    seen: list[tuple[str, int]] = []  # (step, what a reader sees then)
    on_appended = log.producer_state.on_appended
    index_append = log.active_segment.txn_index.append

    def watched_state(*args: Any) -> Any:
        seen.append(("state", log.last_stable_offset))
        try:
            return on_appended(*args)
        finally:
            seen.append(("state done", log.last_stable_offset))

    def watched_index(*args: Any) -> Any:
        seen.append(("index", log.last_stable_offset))
        return index_append(*args)

    log.producer_state.on_appended = watched_state  # type: ignore[method-assign]
    log.active_segment.txn_index.append = watched_index  # type: ignore[method-assign]
    txn = build_batch([Record(0, NOW_MS, b"a", b"1"), Record(1, NOW_MS, b"b", b"2")], producer_id=7,
                      producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(txn)  # offsets 2-3: the transaction opens at 2
    assert log.last_stable_offset == 2
    log.append(build_marker_batch(ControlType.ABORT, offset=4, timestamp=NOW_MS, producer_id=7, producer_epoch=0),
               assign_offsets=False)
    assert seen == [("state", 2), ("state done", 2), ("state", 2), ("state done", 2), ("index", 2)]
    assert log.last_stable_offset == log.log_end_offset == 5
    log.close()


def test_reload_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    log, one = log_of_batches(tmp_path, 5, 2, records=4)
    log.flush()
    log.close()
    again = make_log(tmp_path, {"segment.bytes": len(one) * 2}, recovery_point=20)
    assert again.log_end_offset == 20
    assert not again.load_report.changed
    assert offsets_of(log_records(again)) == list(range(20))
    again.append(one)
    assert again.log_end_offset == 24
    again.close()


def test_timestamp_type_enum_matches_attributes() -> None:
    assert TimestampType.LOG_APPEND_TIME == 1
