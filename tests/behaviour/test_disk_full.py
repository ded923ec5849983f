"""A log dir on a full disk goes offline; the process and the other dirs go on (issue 17, point 3).

On a real small file system: a tmpfs mounted by the test (root only; skipped with the reason
elsewhere, see tests/disk.py), next to a healthy dir on the test's own disk.

* In process: a partition on the tmpfs is appended to until the disk is full; the append fails
  with KafkaStorageError naming the dir, the dir is offline with ENOSPC in its status, its
  partition is listed offline; the healthy dir keeps appending, reading and creating partitions.
  After the disk is grown (space freed), a restart serves every acknowledged record of both.
* As processes (tests/disk_full_child.py), the issue's reproduction: fill, SIGKILL, restart. The
  restart must not die of a signal (it died of SIGBUS, exit 135, rebuilding an index on the full
  dir); it loads both dirs and serves what the full one holds, takes the full dir offline at the
  first append that needs space, and serves the healthy one; after the repair, everything
  acknowledged is back.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logkeeper.errors import KafkaStorageError
from logkeeper.log.log_dir import CLEAN_SHUTDOWN_FILE
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import Record, build_batch
from logkeeper.tools.verify import verify_path
from tests.disk import resize_tmpfs, small_tmpfs
from tests.disk_full_child import read_all  # the child checks its records the same way

REPO = Path(__file__).resolve().parents[2]
CHILD = REPO / "tests" / "disk_full_child.py"
ENOSPC = os.strerror(errno.ENOSPC)
PAD = b"v" * 2000


def value(tp: TopicPartition, offset: int) -> bytes:
    return f"{tp}:{offset}:".encode() + PAD


def start(dirs: list[Path]) -> LogManager:
    m = LogManager(ManagerConfig.from_props({"log.dirs": [str(d) for d in dirs], "log.segment.bytes": 256 * 1024}))
    m.startup()
    return m


def append(m: LogManager, tp: TopicPartition, n: int = 4) -> int:
    lg = m.get_log(tp)
    assert lg is not None
    leo = lg.log_end_offset
    m.append(tp, build_batch([Record(leo + k, 0, None, value(tp, leo + k)) for k in range(n)]))
    return leo + n


def check_records(m: LogManager, tp: TopicPartition, acked: int) -> None:
    lg = m.get_log(tp)
    assert lg is not None and lg.log_end_offset >= acked
    got = read_all(m, tp, acked)
    assert all(got.get(o) == value(tp, o) for o in range(acked)), f"{tp}: records below {acked} differ"


def test_a_full_dir_goes_offline_and_the_other_serves(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mnt:
        full, healthy = mnt / "logs", tmp_path / "healthy"
        m = start([full, healthy])
        tp_full, tp_healthy = TopicPartition("t", 0), TopicPartition("t", 1)
        try:
            for tp in (tp_full, tp_healthy):
                m.get_or_create_log(tp, is_new=True)
            assert m.dir_of(tp_full).path == full and m.dir_of(tp_healthy).path == healthy
            acked = {tp_full: 0, tp_healthy: append(m, tp_healthy)}
            with pytest.raises(KafkaStorageError) as e:
                for _ in range(10_000):  # 2 MiB hold about 250 batches of 8 KiB
                    acked[tp_full] = append(m, tp_full)
            assert str(full) in str(e.value) and ENOSPC in str(e.value)
            assert acked[tp_full] > 0

            assert m.offline_log_dirs == [full] and m.live_log_dirs == [healthy]
            status = {s.path: s for s in m.dir_status()}
            assert not status[str(full)].online and ENOSPC in (status[str(full)].error or "")
            assert status[str(healthy)].online and status[str(healthy)].error is None
            offline = m.offline_partitions()
            assert list(offline) == [tp_full] and offline[tp_full].log_dir.path == full
            with pytest.raises(KafkaStorageError, match=str(full)):  # known, offline
                m.append(tp_full, build_batch([Record(0, 0, None, b"v")]))

            for _ in range(50):  # the healthy dir: appends (with rolls), reads, a new partition
                acked[tp_healthy] = append(m, tp_healthy)
            check_records(m, tp_healthy, acked[tp_healthy])
            new = TopicPartition("new", 0)
            m.get_or_create_log(new, is_new=True)
            assert m.dir_of(new).path == healthy
        finally:
            m.shutdown()
        assert (healthy / CLEAN_SHUTDOWN_FILE).exists() and not (full / CLEAN_SHUTDOWN_FILE).exists()

        resize_tmpfs(mnt, "32m")  # the repair: space freed
        m = start([full, healthy])
        try:
            assert m.offline_log_dirs == [] and m.offline_partitions() == {}
            for tp, n in acked.items():
                check_records(m, tp, n)
            append(m, tp_full)
        finally:
            m.shutdown()
        for d in (full, healthy):
            report = verify_path(d)
            assert report.ok, "; ".join(map(str, report.problems))


def run_child(full: Path, healthy: Path, phase: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    done = subprocess.run([sys.executable, str(CHILD), str(full), str(healthy), phase], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, lines


def signal_name(returncode: int) -> str:
    return signal.Signals(-returncode).name if returncode < 0 else f"exit {returncode}"


def test_kill_on_a_full_disk_then_restart_serves_the_healthy_dir(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "6m") as mnt:
        full, healthy = mnt / "logs", tmp_path / "healthy"
        done, out = run_child(full, healthy, "fill")
        assert done.returncode == -signal.SIGKILL, f"{signal_name(done.returncode)}: {done.stderr[-2000:]}"
        acked = out[0]["acked"]
        assert str(full) in out[0]["error"] and ENOSPC in out[0]["error"]
        assert acked["t-0"] > 0

        # the restart on the full disk: recovery must not fault (it died of SIGBUS, exit 135), and
        # needs no free space (the untrimmed index opens without allocating): both dirs load, and
        # every acknowledged record of the full one is served
        done, out = run_child(full, healthy, "restart")
        assert done.returncode == 0, f"{signal_name(done.returncode)}: {done.stderr[-2000:]}"
        assert out[0] == {"online": [str(full), str(healthy)], "offline": []}
        assert out[1]["bad"] == [] and out[1]["leo"] >= acked["t-0"]
        # the first append that needs a block takes the full dir offline; the healthy one serves
        state = out[2]
        assert str(full) in state["refused"] and ENOSPC in state["refused"]
        assert state["offline"] == [str(full)] and ENOSPC in state["errors"][str(full)]
        assert state["offline_partitions"] == {"t-0": str(full)}
        assert out[3]["bad"] == [] and out[3]["served"] == out[3]["leo"] == acked["t-1"] + 50

        resize_tmpfs(mnt, "64m")  # the repair
        done, out = run_child(full, healthy, "check")
        assert done.returncode == 0, f"{signal_name(done.returncode)}: {done.stderr[-2000:]}"
        assert out[0]["online"] == [str(full), str(healthy)] and out[0]["bad"] == []
        assert out[0]["leo"]["t-0"] >= acked["t-0"] and out[0]["leo"]["t-1"] == acked["t-1"] + 50
