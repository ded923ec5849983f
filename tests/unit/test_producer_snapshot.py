"""Producer snapshots (Kafka's .snapshot format): the bytes, the clean close that writes one, and
the loads that trust, skip or delete it."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import crc32c as crc_package
import pytest

from logkeeper.errors import OutOfOrderSequenceError
from logkeeper.log import producer_snapshot as snap
from logkeeper.log.log import Log
from logkeeper.log.producer_state import ProducerStateManager, rebuild_producer_state
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from tests.helpers import NOW_MS, batch, make_log

IDEMPOTENT = 4000
TXN = 7


def _txn_batch(seq: int, ts: int = NOW_MS) -> bytes:
    return build_batch([Record(0, ts, b"a", b"1"), Record(1, ts, b"b", b"2")], producer_id=TXN,
                       producer_epoch=3, base_sequence=seq, is_transactional=True)


def _populate(lg: Log) -> int:
    """An idempotent producer's batches, an aborted transaction, then an open one; its first offset."""
    lg.append(batch(2, producer_id=IDEMPOTENT, producer_epoch=1, base_sequence=0))
    lg.append(batch(3, producer_id=IDEMPOTENT, producer_epoch=1, base_sequence=2, ts=NOW_MS + 5))
    lg.append(_txn_batch(0))
    lg.append(build_marker_batch(ControlType.ABORT, offset=lg.log_end_offset, timestamp=NOW_MS, producer_id=TXN,
                                 producer_epoch=3), assign_offsets=False)
    first_open = lg.log_end_offset
    lg.append(_txn_batch(2))
    lg.append(batch(1))
    return first_open


def _close_cleanly(lg: Log) -> None:
    lg.flush()
    lg.close(clean_shutdown=True)


def _state(lg: Log) -> tuple[dict[int, int], dict[int, tuple[int, int, int, int]]]:
    """Open transactions and, per producer, (epoch, last sequence, last offset, last timestamp)."""
    st = lg.producer_state
    return dict(st.ongoing), {pid: (e.epoch, e.last_seq, e.batches[-1].last_offset if e.batches else -1,
                                    e.last_timestamp) for pid, e in st.producers.items()}


def _spy_scans(monkeypatch: pytest.MonkeyPatch, lg: Log) -> list[int]:
    """The base offsets of the segments whose batch headers are scanned from now on."""
    scanned: list[int] = []
    real_scan = type(lg.active_segment.log).scan

    def scan(self):  # type: ignore[no-untyped-def]
        scanned.append(int(self.path.name[:20]))
        return real_scan(self)

    monkeypatch.setattr(type(lg.active_segment.log), "scan", scan)
    return scanned


def test_bytes_are_kafkas_layout() -> None:
    entry = snap.SnapshotEntry(producer_id=5, epoch=2, last_sequence=9, last_offset=100, offset_delta=4,
                               timestamp=1_700_000_000_000, coordinator_epoch=-1, current_txn_first_offset=96)
    data = snap.encode([entry])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", *entry)
    assert len(data) == 10 + 46
    assert data[:2] == b"\x00\x01" and data[6:] == body
    assert struct.unpack(">I", data[2:6])[0] == crc_package.crc32c(body)  # CRC-32C of all after it
    assert snap.decode(data, Path("x.snapshot")) == [entry]
    assert snap.encode([]) == b"\x00\x01" + struct.pack(">I", crc_package.crc32c(b"\0\0\0\0")) + b"\0\0\0\0"


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:5], "shorter than a snapshot's header"),
    (lambda d: b"\x00\x02" + d[2:], "unknown snapshot version 2"),
    (lambda d: d[:-1], "do not hold the 1 entries"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC"),
])
def test_a_damaged_file_is_named_and_refused(damage, message) -> None:  # type: ignore[no-untyped-def]
    data = snap.encode([snap.SnapshotEntry(1, 0, 0, 0, 0, 0, -1, -1)])
    with pytest.raises(snap.CorruptSnapshotError, match=f"00000000000000000001.snapshot.*{message}"):
        snap.decode(damage(data), Path("00000000000000000001.snapshot"))


