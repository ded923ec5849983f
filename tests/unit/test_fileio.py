"""logkeeper/fileio.py: pwrite_all writes everything whatever short writes happen; replace_file_durably
leaves the old or the new bytes after a crash at any step, in its documented order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeeper import fileio


def test_short_writes_are_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite
    calls: list[int] = []

    def at_most_3(fd: int, data: memoryview, position: int) -> int:  # a signal cut every write short
        calls.append(position)
        return real(fd, bytes(data[:3]), position)

    monkeypatch.setattr(fileio.os, "pwrite", at_most_3)
    path = tmp_path / "f"
    path.write_bytes(b"." * 20)
    fd = os.open(path, os.O_WRONLY)
    try:
        fileio.pwrite_all(fd, b"abcdefghij", 5)
        fileio.pwrite_all(fd, b"XYZW", 0, written=2)  # the first 2 bytes already went
    finally:
        os.close(fd)
    assert path.read_bytes() == b"..ZW.abcdefghij....."
    assert calls == [5, 8, 11, 14, 2]


def test_replace_durably_runs_its_steps_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write tmp -> fsync it -> rename over the file -> fsync the directory."""
    events: list[str] = []
    real_fsync, real_replace, real_open = os.fsync, os.replace, os.open
    opened: dict[int, str] = {}

    def record_open(path: str | Path, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        opened[fd] = Path(path).name or str(path)
        return fd

    def record_fsync(fd: int) -> None:
        events.append("fsync " + opened.get(fd, "?"))
        real_fsync(fd)

    def record_replace(src: str | Path, dst: str | Path) -> None:
        events.append(f"replace {Path(src).name} {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "open", record_open)
    monkeypatch.setattr(fileio.os, "fsync", record_fsync)
    monkeypatch.setattr(fileio.os, "replace", record_replace)
    target = tmp_path / "checkpoint"
    target.write_bytes(b"old")
    fileio.replace_file_durably(target, b"new", on_step=lambda step: events.append(step))
    assert events == ["fsync checkpoint.tmp", "tmp-written", "replace checkpoint.tmp checkpoint", "renamed",
                      f"fsync {tmp_path.name}"]
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


@pytest.mark.parametrize("step", ["tmp-written", "renamed"])
def test_a_crash_at_any_step_leaves_the_old_or_the_new_bytes(tmp_path: Path, step: str) -> None:
    target = tmp_path / "marker"
    target.write_bytes(b"old")

    def crash(at: str) -> None:
        if at == step:
            raise RuntimeError(f"crash at {at}")

    with pytest.raises(RuntimeError):
        fileio.replace_file_durably(target, b"new", on_step=crash)
    assert target.read_bytes() == (b"old" if step == "tmp-written" else b"new")
    fileio.replace_file_durably(target, b"newer")  # a stray temporary file is truncated and reused
    assert target.read_bytes() == b"newer"
    assert not (tmp_path / ("marker" + fileio.TMP_SUFFIX)).exists()


@pytest.mark.parametrize("threads", [1, fileio.FILE_CALL_THREADS])
def test_call_each_makes_every_call_and_raises_the_first_error(threads: int) -> None:
    made: list[int] = []

    def call(item: int) -> None:
        made.append(item)
        if item in (3, 7):
            raise OSError(5, f"failed {item}")

    items = list(range(10))
    with pytest.raises(OSError, match="failed 3"):
        fileio.call_each(call, items, threads)
    assert sorted(made) == items


def test_call_each_of_nothing_or_one() -> None:
    made: list[int] = []
    fileio.call_each(made.append, [])
    fileio.call_each(made.append, [1])
    assert made == [1]
