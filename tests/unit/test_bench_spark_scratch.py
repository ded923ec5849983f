"""bench_spark checks its scratch space before any work: a 100M-key run on a disk without room
for it failed minutes in, writing its backlog, with a bare ENOSPC traceback."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_spark


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    real = shutil.disk_usage

    def usage(path: Any) -> Any:
        return real(path)._replace(free=free)

    monkeypatch.setattr(bench_spark.shutil, "disk_usage", usage)


def test_a_directory_without_room_for_the_largest_backlog_is_refused_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _free(monkeypatch, 15 * 10**9)
    with pytest.raises(SystemExit) as e:
        bench_spark.check_scratch(tmp_path, 100_000_000)
    message = str(e.value)
    assert str(tmp_path) in message
    assert "100,000,000 keys need about 53.1 GB" in message
    assert "15.0 GB free" in message


def test_a_directory_with_room_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _free(monkeypatch, 60 * 10**9)
    bench_spark.check_scratch(tmp_path, 100_000_000)
    bench_spark.check_scratch(tmp_path, 1_000_000)
