"""The `logkeeper` command line: dump-log, verify and recover, through ``cli.main`` and (once)
through the installed console script.

Exit codes (cli.py): 0 success; 1 bad data, with one line naming the file and the position;
2 usage errors.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from logkeeper import cli
from logkeeper.cli import main
from logkeeper.log import names
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.batch import BatchHeader
from logkeeper.records.builder import ControlType, Record, build_batch, build_marker_batch
from logkeeper.records.compression import Codec
from logkeeper.records.scan import scan_batches

NOW_MS = 1_700_000_000_000
JSON_FIELDS = {"offset", "timestamp", "key", "value", "headers", "baseOffset", "compression", "isTransactional",
               "isControl", "producerId"}


@dataclass
class Fixture:
    directory: Path
    segments: list[Path]  # the .log files, in offset order


def _batch_positions(path: Path) -> list[tuple[int, BatchHeader]]:
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


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    return write_log(tmp_path / "t-0")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(data)


# ------------------------------------------------------------------------------------------
# dump-log
# ------------------------------------------------------------------------------------------
def test_dump_log_prints_one_line_a_batch(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[0]
    code, out, err = run(capsys, "dump-log", str(path))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    batches = _batch_positions(path)
    assert len(lines) == 2 + len(batches)
    assert not any(line.startswith("| offset:") for line in lines)
    _, h = batches[0]
    assert lines[2] == (
        f"baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 "
        f"producerEpoch: -1 partitionLeaderEpoch: -1 isTransactional: false isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {NOW_MS - 10} size: {h.size} magic: 2 "
        f"compresscodec: none crc: {h.crc} isvalid: true")
    pos, h = batches[1]
    assert "baseOffset: 3 lastOffset: 3 count: 1 " in lines[3]
    assert f" position: {pos} " in lines[3] and "compresscodec: gzip" in lines[3]
    assert "producerId: 42 producerEpoch: 1" in lines[4] and "isTransactional: true isControl: false" in lines[4]
    assert "baseSequence: 0 lastSequence: 0" in lines[4]
    assert "isTransactional: true isControl: true" in lines[5]


def test_dump_log_deep_iteration_prints_records_and_markers(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump-log", "--deep-iteration", str(fx.segments[0]))
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert records[:3] == [
        f"| offset: 0 CreateTime: {NOW_MS - 30} keySize: 3 valueSize: 5 sequence: -1 headerKeys: [h1] "
        "key: k-0 payload: hello",
        # as Kafka prints them: a null key or value is left out; header keys joined by ","
        f"| offset: 1 CreateTime: {NOW_MS - 20} keySize: -1 valueSize: 6 sequence: -1 headerKeys: [] "
        "payload: no key",
        f"| offset: 2 CreateTime: {NOW_MS - 10} keySize: 3 valueSize: -1 sequence: -1 headerKeys: [h1,h2] "
        "key: k-2",
    ]
    assert records[3].endswith("keySize: 2 valueSize: 60 sequence: -1 headerKeys: [] key: gz payload: " + "zipped" * 10)
    assert records[4].startswith("| offset: 4 ") and "sequence: 0 " in records[4]
    assert records[5] == (f"| offset: 5 CreateTime: {NOW_MS - 3} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                          "endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert records[7].startswith("| offset: 7 ") and records[7].endswith("endTxnMarker: ABORT coordinatorEpoch: 8")
    # each batch line is followed by its records
    lines = out.splitlines()
    assert lines[2].startswith("baseOffset: 0 ") and lines[3].startswith("| offset: 0 ")
    assert lines[6].startswith("baseOffset: 3 ") and lines[7].startswith("| offset: 3 ")


def test_dump_index_and_time_index(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = fx.segments[0]
    index = log_file.with_suffix(names.INDEX_SUFFIX)
    time_index = log_file.with_suffix(names.TIME_INDEX_SUFFIX)
    code, out, _ = run(capsys, "dump-log", str(index), str(time_index))
    assert code == 0
    raw = index.read_bytes()
    offset_entries = [struct.unpack_from(">ii", raw, p) for p in range(0, len(raw), 8)]
    assert len(offset_entries) >= 2
    raw = time_index.read_bytes()
    time_entries = [struct.unpack_from(">qi", raw, p) for p in range(0, len(raw), 12)]
    assert len(time_entries) >= 2
    assert out.splitlines() == [
        f"Dumping {index}", *[f"offset: {rel} position: {pos}" for rel, pos in offset_entries],
        f"Dumping {time_index}", *[f"timestamp: {ts} offset: {rel}" for ts, rel in time_entries],
    ]
    # each offset entry names a batch start and that batch's last offset (base offset 0 here)
    last_by_position = {p: h.last_offset for p, h in _batch_positions(log_file)}
    assert all(last_by_position[pos] == rel for rel, pos in offset_entries)


def test_dump_json_has_exactly_the_design_fields(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump-log", "--json", *map(str, fx.segments))
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(set(row) == JSON_FIELDS for row in rows)
    assert [row["offset"] for row in rows] == list(range(len(rows)))
    assert rows[0] == {
        "offset": 0, "timestamp": NOW_MS - 30, "key": base64.b64encode(b"k-0").decode(),
        "value": base64.b64encode(b"hello").decode(),
        "headers": [{"key": "h1", "value": base64.b64encode(b"v1").decode()}],
        "baseOffset": 0, "compression": "none", "isTransactional": False, "isControl": False, "producerId": -1,
    }
    assert (rows[1]["key"], rows[2]["value"]) == (None, None)
    assert rows[2]["headers"] == [{"key": "h1", "value": None}, {"key": "h2", "value": ""}]
    assert (rows[3]["baseOffset"], rows[3]["compression"]) == (3, "gzip")
    assert (rows[4]["isTransactional"], rows[4]["isControl"], rows[4]["producerId"]) == (True, False, 42)
    assert (rows[5]["isTransactional"], rows[5]["isControl"], rows[5]["producerId"]) == (True, True, 42)
    assert base64.b64decode(rows[5]["key"]) == struct.pack(">hh", 0, 1)  # COMMIT
    assert {row["compression"] for row in rows} == {"none", "gzip", "snappy", "lz4", "zstd"}
    # a record of a batch of three carries that batch's base offset
    assert [row["baseOffset"] for row in rows[8:11]] == [8, 8, 8]


def test_dump_log_of_a_corrupt_file_exits_1_naming_file_and_position(fx: Fixture,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[0]
    pos, _ = _batch_positions(path)[2]
    flip_bit(path, pos + 40)  # inside the CRC'd header fields
    code, out, err = run(capsys, "dump-log", "--deep-iteration", str(path))
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0] and f"position {pos}" in lines[0] and "CRC" in lines[0]
    # as kafka-dump-log: the bad batch is printed as invalid and the dump goes on past it
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    positions = [line.split("position: ")[1].split()[0] for line in batch_lines]
    assert positions == [str(p) for p, _ in _batch_positions(path)]
    assert [line.endswith("isvalid: false") for line in batch_lines] == [i == 2 for i in range(len(batch_lines))]


def test_dump_log_of_a_torn_file_exits_1(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[-1]
    pos, _ = _batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(pos + 30)
    code, _out, err = run(capsys, "dump-log", "--json", str(path))
    assert code == 1
    (line,) = err.splitlines()
    assert str(path) in line and f"position {pos}" in line


# ------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------
def test_verify_ok(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    batches = sum(len(_batch_positions(p)) for p in fx.segments)
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
    pos, h = _batch_positions(path)[4]
    flip_bit(path, pos + h.size - 1, 3)  # the last byte of the batch's records
    code, out, err = run(capsys, "verify", str(fx.directory))
    assert code == 1 and out.startswith("FAILED: checked 1 partition, ") and out.endswith("; 1 problem (above)\n")
    (line,) = err.splitlines()
    assert line.startswith(f"logkeeper verify: {path} at position {pos}: CRC mismatch")


def test_verify_torn_tail_exits_1_with_one_line(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[-1]
    pos, h = _batch_positions(path)[-1]
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
    batches = _batch_positions(log_file)
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
    pos, _ = _batch_positions(path)[-2]
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
    pos, _ = _batch_positions(first)[3]
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


# ------------------------------------------------------------------------------------------
# usage errors and the console script
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    [], ["frobnicate"], ["dump-log"], ["dump-log", "--no-such-flag", "{log}"], ["verify"], ["verify", "a", "b"],
    ["recover"], ["dump-log", "--json", "{index}"], ["dump-log", "{dir}/notes.txt"],
], ids=["no command", "unknown command", "dump-log without files", "unknown option", "verify without dir",
        "verify with two dirs", "recover without dir", "json of an index", "not a segment file"])
def test_usage_errors_exit_2(fx: Fixture, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    log_file = fx.segments[0]
    args = [a.format(log=log_file, index=log_file.with_suffix(names.INDEX_SUFFIX), dir=fx.directory) for a in argv]
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: logkeeper" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("dump-log", "verify", "recover"))


def test_console_script_reports_bad_data_with_exit_1(tmp_path: Path) -> None:
    directory = write_log(tmp_path / "t-0")
    path = directory.segments[0]
    pos, _ = _batch_positions(path)[1]
    flip_bit(path, pos + 17)  # the stored CRC itself
    script = Path(sys.executable).parent / "logkeeper"
    assert script.exists()
    done = subprocess.run([str(script), "verify", str(directory.directory)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    assert done.stdout.startswith("FAILED: checked 1 partition")
    (line,) = done.stderr.splitlines()
    assert str(path) in line and f"position {pos}" in line


def test_console_script_output_is_whole_after_its_fast_exit(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    """The console script ends a finite command with os._exit (cli.run): everything it printed
    must still arrive, through a pipe, as main() prints it in-process."""
    args = ["dump-log", "--deep-iteration", *map(str, fx.segments)]
    rc, expected, _ = run(capsys, *args)
    script = Path(sys.executable).parent / "logkeeper"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a buffered stdout, as usual
    done = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120, check=False, env=env)
    assert (done.returncode, done.stdout) == (rc, expected) and len(expected) > 10_000
    assert not done.stderr


def test_verify_is_read_only(fx: Fixture, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    copy = tmp_path / "copy" / "t-0"
    shutil.copytree(fx.directory, copy)
    path = copy / fx.segments[0].name
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    assert run(capsys, "verify", str(copy))[0] == 1
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_the_command_starts_numpy_without_a_blas_thread_pool() -> None:
    """OPENBLAS_NUM_THREADS=1 unless the user set it, before numpy is imported (cli.py: the pool's
    start-up burns CPU that a short `logkeeper clean` needs)."""
    code = ("import os, sys, logkeeper.cli\n"
            "assert 'numpy' not in sys.modules\n"
            "import numpy\n"
            "print(os.environ['OPENBLAS_NUM_THREADS'])")
    for given, expected in ((None, "1"), ("3", "3")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if given is not None:
            env["OPENBLAS_NUM_THREADS"] = given
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected


def test_garbage_collection_is_off_only_while_a_command_imports() -> None:
    assert gc.isenabled()
    with cli._importing():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ImportError), cli._importing():
        raise ImportError("a failed import")
    assert gc.isenabled()
    gc.disable()  # a caller that turned collection off keeps it off
    try:
        with cli._importing():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("argv", [
    ["clean", "/d", "--config", "a=b"], ["-v", "verify", "/d"], ["dump-log", "--json", "x.log"],
    ["recover", "/d"], ["sidecar", "--config", "f.yaml"],
    ["spark-compact", "--log-dir", "/d", "--partition", "t-0", "--staging", "/s"],
])
def test_the_named_commands_parser_alone_parses_as_the_whole_one(argv: list[str]) -> None:
    command = cli._named_command(argv)
    assert command == next(a for a in argv if not a.startswith("-"))
    alone = cli.build_parser(command)
    assert list(alone._subparsers._group_actions[0].choices) == [command]  # type: ignore[union-attr]
    assert vars(alone.parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [[], ["-v"], ["--help"], ["bogus", "x"], ["-v", "bogus"]])
def test_help_and_unknown_commands_get_every_command(argv: list[str]) -> None:
    assert cli._named_command(argv) is None
