"""What every logkeeper-vs-Kafka benchmark shares: the one-line comparison, the commit and machine
lines of a results file, and a bar plot of the ratios as SVG (no plotting library in the venv).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def side_by_side_line(case: str, logkeeper_mb_s: float, kafka_mb_s: float) -> str:
    """The fixed form every comparison prints (issue 23)."""
    ratio = logkeeper_mb_s / kafka_mb_s if kafka_mb_s else float("inf")
    return f"side-by-side {case}: logkeeper {logkeeper_mb_s:.1f} MB/s, kafka {kafka_mb_s:.1f} MB/s, ratio {ratio:.2f}x"


def commit() -> str:
    """The commit measured (short hash, '+dirty' when the code measured has uncommitted changes)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        # the code these benchmarks run (other engineers' work in progress on Spark does not count)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "sidecar", "bench",
                                "interop", ":!bench/results", ":!sidecar/logkeeper/spark", ":!bench/bench_spark.py"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def cpu_model(unknown: str = "unknown CPU") -> str:
    """The CPU's model name from /proc/cpuinfo (``unknown`` where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return unknown


def parse_bench_args(ap: argparse.ArgumentParser, script: str,
                     argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """A benchmark's arguments (``argv``, else the command line's) and the command its results file
    records: ``python bench/<script>`` with those arguments."""
    args = ap.parse_args(argv)
    return args, f"python bench/{script} " + " ".join(argv if argv is not None else sys.argv[1:])


def command_and_date(command: str) -> list[str]:
    """A results file's command line, and its date and commit line."""
    return [f"- command: `{command.strip()}`", date_and_commit()]


def date_and_commit() -> str:
    """A results file's date (UTC) and commit line."""
    return f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}; commit {commit()}"


def publish(lines: list[str], path: Path) -> None:
    """Print a results file and write it to ``path``."""
    text = "\n".join(lines)
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def machine(*extra: str, unknown: str = "unknown CPU") -> str:
    """A results file's machine line: nproc, the CPU, Python's version and ``extra`` (libraries')."""
    return ", ".join([f"nproc {os.cpu_count()}", cpu_model(unknown), f"Python {platform.python_version()}", *extra])


def machine_line() -> str:
    cpu = cpu_model("unknown CPU")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "java ?"
    return f"{cpu}, {os.cpu_count()} cores; Linux {platform.release()}; Python {platform.python_version()}; {java}"


def kernels_line() -> str:
    """Which kernels a fresh ``logkeeper`` process runs: the compiled module, or numba's JIT (a
    stale or missing module: its source stamp covers the kernel modules, so an edit to one makes
    the figures a JIT run's until ``make compile``)."""
    probe = "from logkeeper import aot; print(aot.mode(), getattr(aot._compiled, '__name__', ''))"
    mode, _, module = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                                     text=True).stdout.strip().partition(" ")
    return {"aot": f"compiled ahead of time ({module}; no numba in the process)",
            "jit": "numba's JIT (LOGKEEPER_KERNELS=jit, or the compiled module missing or stale)"}.get(mode, mode)


def svg_bars(title: str, bars: list[tuple[str, float]], *, target: float | None = None) -> str:
    """Horizontal bars of ``(label, ratio)``, a line at 1x (parity) and at ``target``."""
    width, left, row, top = 760, 260, 22, 40
    top_value = max([1.0, *(v for _, v in bars), *([target] if target else [])]) * 1.1
    scale = (width - left - 60) / top_value
    height = top + row * len(bars) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="14">{escape(title)}</text>']
    for i, (label, value) in enumerate(bars):
        y = top + i * row
        colour = "#2a7" if value >= (target or 1.0) else "#d84"
        out.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y + 3}" width="{max(value * scale, 1):.1f}" height="{row - 6}" '
                   f'fill="{colour}"/>')
        out.append(f'<text x="{left + value * scale + 4:.1f}" y="{y + 14}">{value:.2f}x</text>')
    for mark, dash in ((1.0, "4,3"), *(((target, "1,2"),) if target else ())):
        x = left + mark * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 24}" stroke="black" '
                   f'stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle">{mark:g}x</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
