"""bench_unlink runs end to end on a few segments (it runs in full only under ``make bench``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_unlink_bench_times_every_thread_count_and_leaves_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    sys.modules.pop("bench_unlink", None)
    import bench_unlink

    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "unlink.md"
    assert bench_unlink.main(["--segments", "3", "--rounds", "1", "--dir", str(work), "--host-only",
                              "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith(f"| `{work}`")]
    assert len(rows) == 1
    cells = rows[0].strip("|").split("|")[1:]
    assert len(cells) == len(bench_unlink.THREADS)
    assert all(c.strip().endswith("x)") for c in cells)
    assert list(work.iterdir()) == []  # the segments and the bench's directory are gone


def test_the_summary_compares_the_directory_with_a_journaled_ext4_at_the_commands_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_unlink

    threads = bench_unlink.FILE_CALL_THREADS
    here = {t: 0.4 for t in bench_unlink.THREADS}
    plain = {t: 0.1 for t in bench_unlink.THREADS}
    line, = bench_unlink.summary([("here", here), ("loop device: ext4, journal, nodiscard", plain)])
    assert f"{threads} threads" in line and "took 0.400 s, 4.00x" in line
    assert bench_unlink.summary([("here", here)]) == []
