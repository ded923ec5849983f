"""`logkeeper verify` and `logkeeper recover` through ``cli.main``: exit 0 on intact data; 1 with one
line naming the file and the position of the damage; what recover cuts, and that what it leaves
verifies."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from logkeeper import cli
from logkeeper.log import names
from tests.cli_logs import Fixture, batch_positions, flip_bit, run, write_log


# ------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------
def test_verify_ok(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    batches = sum(len(batch_positions(p)) for p in fx.segments)
    code, out, err = run(capsys, "verify", str(fx.directory))
    assert (code, err) == (0, "")
    assert out == f"OK: checked 1 partition, {len(fx.segments)} segments, {batches} batches, {8 + 30 * 3} records\n"


def test_a_long_verify_says_how_far_it_has_come(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write_log(tmp_path / "data" / "orders-0")
    write_log(tmp_path / "data" / "orders-1")
    segments = sorted((tmp_path / "data").glob("*/*.log"))
    total = sum(p.stat().st_size for p in segments) / (1 << 20)
    monkeypatch.setattr(cli, "EVERY_S", 0.0)  # a line after every segment
    code, out, err = run(capsys, "verify", str(tmp_path / "data"))
    assert code == 0 and out.startswith("OK: checked 2 partitions, ")
    lines = err.splitlines()
    assert len(lines) == len(segments) > 2
    done = [re.fullmatch(rf"logkeeper verify: (\d+) of {len(segments)} segments \(([\d.]+) of {total:.1f} MB\) "
                         r"checked, \d+ s", line) for line in lines]
    assert all(done), lines
    assert [int(m[1]) for m in done if m] == list(range(1, len(segments) + 1))
    assert done[-1] is not None and done[-1][2] == f"{total:.1f}"


def test_verify_a_log_dir_of_partitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path / "data" / "orders-0")
    write_log(tmp_path / "data" / "orders-1")
    (tmp_path / "data" / "recovery-point-offset-checkpoint").write_text("0\n2\norders 0 98\norders 1 98\n")
    code, out, _ = run(capsys, "verify", str(tmp_path / "data"))
    assert code == 0 and out.startswith("OK: checked 2 partitions, ")
    (tmp_path / "data" / "recovery-point-offset-checkpoint").write_text("0\n2\norders 0\n")
    code, _, err = run(capsys, "verify", str(tmp_path / "data"))
    assert code == 1 and "recovery-point-offset-checkpoint" in err


def test_verify_crc_mismatch_exits_1_with_one_line(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: the time index entries past the bad batch were reported as a second line."""
    path = fx.segments[0]
    pos, h = batch_positions(path)[4]
    flip_bit(path, pos + h.size - 1, 3)  # the last byte of the batch's records
    code, out, err = run(capsys, "verify", str(fx.directory))
    assert code == 1 and out.startswith("FAILED: checked 1 partition, ") and out.endswith("; 1 problem (above)\n")
    (line,) = err.splitlines()
    assert line.startswith(f"logkeeper verify: {path} at position {pos}: CRC mismatch")


