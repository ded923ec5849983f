"""pwrite_all (logkeeper/fileio.py): everything is written, whatever short writes happen."""

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
