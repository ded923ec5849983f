"""SIGKILL at random moments: nothing acknowledged as flushed is ever lost.

A forked child runs a LogManager over two log directories (its own scheduler thread writes
checkpoints every few ms, retention trims old segments) and appends to four partitions; after
``LogManager.flush`` returns it sends ``(partition, recovery point)`` to the parent through a
pipe. The parent kills it with SIGKILL after a random delay (so also while it starts up,
recovers, rolls, deletes segments or writes a checkpoint), then restarts a LogManager on the
directories and checks, for every partition:

- every acknowledged offset below the recovery point, from the log start offset on, is present
  and readable, and its record is the one written (value = its offset);
- the log end offset is at least the acknowledged one;
- ``logkeeper verify`` (``tools.verify.verify_path``) finds no problem in either directory;
- no temporary file (``.tmp``, ``.cleaned``, ``.swap``, ``.deleted``) is left.

Then it shuts the manager down cleanly, and for half the rounds deletes the clean-shutdown
markers so the next child starts with an unclean recovery too. Children are forked from this
already-imported process (numba is compiled once). Kills: LOGKEEPER_CRASH_ITERATIONS (200 by
default; ``make crash`` sets 2000).
"""

from __future__ import annotations

import os
import random
import signal
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from logkeeper.tools.verify import verify_path

ITERATIONS = int(os.environ.get("LOGKEEPER_CRASH_ITERATIONS", "200"))
PARTITIONS = [TopicPartition("crash", i) for i in range(4)]
ACK = struct.Struct("<IQ")  # partition, recovery point: 12 bytes, written atomically (< PIPE_BUF)
MAX_CHILD_S = 0.12
TEMP_SUFFIXES = (".tmp", ".cleaned", ".swap", ".deleted")


def manager_props(dirs: list[Path]) -> dict[str, Any]:
    return {
        "log.dirs": [str(d) for d in dirs],
        "log.segment.bytes": 16 * 1024,
        "log.index.size.max.bytes": 8 * 1024,  # small preallocated indexes: verify reads them whole
        "log.retention.bytes": 48 * 1024,  # per partition: old segments go while the child runs
        "log.retention.ms": -1,
        "log.segment.delete.delay.ms": 20,
        "log.initial.task.delay.ms": 0,
        "log.retention.check.interval.ms": 30,
        "log.flush.offset.checkpoint.interval.ms": 10,
        "log.flush.start.offset.checkpoint.interval.ms": 10,
        "num.recovery.threads.per.data.dir": 2,
    }


def child(dirs: list[Path], ack_fd: int, seed: int) -> None:  # pragma: no cover - runs in the child
    rng = random.Random(seed)
    m = LogManager(ManagerConfig.from_props(manager_props(dirs)))  # own scheduler thread, wall clock
    m.startup()
    logs = [m.get_or_create_log(tp) for tp in PARTITIONS]
    while True:
        i = rng.randrange(len(PARTITIONS))
        leo = logs[i].log_end_offset
        now = int(time.time() * 1000)
        n = rng.randint(1, 8)
        data = build_batch([Record(leo + k, now, None, str(leo + k).encode() * rng.randint(1, 6))
                            for k in range(n)])
        m.append(PARTITIONS[i], data)
        if rng.random() < 0.3:
            recovery_point = m.flush(PARTITIONS[i])
            os.write(ack_fd, ACK.pack(i, recovery_point))


