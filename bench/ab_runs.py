"""What the A/B scripts (bench/ab_*.py) share: another copy of the package runs as A (e.g. the
commit before a change), this tree as B, their runs alternated so that the machine's drift falls
on both, and each figure's median reported. Prepare A with:

    mkdir -p /tmp/lk/prev && git archive <commit> sidecar | tar -x -C /tmp/lk/prev
    cp sidecar/logkeeper/aot/*.so /tmp/lk/prev/sidecar/logkeeper/aot/

(the kernels are the tree's own when the commit's kernel sources are the same; else build them
there: ``PYTHONPATH=/tmp/lk/prev/sidecar python -m logkeeper.aot.build --force``).
"""

from __future__ import annotations

import argparse
import compileall
import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from logkeeper.server.process import SidecarProcess


def add_baseline(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("baseline", help="the sidecar/ directory of the copy to run as A")


def prepare_baseline(ap: argparse.ArgumentParser, baseline: str) -> None:
    """Refuse a baseline that holds no package; then compile both trees' modules. A process of
    either side would otherwise compile what has no current bytecode on every start (the copy A
    was made from an archive has none; make setup runs with PYTHONDONTWRITEBYTECODE=1, so a
    module edited since is compiled again by each process): a cost in one side's wall time that
    is not the code's."""
    if not (Path(baseline) / "logkeeper").is_dir():
        ap.error(f"{baseline} holds no logkeeper package")
    for tree in (Path(baseline), Path(__file__).resolve().parents[1] / "sidecar"):
        compileall.compile_dir(tree, quiet=1)


@contextmanager
def sidecars(work: Path, conf: Mapping[str, Any], baseline: str) -> Iterator[dict[str, SidecarProcess]]:
    """Two sidecars with the same configuration, A running the package in ``baseline`` and B this
    tree's, both stopped on the way out."""
    with SidecarProcess(work / "a", dict(conf), env={"PYTHONPATH": baseline}) as a, \
            SidecarProcess(work / "b", dict(conf)) as b:
        yield {"A": a, "B": b}


def alternated(runs: int) -> Iterator[tuple[int, str]]:
    """(run, side) in the order they run: A first in even runs, B first in odd ones."""
    for r in range(runs):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            yield r, side


def medians(rows: dict[str, list[Sequence[float]]]) -> dict[str, list[float]]:
    """Each side's median of every column of its rows (one row a run)."""
    return {side: [statistics.median(column) for column in zip(*runs, strict=True)] for side, runs in rows.items()}
