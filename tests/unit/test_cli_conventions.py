"""Issue 19's CLI conventions: one exit-code convention written in --help, messages about the
user's data (no class names, no tracebacks), verify meaning verified, dump-log going on past a
bad batch, a missing extra naming what to install; and two stray inconsistencies (the buffer
utilization metric against the stats line, setuptools' warnings at `make setup`)."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from logkeeper.cleaner.metrics import buffer_utilization_percent
from logkeeper.cleaner.stats import CleanerStats, format_stats
from logkeeper.cli import main
from logkeeper.log import names
from logkeeper.spark import command as spark_command
from tests.unit.test_cli import Fixture, flip_bit, write_log

ROOT = Path(__file__).resolve().parents[2]
CLASS_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(Error|Exception)\b|Traceback|\w+\(")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    return write_log(tmp_path / "data" / "t-0")


def test_help_states_the_exit_codes_and_the_log_dir_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "  0  ok\n  1  problems found in the data" in out and "  2  usage or wrong input" in out
    assert "write only into a log dir" in out and "--create-log-dirs" in out


@pytest.mark.parametrize("argv,expected", [
    (["recover", "{dir}", "--config", "novalue"], "recover: --config expects KEY=VALUE, got novalue"),
    (["recover", "{dir}", "--config", "segment.bytes=many"], "recover: "),
    (["clean", "{logdir}", "--config", "no.such.key=1"], "clean: unknown config key no.such.key: "),
    (["verify", "{dir}/missing"], "verify: {dir}/missing does not exist"),
    (["dump-log", "{dir}/00000000000000099999.log"], "dump-log: {dir}/00000000000000099999.log: no such file"),
])
def test_wrong_input_exits_2_with_a_sentence(fx: Fixture, capsys: pytest.CaptureFixture[str], argv: list[str],
                                            expected: str) -> None:
    fill = {"dir": fx.directory, "logdir": fx.directory.parent}
    code, out, err = run(capsys, *[a.format(**fill) for a in argv])
    assert (code, out) == (2, "")
    assert err.startswith("logkeeper " + expected.format(**fill)), err
    assert len(err.splitlines()) == 1 and not CLASS_NAME.search(err), err


def test_dump_log_prints_no_header_before_a_missing_file(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "dump-log", str(fx.segments[0]), str(fx.directory / "00000000000000000999.log"))
    assert (code, out) == (2, "")
    assert "no such file" in err


def test_dump_log_reports_each_bad_batch_and_dumps_every_file(fx: Fixture,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    first, second = fx.segments[0], fx.segments[1]
    clean_code, clean_out, _ = run(capsys, "dump-log", *map(str, fx.segments))
    flip_bit(first, 200)  # inside a batch's records: its CRC no longer matches
    with open(second, "r+b") as f:
        f.truncate(second.stat().st_size - 5)  # a torn tail
    code, out, err = run(capsys, "dump-log", *map(str, fx.segments))
    assert (clean_code, code) == (0, 1)
    problems = err.splitlines()
    assert len(problems) == 2
    assert problems[0].startswith(f"logkeeper dump-log: {first} at position ") and "CRC mismatch" in problems[0]
    assert problems[1].startswith(f"logkeeper dump-log: {second} at position ") and "torn batch" in problems[1]
    # every batch of the first file is still printed, the bad one as invalid; the second file's up to its tear
    assert out.count("isvalid: false") == 1
    assert out.count("Dumping ") == len(fx.segments)
    assert len(out.splitlines()) == len(clean_out.splitlines()) - 1


def test_verify_refuses_a_dir_with_nothing_to_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "verify", str(tmp_path / "empty"))
    assert (code, out) == (2, "") and f"{tmp_path / 'empty'} is not a log dir" in err
    (tmp_path / "logdir").mkdir()
    (tmp_path / "logdir" / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    code, out, err = run(capsys, "verify", str(tmp_path / "logdir"))
    assert (code, out) == (2, "")
    assert err == f"logkeeper verify: {tmp_path / 'logdir'} is a log dir with no partitions: nothing to verify.\n"


def test_verify_is_quiet_about_deleted_files_and_brief_about_an_interrupted_clean(
        fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(5):  # replaced segments waiting for file.delete.delay.ms: normal
        base = 10_000 + i
        for suffix in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX):
            (fx.directory / f"{base:020d}{suffix}{names.DELETED_SUFFIX}").write_bytes(b"x")
    code, out, err = run(capsys, "verify", str(fx.directory.parent))
    assert (code, err) == (0, "") and out.startswith("OK: checked 1 partition, ")
    shutil.copy(fx.segments[0], str(fx.segments[0]) + names.CLEANED_SUFFIX)
    shutil.copy(fx.segments[1], str(fx.segments[1]) + names.SWAP_SUFFIX)
    code, out, err = run(capsys, "verify", str(fx.directory.parent))
    assert code == 0
    (note,) = err.splitlines()
    assert note.startswith(f"note: {fx.directory}: 2 file(s) left by an interrupted clean (")


def test_spark_compact_without_the_extra_says_what_to_install(fx: Fixture, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    real = spark_command.importlib.util.find_spec
    monkeypatch.setattr(spark_command.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyarrow" else real(name, *a))
    staging = fx.directory.parent.parent / "staging"
    code = main(["spark-compact", "--log-dir", str(fx.directory.parent), "--partition", "t-0",
                 "--staging", str(staging)])
    out = capsys.readouterr().out
    assert code == 2 and not staging.exists()
    # pyarrow alone here; without the extra installed at all (make test's venv) all three are named
    assert re.search(r"pyarrow( is|.* are) not installed", out), out
    assert "pip install 'logkeeper[spark]'" in out and "make spark" in out
    assert not CLASS_NAME.search(out)


def test_the_buffer_utilization_metric_says_what_the_stats_line_says() -> None:
    """Regression: the metric was int(100 x utilization), 0 for a round whose stats line said 0.4%."""
    stats = CleanerStats()
    stats.buffer_utilization = 0.004
    line = format_stats(0, "t-0", 0, 10, stats)
    (printed,) = re.findall(r"Buffer utilization: ([\d.]+)%", line)
    assert buffer_utilization_percent([0.001, 0.004]) == float(printed) == 0.4
    assert buffer_utilization_percent([]) == 0.0


def test_setup_builds_without_license_warnings() -> None:
    """setuptools >= 77 prints a page of deprecation warnings per build step for a license table
    (54 lines at `make setup`); an SPDX expression is the fix, and needs setuptools >= 77."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in project["build-system"]["requires"]


def test_ctrl_c_exits_130_with_one_line_and_no_traceback(fx: Fixture, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from logkeeper.tools import verify

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "verify_path", interrupted)
    code, out, err = run(capsys, "verify", str(fx.directory.parent))
    assert (code, out, err) == (130, "", "logkeeper verify: interrupted\n")


def test_dump_log_refuses_a_file_not_named_for_its_base_offset(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "orders.log"
    odd.write_bytes(b"x" * 100)
    with pytest.raises(SystemExit) as exc:
        main(["dump-log", str(odd)])
    out, err = capsys.readouterr()
    assert (exc.value.code, out) == (2, "")
    assert f"{odd}: not a segment file name" in err