def test_verify_torn_tail_exits_1_with_one_line(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[-1]
    pos, h = batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(pos + h.size - 1)
    code, _, err = run(capsys, "verify", str(fx.directory))
    assert code == 1
    (line,) = err.splitlines()
    assert line == f"logkeeper verify: {path} at position {pos}: torn batch (the file ends inside it)"


@pytest.mark.parametrize("damage", ["not a batch start", "wrong offset", "past the last batch"])
def test_verify_bad_index_entry_exits_1_naming_the_index(fx: Fixture, capsys: pytest.CaptureFixture[str],
                                                         damage: str) -> None:
    """The index is trimmed (the log was closed): every slot is an entry."""
    log_file = fx.segments[0]
    index = log_file.with_suffix(names.INDEX_SUFFIX)
    raw = bytearray(index.read_bytes())
    entries = [struct.unpack_from(">ii", raw, p) for p in range(0, len(raw), 8)]
    assert len(entries) >= 2
    batches = batch_positions(log_file)
    (rel0, pos0), (rel1, pos1) = entries[0], entries[1]
    if damage == "not a batch start":
        struct.pack_into(">ii", raw, 8, rel1, pos1 - 1)
        slot = 1
    elif damage == "wrong offset":
        struct.pack_into(">ii", raw, 8, rel1 + 1, pos1)
        slot = 1
    else:  # regression: an entry beyond the log's end was not reported when the .log was whole
        last_pos, last = batches[-1]
        raw += struct.pack(">ii", last.last_offset + 10, last_pos + last.size + 100)
        slot = len(entries)
    index.write_bytes(raw)
    code, _, err = run(capsys, "verify", str(fx.directory))
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith(f"logkeeper verify: {index} at position {slot * 8}: entry {slot} ")
    assert (rel0, pos0) == entries[0]


def test_verify_bad_time_index_entry_exits_1_naming_it(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    time_index = fx.segments[0].with_suffix(names.TIME_INDEX_SUFFIX)
    raw = bytearray(time_index.read_bytes())
    ts, rel = struct.unpack_from(">qi", raw, 0)
    struct.pack_into(">qi", raw, 0, ts - 1, rel)
    time_index.write_bytes(raw)
    code, _, err = run(capsys, "verify", str(fx.directory))
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith(f"logkeeper verify: {time_index} at position 0: entry 0 ")


@pytest.mark.parametrize("damage", ["torn", "first after last"])
def test_verify_a_damaged_transaction_index_exits_1_naming_it(fx: Fixture, capsys: pytest.CaptureFixture[str],
                                                              damage: str) -> None:
    """The fixture's aborted transaction has an index entry; a power cut can tear it (the loader
    rebuilds such an index), and verify says so instead of passing over the file."""
    [txn_index] = [p for p in fx.directory.glob("*" + names.TXN_INDEX_SUFFIX) if p.stat().st_size]
    raw = bytearray(txn_index.read_bytes())
    assert len(raw) == 34
    if damage == "torn":
        raw += raw[:10]
        want = f"logkeeper verify: {txn_index}: size is not a multiple of 34"
    else:
        version, pid, _first, last, lso = struct.unpack(">hqqqq", raw)
        struct.pack_into(">hqqqq", raw, 0, version, pid, last + 1, last, lso)
        want = f"logkeeper verify: {txn_index} at position 0: entry 0 (producer {pid}, offsets {last + 1}..{last}) ends"
    txn_index.write_bytes(raw)
    code, _, err = run(capsys, "verify", str(fx.directory))
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith(want)


# ------------------------------------------------------------------------------------------
# recover
# ------------------------------------------------------------------------------------------
def test_recover_cuts_a_torn_tail_and_leaves_a_directory_that_verifies(fx: Fixture,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[-1]
    pos, _ = batch_positions(path)[-2]
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(pos + 20)  # the last batch gone, the one before torn
    code, out, _ = run(capsys, "recover", str(fx.directory))
    assert code == 0
    assert f"t-0/{path.name}: cut 20 bytes (short tail at position {pos})\n" in out
    assert out.endswith("recovered; 1 partitions changed\n")
    assert path.stat().st_size == pos < size
    code, out, _ = run(capsys, "verify", str(fx.directory))
    assert code == 0 and out.startswith("OK: ")


def test_recover_cuts_at_a_crc_mismatch_and_deletes_later_segments(fx: Fixture,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    first = fx.segments[0]
    pos, _ = batch_positions(first)[3]
    flip_bit(first, pos + 70)
    code, out, _ = run(capsys, "recover", str(fx.directory))
    assert code == 0
    cut = first.stat().st_size
    assert cut == pos
    assert f"t-0/{first.name}: cut " in out and f"(CRC mismatch at position {pos})" in out
    for later in fx.segments[1:]:
        assert f"t-0/{later.name}: deleted (after a cut segment)" in out
        assert not later.exists()
    assert "t-0: 1 segments recovered, offsets [0, 5)\n" in out  # batches 0-2 (offsets 0-4) kept
    code, out, _ = run(capsys, "verify", str(fx.directory))
    assert code == 0 and out.startswith("OK: checked 1 partition, 1 segment, 3 batches")


def test_recover_of_an_intact_directory_keeps_every_batch(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    """The .log files stay as they are. (The indexes are rebuilt with the default
    index.interval.bytes, as `recover` takes no topic config: this log's 200-byte spacing is
    not kept, though the rebuilt indexes are valid.)"""
    before = {p.name: p.read_bytes() for p in fx.segments}
    code, out, _ = run(capsys, "recover", str(fx.directory))
    assert code == 0 and out.endswith("recovered; 0 partitions changed\n")
    assert "cut" not in out and "deleted" not in out
    assert {p.name: p.read_bytes() for p in fx.segments} == before
    assert run(capsys, "verify", str(fx.directory))[0] == 0
