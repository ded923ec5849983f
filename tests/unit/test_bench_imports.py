"""Every benchmark script imports: they run only under their make targets (bench, bench-kafka,
bench-spark), so a helper moved between them would otherwise break one unseen until its next run
(bench_spark lost ``cpu_model`` that way)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert "bench_spark" in SCRIPTS and "bench_cleaner" in SCRIPTS


@pytest.mark.parametrize("module", SCRIPTS)
def test_benchmark_script_imports(module: str) -> None:
    # a fresh interpreter per script, with bench/ first on the path as when the script runs
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(BENCH)!r}); import {module}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"bench/{module}.py does not import:\n{done.stderr[-2000:]}"
