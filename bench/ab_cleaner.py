"""A/B of the in-process cleaner between two source trees (a change against its parent).

Run: ``.venv/bin/python bench/ab_cleaner.py OLD_TREE NEW_TREE [--segments 10] [--rounds 3] [--runs 5]``,
where each tree is a checkout of this repository with its kernels compiled (``make compile``; for
a ``git worktree`` of an older commit, copy in the ``_kernels_*.so`` built from its sources). The
bench_cleaner workload (``--segments`` 1M-record segments, 100k distinct keys each) is made once
and shared; each tree cleans a fresh copy of it ``--runs`` times in a child process of its own
(``PYTHONPATH`` = the tree's ``sidecar``), the trees alternating ``--rounds`` times so that the
host's drift falls on both alike. Prints each process's best and median wall time of
``bench_cleaner.timed_run_clean`` and the ratio of the best over all rounds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys
from pathlib import Path
tree, root, work, segments, runs = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, tree + "/bench")
import bench_cleaner as bc
if not root.exists():
    root.mkdir(parents=True)
    bc.make_workload(root, segments, 1_000_000, 100_000 * segments)
times = sorted(bc.timed_run_clean(root, work)[0] for _ in range(runs))
print(times[0], times[len(times) // 2])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ab-cleaner-") as tmp:
        root, work = Path(tmp) / "workload", Path(tmp) / "work"
        for i in range(args.rounds):
            for name, tree in (("old", args.old), ("new", args.new)):
                env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "sidecar")}
                done = subprocess.run([sys.executable, "-c", CHILD, str(tree.resolve()), str(root), str(work),
                                       str(args.segments), str(args.runs)], env=env, capture_output=True, text=True,
                                      check=True, timeout=1800)
                low, median = (float(x) for x in done.stdout.split()[-2:])
                best[name] = min(best.get(name, low), low)
                print(f"round {i + 1} {name} ({tree}): best {low:.3f} s, median {median:.3f} s", flush=True)
    print(f"best of all rounds: old {best['old']:.3f} s, new {best['new']:.3f} s: new / old = "
          f"{best['new'] / best['old']:.3f}")


if __name__ == "__main__":
    main()
