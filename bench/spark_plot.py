"""bench_spark's plot as a hand-written SVG (no plotting library in the venv): wall time (log scale)
against backlog keys (log scale), one line and marker shape a path."""

from __future__ import annotations

import math
from pathlib import Path

W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 440, 70, 210, 30, 50
COLOURS = ["#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"]


def _ticks(lo: float, hi: float) -> list[float]:
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** e
            if lo <= v <= hi:
                out.append(v)
    return out


def _label(v: float, unit: str) -> str:
    if unit == "keys":
        return f"{v / 1e6:g}M"
    return f"{v:g} s"


def write_svg(path: Path, points: list[tuple[int, dict[str, float]]], paths: list[str]) -> None:
    xs = [float(k) for k, _ in points]
    ys = [v for _, d in points for v in d.values()]
    x0, x1 = min(xs) / 1.3, max(xs) * 1.3
    y0, y1 = min(ys) / 1.5, max(ys) * 1.5

    def px(x: float) -> float:
        return LEFT + (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        return H - BOTTOM - (math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0)) * (H - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12"><rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14">Compacting a backlog: wall time (s) against distinct keys '
           '(log-log; 2 shared cores)</text>']
    for v in _ticks(y0, y1):
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{_label(v, "s")}</text>')
    for v in xs:
        out.append(f'<line x1="{px(v):.1f}" x2="{px(v):.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#eee"/>'
                   f'<text x="{px(v):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{_label(v, "keys")}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">distinct keys in the backlog '
               '(1.5 records a key, ~118 B a record)</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" fill="none" '
               'stroke="#333"/>')
    for i, name in enumerate(paths):
        pts = [(px(k), py(d[name])) for k, d in points if name in d]
        if not pts:
            continue
        c = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="5,3"' if name.startswith("spark") else ""
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{c}"/>' for x, y in pts]
        ly = TOP + 14 + 20 * i
        out.append(f'<line x1="{W - RIGHT + 12}" x2="{W - RIGHT + 36}" y1="{ly}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="2"{dash}/><text x="{W - RIGHT + 42}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
