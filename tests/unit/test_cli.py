"""The `logkeeper` command line: dump-log and usage errors through ``cli.main``, the installed
console script, and how a command starts (verify and recover: test_cli_verify.py).

Exit codes (cli.py): 0 success; 1 bad data, with one line naming the file and the position;
2 usage errors.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from logkeeper import cli
from logkeeper.cli import main
from logkeeper.log import names
from tests.cli_logs import NOW_MS, Fixture, batch_positions, flip_bit, run, write_log

JSON_FIELDS = {"offset", "timestamp", "key", "value", "headers", "baseOffset", "compression", "isTransactional",
               "isControl", "producerId"}



# ------------------------------------------------------------------------------------------
# dump-log
# ------------------------------------------------------------------------------------------
def test_dump_log_prints_one_line_a_batch(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[0]
    code, out, err = run(capsys, "dump-log", str(path))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    batches = batch_positions(path)
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
    last_by_position = {p: h.last_offset for p, h in batch_positions(log_file)}
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
    pos, _ = batch_positions(path)[2]
    flip_bit(path, pos + 40)  # inside the CRC'd header fields
    code, out, err = run(capsys, "dump-log", "--deep-iteration", str(path))
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0] and f"position {pos}" in lines[0] and "CRC" in lines[0]
    # as kafka-dump-log: the bad batch is printed as invalid and the dump goes on past it
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    positions = [line.split("position: ")[1].split()[0] for line in batch_lines]
    assert positions == [str(p) for p, _ in batch_positions(path)]
    assert [line.endswith("isvalid: false") for line in batch_lines] == [i == 2 for i in range(len(batch_lines))]


def test_dump_log_of_a_torn_file_exits_1(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    path = fx.segments[-1]
    pos, _ = batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(pos + 30)
    code, _out, err = run(capsys, "dump-log", "--json", str(path))
    assert code == 1
    (line,) = err.splitlines()
    assert str(path) in line and f"position {pos}" in line


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
    pos, _ = batch_positions(path)[1]
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
