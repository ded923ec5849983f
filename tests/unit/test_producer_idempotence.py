"""Idempotent producers' sequence and epoch checks in Log.append, and their state after a reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeeper.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from logkeeper.log.log import Log
from tests.helpers import batch, make_log

PID = 4000


def send(lg: Log, seq: int, n: int = 2, epoch: int = 0, pid: int = PID) -> tuple[int, bool]:
    info = lg.append(batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq))
    return info.first_offset, info.duplicate


def test_in_sequence_batches_are_appended(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    assert send(lg, 0) == (0, False)
    assert send(lg, 2) == (2, False)
    assert send(lg, 4, n=3) == (4, False)
    assert lg.log_end_offset == 7


def test_retry_of_a_retained_batch_returns_its_offsets_and_writes_nothing(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    send(lg, 0)
    send(lg, 2)
    size = lg.size_in_bytes
    assert send(lg, 0) == (0, True)
    assert send(lg, 2) == (2, True)
    assert lg.size_in_bytes == size and lg.log_end_offset == 4


def test_gap_in_sequence_is_out_of_order(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    send(lg, 0)
    with pytest.raises(OutOfOrderSequenceError, match="sequence 5 does not follow 1"):
        send(lg, 5)
    assert lg.log_end_offset == 2


def test_old_epoch_is_fenced_and_new_epoch_restarts_at_zero(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    send(lg, 0, epoch=1)
    with pytest.raises(InvalidProducerEpochError):
        send(lg, 2, epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="not 0"):
        send(lg, 7, epoch=2)
    assert send(lg, 0, epoch=2) == (2, False)


def test_unknown_producer_may_start_anywhere_and_producers_are_independent(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    assert send(lg, 40) == (0, False)
    assert send(lg, 0, pid=PID + 1) == (2, False)
    assert send(lg, 42) == (4, False)


def test_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    send(lg, (1 << 31) - 2, n=2)  # sequences 2^31-2, 2^31-1
    assert send(lg, 0) == (2, False)


def test_state_is_rebuilt_from_the_segments_on_reload(tmp_path: Path) -> None:
    lg = make_log(tmp_path, {"segment.bytes": 400})
    for i in range(10):
        send(lg, 2 * i)
    assert len(lg.segments) > 1
    lg.close()
    again = make_log(tmp_path, {"segment.bytes": 400})
    assert send(again, 18) == (18, True)  # the last batch is still known as a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        send(again, 25)
    assert send(again, 20) == (20, False)


def test_batches_without_producer_id_are_not_checked(tmp_path: Path) -> None:
    lg = make_log(tmp_path)
    lg.append(batch(2))
    lg.append(batch(2))
    assert lg.log_end_offset == 4