def run_child(dirs: list[Path], seed: int, delay_s: float) -> dict[int, int]:
    """Fork a child, kill it after ``delay_s``; return its acknowledgements {partition: offset}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        try:
            child(dirs, w, seed)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(3)
    os.close(w)
    time.sleep(delay_s)
    os.kill(pid, signal.SIGKILL)
    _pid, status = os.waitpid(pid, 0)
    data = bytearray()
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"child (seed {seed}) died before the kill: exit status {os.waitstatus_to_exitcode(status)}")
    acks: dict[int, int] = {}
    for k in range(0, len(data) - len(data) % ACK.size, ACK.size):
        i, offset = ACK.unpack_from(data, k)
        acks[i] = max(acks.get(i, 0), offset)
    return acks


def check_restart(dirs: list[Path], acked: dict[int, int], where: str) -> int:
    """Restart on ``dirs`` and check the acknowledged records; return how many were read."""
    checked = 0
    m = LogManager(ManagerConfig.from_props(manager_props(dirs)), scheduler=Scheduler())  # no thread
    m.startup()
    try:
        for i, tp in enumerate(PARTITIONS):
            lg = m.get_log(tp)
            want = acked.get(i, 0)
            if lg is None:
                assert want == 0, f"{where}: {tp} acknowledged up to {want} is missing"
                continue
            assert lg.log_end_offset >= want, (
                f"{where}: {tp} ends at {lg.log_end_offset}, acknowledged up to {want}")
            offset = lg.log_start_offset
            while offset < want:
                records = [r for r in read_records(m.read(tp, offset, 1 << 20).records) if r.offset >= offset]
                assert records and records[0].offset == offset, f"{where}: {tp} offset {offset} unreadable"
                for rec in records:
                    if rec.offset >= want:
                        break
                    checked += 1
                    digits = str(rec.offset).encode()
                    assert rec.value is not None and rec.value == digits * (len(rec.value) // len(digits)), (
                        f"{where}: {tp} offset {rec.offset} holds {rec.value!r}")
                offset = records[-1].offset + 1
        for d in dirs:
            report = verify_path(d)
            assert report.ok, f"{where}: verify {d}: " + "; ".join(map(str, report.problems[:5]))
            left = [str(p) for p in d.rglob("*") if p.name.endswith(TEMP_SUFFIXES)]
            assert not left, f"{where}: temporary files left: {left}"
    finally:
        m.shutdown()
    return checked


def warm_up(tmp_path: Path) -> None:
    """Run every compiled kernel the child needs once here, so children inherit them compiled (a
    child killed while compiling would never fill the numba cache, and would never get to work)."""
    dirs = [tmp_path / "warm0", tmp_path / "warm1"]
    m = LogManager(ManagerConfig.from_props(manager_props(dirs)), scheduler=Scheduler())
    m.startup()
    for tp in PARTITIONS:
        m.get_or_create_log(tp)
        for k in range(3):
            now = int(time.time() * 1000)
            m.append(tp, build_batch([Record(k, now, None, str(k).encode())]))
        m.flush(tp)
    m.shutdown()
    check_restart(dirs, {}, "warm-up")


@pytest.mark.timeout(max(600, 2 * ITERATIONS))  # make crash's 2000 kills outlast the default 600 s
def test_sigkill_loses_nothing_flushed(tmp_path: Path) -> None:
    warm_up(tmp_path)
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    master = random.Random(int(os.environ.get("LOGKEEPER_CRASH_SEED", "20261121")))
    acked: dict[int, int] = {}
    productive = 0
    checked = 0
    started = time.monotonic()
    for n in range(ITERATIONS):
        seed = master.randrange(1 << 30)
        delay = master.uniform(0.0, MAX_CHILD_S)
        acks = run_child(dirs, seed, delay)
        productive += bool(acks)
        for i, offset in acks.items():
            acked[i] = max(acked.get(i, 0), offset)
        checked += check_restart(dirs, acked, f"kill {n + 1} (seed {seed}, after {delay * 1000:.0f} ms)")
        if master.random() < 0.5:
            for d in dirs:
                (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # the next child recovers
    elapsed = time.monotonic() - started
    # children that never got to acknowledge anything would test nothing (e.g. a stall at startup)
    assert productive >= ITERATIONS // 10, f"only {productive} of {ITERATIONS} children acknowledged a flush"
    line = (f"SIGKILL: {ITERATIONS} kills in {elapsed:.1f} s; {productive} children acknowledged flushes; "
            f"{checked} acknowledged records checked, 0 lost; acknowledged up to {acked}")
    print(line)
    if os.environ.get("LOGKEEPER_CRASH_REPORT"):  # make crash prints the figures at the end
        with open(os.environ["LOGKEEPER_CRASH_REPORT"], "a") as f:
            f.write(line + "\n")
