"""records/control.py: the one reader of a control batch's type (issue 22), used by the log's
producer state, the cleaner's transaction walk and the Spark plan."""

from __future__ import annotations

import struct

import pytest

from logkeeper.log.producer_state import end_txn_marker_of
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import Record, build_batch, build_empty_batch, build_marker_batch
from logkeeper.records.compression import Codec
from logkeeper.records.control import UNPARSABLE, ControlType, EndTxnMarker, control_key, control_record_type

NOW_MS = 1_700_000_000_000


def _type_of(batch: bytes) -> int | None:
    header = BatchHeader.parse(batch, 0)
    assert header.is_control
    return control_record_type(batch, header.attributes, header.record_count)


@pytest.mark.parametrize("ctype", list(ControlType))
def test_a_marker_gives_its_type(ctype: ControlType) -> None:
    marker = build_marker_batch(ctype, offset=7, timestamp=NOW_MS, producer_id=3, producer_epoch=1)
    assert _type_of(marker) == ctype
    assert end_txn_marker_of(marker, BatchHeader.parse(marker, 0)) == EndTxnMarker(ctype, 0)


def test_the_key_is_version_and_type_big_endian() -> None:
    assert control_key(ControlType.COMMIT) == b"\x00\x00\x00\x01"
    assert control_key(ControlType.ABORT) == b"\x00\x00\x00\x00"


def test_an_emptied_control_batch_has_no_type() -> None:
    empty = build_empty_batch(base_offset=5, last_offset=5, producer_id=3, producer_epoch=1,
                              is_transactional=True, is_control=True)
    assert _type_of(empty) is None
    assert end_txn_marker_of(empty, BatchHeader.parse(empty, 0)) is None


@pytest.mark.parametrize("key", [None, b"", b"\x00", b"\x00\x00\x00"])
def test_a_key_too_short_for_a_type_is_unparsable(key: bytes | None) -> None:
    batch = build_batch([Record(9, NOW_MS, key, b"v")], producer_id=3, producer_epoch=1,
                        is_transactional=True, is_control=True)
    assert _type_of(batch) == UNPARSABLE  # the cleaner never discards it
    assert end_txn_marker_of(batch, BatchHeader.parse(batch, 0)) is None


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
def test_a_compressed_control_batch(codec: Codec) -> None:
    batch = build_batch([Record(4, NOW_MS, control_key(ControlType.ABORT), struct.pack(">hi", 0, 0)),
                         Record(5, NOW_MS, control_key(ControlType.COMMIT), b"")],
                        codec=codec, producer_id=3, producer_epoch=1, is_transactional=True, is_control=True)
    assert BatchHeader.parse(batch, 0).codec == codec
    assert _type_of(batch) == ControlType.ABORT  # the first record's, as Kafka reads it


def test_an_unknown_type_is_read_but_not_a_transaction_end() -> None:
    batch = build_batch([Record(2, NOW_MS, struct.pack(">hh", 0, 5), b"")], producer_id=3, producer_epoch=1,
                        is_transactional=True, is_control=True)
    assert _type_of(batch) == 5
    assert end_txn_marker_of(batch, BatchHeader.parse(batch, 0)) is None


def test_only_the_batch_given_is_read() -> None:
    """The log hands producer state a buffer that runs on past the batch: the batch's own size bounds it."""
    marker = build_marker_batch(ControlType.COMMIT, offset=1, timestamp=NOW_MS, producer_id=3, producer_epoch=1)
    follows = build_batch([Record(2, NOW_MS, b"k", b"v")])
    both = marker + follows
    assert end_txn_marker_of(both, BatchHeader.parse(both, 0)) == EndTxnMarker(ControlType.COMMIT, 0)


@pytest.mark.parametrize("epoch", [0, 7, 2**31 - 1])
def test_a_marker_gives_its_coordinator_epoch(epoch: int) -> None:
    marker = build_marker_batch(ControlType.ABORT, offset=7, timestamp=NOW_MS, producer_id=3, producer_epoch=1,
                                coordinator_epoch=epoch)
    assert end_txn_marker_of(marker, BatchHeader.parse(marker, 0)) == EndTxnMarker(ControlType.ABORT, epoch)


@pytest.mark.parametrize("value", [None, b"", b"\x00\x00\x00\x00\x07"])
def test_a_marker_value_too_short_for_a_coordinator_epoch_gives_none(value: bytes | None) -> None:
    batch = build_batch([Record(9, NOW_MS, control_key(ControlType.COMMIT), value)], producer_id=3,
                        producer_epoch=1, is_transactional=True, is_control=True)
    assert end_txn_marker_of(batch, BatchHeader.parse(batch, 0)) == EndTxnMarker(ControlType.COMMIT, None)
