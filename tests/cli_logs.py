"""The command-line tests' partition: two or more segments of plain, compressed, keyless and
transactional batches (``write_log``), and how the tests run a command and damage a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from logkeeper.cli import main
from logkeeper.log import names
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from logkeeper.records.scan import scan_batches

NOW_MS = 1_700_000_000_000


@dataclass
class Fixture:
    directory: Path
    segments: list[Path]  # the .log files, in offset order


def batch_positions(path: Path) -> list[tuple[int, BatchHeader]]:
    data = path.read_bytes()
    table = scan_batches(np.frombuffer(data, dtype=np.uint8))
    return [(int(p), BatchHeader.parse(data, int(p))) for p in table.position]


def write_log(directory: Path) -> Fixture:
    """Two or more segments with index entries: plain and compressed batches, tombstones, null
    keys, headers, a committed and an aborted transaction."""
    log = Log(directory, LogConfig.from_props({"segment.bytes": 1500, "index.interval.bytes": 200}),
              clock_ms=lambda: NOW_MS)
    log.append(build_batch([Record(0, NOW_MS - 30, b"k-0", b"hello", (("h1", b"v1"),)),
                            Record(1, NOW_MS - 20, None, b"no key"),
                            Record(2, NOW_MS - 10, b"k-2", None, (("h1", None), ("h2", b"")))]))
    log.append(build_batch([Record(0, NOW_MS - 5, b"gz", b"zipped" * 10)], codec=Codec.GZIP))
    log.append(build_batch([Record(0, NOW_MS - 4, b"t", b"in a transaction")], producer_id=42, producer_epoch=1,
                           base_sequence=0, is_transactional=True))
    log.append(build_marker_batch(ControlType.COMMIT, offset=log.log_end_offset, timestamp=NOW_MS - 3,
                                  producer_id=42, producer_epoch=1, coordinator_epoch=7), assign_offsets=False)
    log.append(build_batch([Record(0, NOW_MS - 3, b"a", b"aborted")], producer_id=43, producer_epoch=0,
                           base_sequence=0, is_transactional=True))
    log.append(build_marker_batch(ControlType.ABORT, offset=log.log_end_offset, timestamp=NOW_MS - 2,
                                  producer_id=43, producer_epoch=0, coordinator_epoch=8), assign_offsets=False)
    for n in range(30):
        log.append(build_batch([Record(i, NOW_MS + n, b"key-%d" % n, b"value-%d-%d" % (n, i) * 5) for i in range(3)],
                               codec=Codec(n % 5)))
    log.close()
    segments = sorted(directory.glob("*" + names.LOG_SUFFIX))
    assert len(segments) >= 2
    return Fixture(directory, segments)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(data)


