"""Unlinking a cleaned log's replaced segments: how long the files take to go, by thread count and
by filesystem.

``logkeeper clean`` ends by unlinking the segments its rounds replaced (``log/pending_deletes.py``
through ``fileio.call_each``), and on this project's host that is the largest phase outside
cleaning (bench/results/kafka_cleaner.md). This measures the unlinks alone, on segment-shaped
files (a ~1 MiB ``.log``, a small ``.index`` and ``.timeindex``, as bench_kafka_cleaner's 1 MiB
workload), written and synced first:

1. in the benchmark's directory (``--dir``, default ``$TMPDIR``: the host's disk), on 1, 4, 8 and 16
   threads: ratio = the sequential unlinks' seconds / these;
2. as root with mkfs.ext4: the same on fresh ext4 images mounted through a loop device in that
   directory, with and without a journal and with and without online discard (``-o discard``),
   to show what the host's own mount costs (ext4 without a journal frees and discards each file's
   blocks inside its unlink; with a journal the discards wait for the commit).

Run: ``.venv/bin/python bench/bench_unlink.py [--segments N] [--rounds R] [--host-only] [--out FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from side_by_side import command_and_date, machine, parse_bench_args, publish

from logkeeper.fileio import FILE_CALL_THREADS, call_each

THREADS = (1, 4, 8, 16)
SHAPE = ((".log", 1_037_608), (".index", 216), (".timeindex", 12))  # bench_kafka_cleaner's first segment
IMAGE_BYTES = 4 << 30
MOUNTS = (("ext4, journal, discard", [], "discard"), ("ext4, journal, nodiscard", [], "nodiscard"),
          ("ext4, no journal, discard", ["-O", "^has_journal"], "discard"),
          ("ext4, no journal, nodiscard", ["-O", "^has_journal"], "nodiscard"))


def write_segments(d: Path, count: int) -> list[list[Path]]:
    """``count`` segments' files in ``d``, synced; each segment's paths (one ``call_each`` item)."""
    d.mkdir(parents=True)
    blob = os.urandom(max(size for _, size in SHAPE))
    segments = []
    for i in range(count):
        files = [d / f"{i * 10_000:020d}{suffix}" for suffix, _ in SHAPE]
        for path, (_, size) in zip(files, SHAPE):
            path.write_bytes(blob[:size])
        segments.append(files)
    os.sync()
    return segments


def unlink_s(d: Path, count: int, threads: int) -> float:
    """Seconds to unlink ``count`` fresh segments' files in ``d`` on ``threads`` threads."""
    segments = write_segments(d, count)
    started = time.perf_counter()
    call_each(lambda files: [os.unlink(p) for p in files], segments, threads=threads)
    seconds = time.perf_counter() - started
    d.rmdir()
    return seconds


def medians(d: Path, count: int, rounds: int) -> dict[int, float]:
    """The median of ``rounds`` for each thread count, rounds interleaved."""
    runs: dict[int, list[float]] = {t: [] for t in THREADS}
    for _ in range(rounds):
        for t in THREADS:
            runs[t].append(unlink_s(d / "segments", count, t))
    return {t: statistics.median(v) for t, v in runs.items()}


@contextlib.contextmanager
def loop_ext4(root: Path, mkfs_args: list[str], option: str) -> Iterator[Path]:
    image, mnt = root / "ext4.img", root / "mnt"
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)
    mnt.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", *mkfs_args, str(image)], check=True)
    subprocess.run(["mount", "-o", f"loop,{option}", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        mnt.rmdir()
        image.unlink()


def describe_mount(path: Path) -> str:
    """The filesystem ``path`` is on: its type, mount options and, for ext4, whether it journals
    (a jbd2 entry of its device in /proc/fs/jbd2)."""
    found = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", str(path)], capture_output=True,
                           text=True).stdout.split()
    if len(found) != 3:
        return "unknown"
    source, fstype, options = found
    if fstype == "ext4":
        jbd2 = Path("/proc/fs/jbd2")
        journal = jbd2.is_dir() and any(jbd2.glob(Path(source).name + "-*"))
        fstype += ", journal" if journal else ", no journal"
    return f"{fstype}, {options}"


def row(where: str, m: dict[int, float]) -> str:
    return f"| {where} | " + " | ".join(f"{m[t]:.3f} ({m[1] / m[t]:.2f}x)" for t in THREADS) + " |"


def summary(results: list[tuple[str, dict[int, float]]]) -> list[str]:
    """What the benchmark's directory costs against a journaled ext4 without discard, at the
    command's thread count (when that row was measured)."""
    by_where = dict(results)
    plain = by_where.get("loop device: ext4, journal, nodiscard")
    if plain is None or FILE_CALL_THREADS not in plain:
        return []
    here, there = results[0][1][FILE_CALL_THREADS], plain[FILE_CALL_THREADS]
    return [f"At the command's {FILE_CALL_THREADS} threads the benchmark's directory took {here:.3f} s, "
            f"{here / there:.2f}x a journaled ext4 without discard ({there:.3f} s)."]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=1149)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--host-only", action="store_true", help="no loop-device rows")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "unlink.md")
    args, command = parse_bench_args(ap, "bench_unlink.py", argv)
    root = Path(tempfile.mkdtemp(prefix="bench-unlink-", dir=args.dir))
    try:
        mount = describe_mount(root)
        results = [(f"`{args.dir}` ({mount})", medians(root, args.segments, args.rounds))]
        print(row(*results[0]), flush=True)
        loops = not args.host_only
        if loops and (os.geteuid() != 0 or not shutil.which("mkfs.ext4")):
            print("bench_unlink: the loop-device rows need root and mkfs.ext4; skipped")
            loops = False
        for label, mkfs_args, option in MOUNTS if loops else ():
            with loop_ext4(root, mkfs_args, option) as mnt:
                results.append((f"loop device: {label}", medians(mnt, args.segments, args.rounds)))
            print(row(*results[-1]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        "# Unlinking a cleaned log's replaced segments, by thread count and filesystem",
        "",
        *command_and_date(command),
        f"- machine: {machine()}",
        f"- files: {args.segments:,} segments of {', '.join(f'{s} ({n:,} B)' for s, n in SHAPE)}, written and synced "
        f"before each run; unlinked through `fileio.call_each` (a segment's files an item, as "
        f"`log/pending_deletes.py`); median of {args.rounds} rounds, thread counts interleaved; the command's "
        f"threads: `FILE_CALL_THREADS` = {FILE_CALL_THREADS}",
        "- loop-device rows: a fresh 4 GiB ext4 image in the same directory, mounted `-o loop,<option>` "
        "(its discards punch holes in the image, on the host's disk)",
        "",
        "Seconds to unlink them all (the sequential unlinks' seconds / these):",
        "",
        "| where | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in THREADS) + " |",
        "|---|" + "---:|" * len(THREADS),
        *(row(where, m) for where, m in results),
        "",
        *summary(results),
    ]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