def test_a_clean_close_writes_the_state_at_the_log_end(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    first_open = _populate(lg)
    want = _state(lg)
    assert want[0] == {TXN: first_open}
    end = lg.log_end_offset
    _close_cleanly(lg)
    assert sorted(p.name for p in lg.dir.glob("*.snapshot")) == [f"{end:020d}.snapshot"]
    entries = snap.decode((lg.dir / f"{end:020d}.snapshot").read_bytes(), lg.dir)
    by_pid = {e.producer_id: e for e in entries}
    assert by_pid[IDEMPOTENT] == snap.SnapshotEntry(IDEMPOTENT, 1, 4, 4, 2, NOW_MS + 7, -1, -1)  # ts + 5 + 2 records
    assert by_pid[TXN].current_txn_first_offset == first_open and by_pid[TXN].epoch == 3

    again = make_log(tmp_path)
    assert _state(again) == want
    assert again.last_stable_offset == first_open


def test_the_load_scans_only_the_batches_after_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = make_log(tmp_path, {"segment.bytes": 300})
    _populate(lg)
    assert len(lg.segments) > 2
    snapshot_at = lg.log_end_offset
    _close_cleanly(lg)
    lg = make_log(tmp_path, {"segment.bytes": 300})
    lg.append(batch(2, producer_id=IDEMPOTENT, producer_epoch=1, base_sequence=5))
    lg.append(build_marker_batch(ControlType.COMMIT, offset=lg.log_end_offset, timestamp=NOW_MS, producer_id=TXN,
                                 producer_epoch=3), assign_offsets=False)
    want = _state(lg)
    lg.flush()
    lg.close()  # not a clean close: the latest snapshot is still the clean close's
    assert max(int(p.name[:20]) for p in lg.dir.glob("*.snapshot")) == snapshot_at

    scanned = _spy_scans(monkeypatch, lg)
    again = make_log(tmp_path, {"segment.bytes": 300})
    assert _state(again) == want and again.producer_state.ongoing == {}
    assert scanned and min(scanned) == again.segments.floor_segment(snapshot_at).base_offset
    with pytest.raises(OutOfOrderSequenceError):  # the sequence goes on from the snapshot's batch
        again.append(batch(1, producer_id=IDEMPOTENT, producer_epoch=1, base_sequence=9))


def test_a_retry_of_the_snapshots_last_batch_is_a_duplicate(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(2, producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=(1 << 31) - 1))  # wraps to 0
    _close_cleanly(lg)
    again = make_log(tmp_path)
    info = again.append(batch(2, producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=(1 << 31) - 1))
    assert info.duplicate and info.first_offset == 0
    assert not again.append(batch(1, producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=1)).duplicate


def test_a_snapshot_above_the_recovered_end_is_deleted(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    _populate(lg)
    _close_cleanly(lg)
    path = next(lg.dir.glob("*.snapshot"))
    log_file = next(lg.dir.glob("*.log"))
    with open(log_file, "r+b") as f:  # the last batch torn: recovery cuts the log below the snapshot
        f.truncate(log_file.stat().st_size - 10)
    again = make_log(tmp_path, had_clean_shutdown=False)
    assert not path.exists()
    assert again.log_end_offset < int(path.name[:20])
    assert again.producer_state.ongoing == {TXN: again.log_end_offset - 2}  # the open txn, from a scan


def test_truncation_deletes_the_snapshots_above_it(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    first_open = _populate(lg)
    _close_cleanly(lg)
    lg = make_log(tmp_path)
    lg.truncate_to(first_open)
    assert list(lg.dir.glob("*.snapshot")) == [] and lg.producer_state.ongoing == {}
    lg.append(batch(10))  # past the deleted snapshot's offset: a stale one would now be taken
    lg.flush()
    lg.close()
    assert make_log(tmp_path).producer_state.ongoing == {}
    lg = make_log(tmp_path)
    lg.truncate_fully_and_start_at(100)
    _close_cleanly(lg)
    assert [p.name for p in lg.dir.glob("*.snapshot")] == [f"{100:020d}.snapshot"]


def test_a_corrupt_snapshot_is_deleted_and_the_segments_scanned(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    lg = make_log(tmp_path)
    _populate(lg)
    want = _state(lg)
    _close_cleanly(lg)
    path = next(lg.dir.glob("*.snapshot"))
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    older = lg.dir / f"{0:020d}.snapshot"  # an older, valid one is taken next, and scanned on top of
    older.write_bytes(snap.encode([]))
    with caplog.at_level(logging.WARNING):
        again = make_log(tmp_path)
    assert _state(again) == want
    assert not path.exists() and older.exists()
    assert path.name in caplog.text and "CRC" in caplog.text


def test_a_load_deletes_leftovers_and_strays_as_kafka_does(tmp_path: Path) -> None:
    lg = make_log(tmp_path, {"segment.bytes": 300})
    _populate(lg)
    bases = lg.segments.base_offsets()
    end = lg.log_end_offset
    _close_cleanly(lg)
    stray, torn = lg.dir / f"{bases[1] + 1:020d}.snapshot", lg.dir / f"{2:020d}.snapshot.tmp"
    stray.write_bytes(snap.encode([]))
    torn.write_bytes(b"torn")
    again = make_log(tmp_path, {"segment.bytes": 300})
    left = sorted(int(p.name[:20]) for p in again.dir.glob("*.snapshot*"))
    # every roll's (at a segment base) and the clean close's (the latest, above every base) stay
    assert left == sorted({*bases[1:], end}) and end > bases[-1]
    assert not stray.exists() and not torn.exists()


def test_an_unflushed_close_writes_no_snapshot(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.close(clean_shutdown=True)  # nothing flushed: the snapshot would be above what is durable
    assert list(lg.dir.glob("*.snapshot")) == []


def test_state_round_trips_through_entries() -> None:
    st = ProducerStateManager()
    st.on_producer_batch(9, 2, 10, 14, 100, 104, is_control=False, timestamp=77)
    st.on_producer_batch(8, 0, -1, -1, 105, 105, is_control=True, timestamp=78)
    st.ongoing[8] = 90
    back = snap.state_from(snap.entries_of(st))
    assert back.ongoing == {8: 90}
    assert list(back.producers[9].batches) == [st.producers[9].batches[-1]]
    assert back.producers[9].last_timestamp == 77 and back.producers[8].last_seq == -1


def test_verify_notes_the_snapshots_a_load_would_delete_and_touches_nothing(tmp_path: Path) -> None:
    from logkeeper.tools.verify import verify_path

    lg = make_log(tmp_path)
    lg.append(batch(3))
    lg.roll(5)  # an empty last segment past the last batch: the log end is its base (as after a clean)
    lg.close()
    lg = make_log(tmp_path)
    _close_cleanly(lg)
    assert [p.name for p in lg.dir.glob("*.snapshot")] == [f"{5:020d}.snapshot"]
    assert verify_path(lg.dir).notes == []
    (lg.dir / f"{9:020d}.snapshot").write_bytes(snap.encode([]))  # above the log end (5)
    (lg.dir / f"{1:020d}.snapshot").write_bytes(b"\x00\x01torn")
    (lg.dir / f"{2:020d}.snapshot.tmp").write_bytes(b"torn")
    before = sorted(p.name for p in lg.dir.iterdir())
    report = verify_path(lg.dir)
    assert report.ok and len(report.notes) == 2
    assert "00000000000000000001.snapshot" in report.notes[0] and "shorter than a snapshot's header" in report.notes[0]
    assert "00000000000000000009.snapshot" in report.notes[1] and "above the log end offset 5" in report.notes[1]
    assert sorted(p.name for p in lg.dir.iterdir()) == before
    # a corrupt one at a segment base below the valid one at 5: a load never reads it
    (lg.dir / f"{1:020d}.snapshot").unlink()
    (lg.dir / f"{0:020d}.snapshot").write_bytes(b"\x00\x01torn")
    notes = verify_path(lg.dir).notes
    assert len(notes) == 2 and "00000000000000000000.snapshot" in notes[1]
    assert "not read while a later snapshot is valid" in notes[1] and "deletes" not in notes[1]


# ---------------------------------------------------------------------------- snapshots at rolls
ROLLING = {"segment.bytes": 300}


def _append_rolling(lg: Log) -> list[int]:
    """_populate's batches and more, on a log that rolls every few batches; each roll's snapshot
    holds the state before the batch that rolled. Returns the rolls' offsets."""
    rolls = []
    appends = [lambda: _populate(lg), lambda: lg.append(batch(2, producer_id=IDEMPOTENT, producer_epoch=1,
                                                                base_sequence=5)),
               lambda: lg.append(_txn_batch(4)), lambda: lg.append(batch(3))]
    for append in appends:
        before = snap.entries_of(lg.producer_state)
        bases = set(lg.segments.base_offsets())
        append()
        new = sorted(set(lg.segments.base_offsets()) - bases)
        for base in new:
            got = snap.decode((lg.dir / f"{base:020d}.snapshot").read_bytes(), lg.dir)
            if len(new) == 1 and append is not appends[0]:
                assert got == before  # one roll before this append's batch: the state before it
        rolls += new
    return rolls


def test_each_roll_writes_the_state_at_the_new_segments_base(tmp_path: Path) -> None:
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)
    assert len(rolls) >= 3
    assert sorted(int(p.name[:20]) for p in lg.dir.glob("*.snapshot")) == rolls
    # every roll's snapshot, loaded alone, gives the state a scan of the batches below it gives
    for base in rolls:
        from_snapshot = snap.state_from(snap.decode((lg.dir / f"{base:020d}.snapshot").read_bytes(), lg.dir))
        scanned = snap.state_from(snap.entries_of(
            rebuild_producer_state(lg.segments.values(0, base))))
        assert snap.entries_of(from_snapshot) == snap.entries_of(scanned), base


def test_a_load_after_a_crash_scans_only_the_active_segment(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    lg = make_log(tmp_path, ROLLING)
    _append_rolling(lg)
    want, end = _state(lg), lg.log_end_offset
    active = lg.active_segment.base_offset
    lg.flush()
    lg.close()  # a crash: no clean close, no snapshot at the log end
    scanned = _spy_scans(monkeypatch, lg)
    again = make_log(tmp_path, ROLLING, had_clean_shutdown=False, recovery_point=end)
    assert _state(again) == want
    assert scanned == [active]


def test_the_flush_past_a_roll_fsyncs_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(snap, "sync", lambda _d, offset: synced.append(offset))
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)
    assert synced == []  # a roll does not fsync it (it holds the log's lock)
    lg.flush(rolls[1])
    assert synced == rolls[:2]
    lg.flush()
    assert synced == rolls
    lg.flush()
    assert synced == rolls


def test_deleted_and_replaced_segments_take_their_snapshots(tmp_path: Path) -> None:
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)
    doomed = lg.segments.values()[:2]  # the first segment (no snapshot) and the first roll's
    lg.delete_segments(doomed)
    assert sorted(int(p.name[:20]) for p in lg.dir.glob("*.snapshot")) == rolls[1:]


def test_cleaning_that_merges_segments_deletes_the_merged_ones_snapshots(tmp_path: Path) -> None:
    import io

    from logkeeper.cleaner.clean_command import run_clean

    lg = make_log(tmp_path, ROLLING)
    for i in range(12):
        lg.append(batch(2, start=i % 3))  # the same few keys again and again
    _close_cleanly(lg)
    assert len(list(lg.dir.glob("*.snapshot"))) > 4
    assert run_clean(tmp_path, {"min.cleanable.dirty.ratio": "0", "segment.bytes": "100000"}, io.StringIO(),
                     lambda: NOW_MS) == 0
    # as the cleaning left the directory (a load would also delete them, as strays)
    bases = sorted(int(p.name[:20]) for p in lg.dir.glob("*.log"))
    left = sorted(int(p.name[:20]) for p in lg.dir.glob("*.snapshot"))
    assert len(bases) < 4 and set(left) <= {*bases, make_log(tmp_path, ROLLING).log_end_offset}


def test_a_power_cut_below_a_roll_snapshot_deletes_it(tmp_path: Path) -> None:
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)
    lg.close()  # nothing flushed: the cut below may take anything above the recovery point 0
    cut = lg.dir / f"{rolls[1]:020d}.log"
    prior = sorted(lg.dir.glob("*.log"))
    torn = prior[prior.index(cut) - 1]  # the segment below the second roll loses its last bytes
    with open(torn, "r+b") as f:
        f.truncate(torn.stat().st_size - 10)
    again = make_log(tmp_path, ROLLING, had_clean_shutdown=False)
    assert again.log_end_offset < rolls[1]
    left = sorted(int(p.name[:20]) for p in again.dir.glob("*.snapshot"))
    assert left == [r for r in rolls if r <= again.log_end_offset]
    scanned = rebuild_producer_state(again.segments.values())
    assert snap.entries_of(again.producer_state) == snap.entries_of(scanned)


def test_a_torn_roll_snapshot_falls_back_to_the_one_before(tmp_path: Path) -> None:
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)
    want, end = _state(lg), lg.log_end_offset
    lg.flush()
    lg.close()
    (lg.dir / f"{rolls[-1]:020d}.snapshot").write_bytes(b"")  # a power cut before its data was written
    again = make_log(tmp_path, ROLLING, had_clean_shutdown=False, recovery_point=end)
    assert _state(again) == want
    assert not (lg.dir / f"{rolls[-1]:020d}.snapshot").exists()


# ------------------------------------------- recovery rebuilds transaction indexes below a snapshot
def _txn_indexes(lg: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(lg.dir.glob("*.txnindex")) if p.stat().st_size}


def test_recovery_below_a_roll_snapshot_keeps_the_aborted_transactions(tmp_path: Path) -> None:
    """Recovery rebuilds a recovered segment's transaction index from the producer state, so the
    state must be scanned from at or below that segment, not from a later snapshot (found by
    interop step 3: Kafka's read_committed then read the aborted records)."""
    lg = make_log(tmp_path, ROLLING)
    rolls = _append_rolling(lg)  # the aborted transaction is in an early segment
    lg.flush()
    before = _txn_indexes(lg)
    assert before and min(int(n[:20]) for n in before) < rolls[-1]
    lg.close()
    again = make_log(tmp_path, ROLLING, had_clean_shutdown=False, recovery_point=0)  # recovers every segment
    assert again.load_report.recovered_segments
    assert _txn_indexes(again) == before


def test_recovery_of_the_segment_under_a_clean_close_snapshot_keeps_its_aborts(tmp_path: Path) -> None:
    lg = make_log(tmp_path)  # one segment: the clean close's snapshot lies inside it
    _populate(lg)
    _close_cleanly(lg)
    snapshot_at = lg.log_end_offset
    lg = make_log(tmp_path, recovery_point=snapshot_at)
    lg.append(batch(2))
    lg.flush()
    before = _txn_indexes(lg)
    assert before
    lg.close()  # a crash after more appends: recovery starts from the segment holding the checkpoint
    again = make_log(tmp_path, had_clean_shutdown=False, recovery_point=snapshot_at)
    assert again.load_report.recovered_segments == [f"{0:020d}.log"]
    assert _txn_indexes(again) == before


# ------------------------------------------------------------------------ producer expiration
DAY = 24 * 3600 * 1000


def test_expired_producers_are_those_idle_a_whole_expiration_with_no_open_transaction() -> None:
    st = ProducerStateManager()
    st.on_producer_batch(1, 0, 0, 0, 10, 10, is_control=False, timestamp=1_000)
    st.on_producer_batch(2, 0, 0, 0, 11, 11, is_control=False, timestamp=1_001)
    st.on_producer_batch(3, 0, 0, 0, 12, 12, is_control=False, timestamp=0)
    st.ongoing[3] = 12
    assert st.remove_expired(1_000 + DAY, DAY) == 1  # Kafka's rule: idle for >= the expiration
    assert set(st.producers) == {2, 3}


def test_a_load_forgets_the_producers_of_a_snapshot_that_expired_since(tmp_path: Path) -> None:
    from logkeeper.log.scheduler import ManualClock

    clock = ManualClock(NOW_MS)
    lg = make_log(tmp_path, clock=clock)
    first_open = _populate(lg)  # IDEMPOTENT's last batch's max timestamp NOW_MS + 7, TXN's transaction open
    _close_cleanly(lg)
    clock.advance(DAY + 6)
    lg = make_log(tmp_path, clock=clock, producer_expiration_ms=DAY)
    assert IDEMPOTENT in lg.producer_state.producers  # idle a day less 1 ms
    lg.close()
    clock.advance(1)
    again = make_log(tmp_path, clock=clock, producer_expiration_ms=DAY)
    assert set(again.producer_state.producers) == {TXN} and again.last_stable_offset == first_open


def _marker(lg: Log, control: ControlType, coordinator_epoch: int) -> None:
    lg.append(build_marker_batch(control, offset=lg.log_end_offset, timestamp=NOW_MS, producer_id=TXN,
                                 producer_epoch=3, coordinator_epoch=coordinator_epoch), assign_offsets=False)


def test_a_producer_keeps_the_coordinator_epoch_of_its_last_marker(tmp_path: Path) -> None:
    """Kafka's producer state entry takes each marker's coordinator epoch (appendEndTxnMarker), and
    its snapshot carries it: the state after appends, in the snapshot and from a scan agree."""
    lg = make_log(tmp_path)
    lg.append(_txn_batch(0))
    _marker(lg, ControlType.COMMIT, 5)
    lg.append(_txn_batch(2))
    _marker(lg, ControlType.ABORT, 9)
    lg.append(_txn_batch(4))  # a new transaction: the last marker's epoch stays
    assert lg.producer_state.producers[TXN].coordinator_epoch == 9
    _close_cleanly(lg)
    (snapshot,) = lg.dir.glob("*.snapshot")
    assert [e.coordinator_epoch for e in snap.read(snapshot) if e.producer_id == TXN] == [9]
    snapshot.unlink()
    scanned = make_log(tmp_path)  # no snapshot: the state comes from the segments
    assert scanned.producer_state.producers[TXN].coordinator_epoch == 9
    scanned.close()


def test_an_empty_transactions_marker_sets_the_coordinator_epoch_too(tmp_path: Path) -> None:
    """A marker with no open transaction (the coordinator aborting an empty one) still counts."""
    lg = make_log(tmp_path)
    _marker(lg, ControlType.ABORT, 4)
    assert lg.producer_state.producers[TXN].coordinator_epoch == 4
    lg.close()
