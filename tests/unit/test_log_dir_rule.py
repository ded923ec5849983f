"""log_dir_rule.py: what a log dir is, and every command that writes refusing anything else
untouched (issue 19: `logkeeper clean demo-data` one level too high and `logkeeper recover
~/Documents` created segments in any name-N folder and exited 0)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper.cli import main
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log_dir_rule import (
    NotALogDirError,
    check_sidecar_log_dir,
    is_log_dir,
    is_partition_dir,
    nearest_log_dir_below,
    prepare_sidecar_log_dir,
    require_log_dir,
)
from logkeeper.records.builder import Record, build_batch


def make_partition(path: Path, records: int = 3) -> Path:
    log = Log(path, LogConfig.from_props({}))
    for i in range(records):
        log.append(build_batch([Record(0, 1_700_000_000_000, b"k%d" % i, b"v")]))
    log.close()
    return path


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    """Every path below ``root`` with its size and mtime: what "untouched" means."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size if p.is_file() else 0, st.st_mtime)
    return out


@pytest.fixture
def demo_data(tmp_path: Path) -> Path:
    """As `make demo` leaves it: demo-data/disk-0 and disk-1 are the log dirs (named like
    partitions!), holding accounts-N partitions and checkpoint files."""
    root = tmp_path / "demo-data"
    for disk in ("disk-0", "disk-1"):
        make_partition(root / disk / f"accounts-{disk[-1]}")
        (root / disk / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    return root


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    root = tmp_path / "Documents"
    (root / "taxes-2023").mkdir(parents=True)
    (root / "taxes-2023" / "receipt.pdf").write_bytes(b"%PDF")
    (root / "draft-2").mkdir()
    (root / "notes.txt").write_text("hello")
    return root


def test_what_a_log_dir_is(tmp_path: Path, demo_data: Path, documents: Path) -> None:
    disk = demo_data / "disk-0"
    assert is_log_dir(disk) and is_partition_dir(disk / "accounts-0")
    assert not is_log_dir(demo_data) and not is_partition_dir(disk)  # disk-0 holds no segment
    assert not is_log_dir(documents) and not is_partition_dir(documents / "taxes-2023")
    only_partitions = tmp_path / "fresh"
    make_partition(only_partitions / "orders-3")  # no checkpoint yet: its partitions make it one
    assert is_log_dir(only_partitions)
    for marker in ("meta.properties", "cleaner-offset-checkpoint", "log-start-offset-checkpoint"):
        (tmp_path / marker).mkdir()
        (tmp_path / marker / marker).write_text("")
        assert is_log_dir(tmp_path / marker)
    assert not is_log_dir(tmp_path / "missing")
    assert nearest_log_dir_below(demo_data) == disk
    assert nearest_log_dir_below(documents) is None


@pytest.mark.parametrize("command", [["clean"], ["recover"], ["resolve-duplicates"]])
def test_commands_that_write_refuse_a_dir_above_the_log_dir_untouched(
        demo_data: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    before = snapshot(demo_data)
    assert main([*command, str(demo_data)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"logkeeper {command[0]}: {demo_data} is not a log dir: expected partition directories named "
                   "<topic>-<partition> holding .log segments, or Kafka's checkpoint files "
                   "(recovery-point-offset-checkpoint, ...) or meta.properties; nothing was changed. The nearest log "
                   f"dir below it is {demo_data / 'disk-0'}: logkeeper {command[0]} {demo_data / 'disk-0'}\n")
    assert snapshot(demo_data) == before


@pytest.mark.parametrize("command", ["clean", "recover", "verify"])
def test_commands_refuse_a_users_documents_untouched(documents: Path, capsys: pytest.CaptureFixture[str],
                                                      command: str) -> None:
    before = snapshot(documents)
    assert main([command, str(documents)]) == 2
    err = capsys.readouterr().err
    assert f"{documents} is not a log dir" in err and "nearest" not in err
    assert snapshot(documents) == before


def test_clean_names_the_log_dir_of_a_partition_dir(demo_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partition = demo_data / "disk-0" / "accounts-0"
    before = snapshot(demo_data)
    assert main(["clean", str(partition)]) == 2
    assert capsys.readouterr().err == (
        f"logkeeper clean: {partition} is a partition directory, not a log dir; nothing was changed. Its log dir "
        f"is {partition.parent}: logkeeper clean {partition.parent}\n")
    assert snapshot(demo_data) == before


def test_a_missing_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotALogDirError, match="does not exist"):
        require_log_dir(tmp_path / "nope", "clean")
    assert not (tmp_path / "nope").exists()


def test_the_sidecar_makes_new_log_dirs_only_from_missing_or_empty_ones(tmp_path: Path, documents: Path) -> None:
    fresh_volume = tmp_path / "pvc"
    (fresh_volume / "lost+found").mkdir(parents=True)
    for path in (tmp_path / "a" / "b", fresh_volume):
        check_sidecar_log_dir(path, create=False)
        prepare_sidecar_log_dir(path)
        assert is_log_dir(path)
        assert (path / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"
    before = snapshot(documents)
    with pytest.raises(NotALogDirError, match=r"neither empty nor a log dir.*--create-log-dirs"):
        check_sidecar_log_dir(documents, create=False)
    assert snapshot(documents) == before
    check_sidecar_log_dir(documents, create=True)  # the explicit flag
    prepare_sidecar_log_dir(documents)
    assert is_log_dir(documents)


def test_sidecar_refuses_a_configured_dir_that_is_not_a_log_dir(tmp_path: Path, documents: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text("secret-token-0123456789\n")
    config = tmp_path / "sidecar.yaml"
    config.write_text(f"node:\n  log.dirs: [{tmp_path / 'new'}, {documents}]\n"
                      f"sidecar:\n  token.file: {token}\n  listen: ['127.0.0.1:0']\n")
    before = snapshot(documents)
    assert main(["sidecar", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"log dir {documents} (node.log.dirs) is neither empty nor a log dir" in err
    assert snapshot(documents) == before
    assert not (tmp_path / "new").exists()  # every dir is checked before any is made
