"""Helpers of the hand-off tests that run a real sidecar process (tests/crash, tests/spark): a
partition with a random workload in the sidecar's log directory, the records expected before and
after one round, the sidecar's config with the offload on, and checks of a directory after a kill."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logkeeper.cleaner.staging import STAGING_DIR_NAME
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.server.process import SidecarError, SidecarProcess
from logkeeper.tools.verify import verify_path
from tests.cleaner_logs import read_log
from tests.spark_helpers import HOUR, TP, build_log, clean_in_process, config, copy_log_dir

Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
TEMP_SUFFIXES = (".cleaned", ".swap", ".deleted")


def topic_props(seed: int) -> dict[str, Any]:
    """The topic's settings in the sidecar (compacted; the workload's segment sizes)."""
    c = config(seed)
    return {"cleanup.policy": "compact", "segment.bytes": c.segment_bytes,
            "index.interval.bytes": c.index_interval_bytes, "delete.retention.ms": HOUR,
            "file.delete.delay.ms": 0, "min.cleanable.dirty.ratio": 0.5}


def rows_of(log: Log) -> list[Row]:
    return [(r.offset, r.key, r.value, tuple(r.headers)) for r in read_log(log)]


def rows_in(log_dir: Path, seed: int) -> list[Row]:
    """The records of the partition, loaded as a restarted sidecar loads it (swaps finished or
    rolled back, temporary files removed)."""
    log = Log(log_dir / TP.dir_name, LogConfig.from_props(topic_props(seed)), had_clean_shutdown=False,
              recovery_point=0)
    try:
        return rows_of(log)
    finally:
        log.close()


@dataclass
class Workload:
    root: Path  # the sidecar's root; its log directory is root/data
    seed: int
    before: list[Row]
    after: list[Row]  # after one in-process round over [0, active segment base) at the wall clock
    end_offset: int

    @property
    def log_dir(self) -> Path:
        return self.root / "data"


def make_workload(root: Path, seed: int, steps: int = 400) -> Workload:
    log_dir = build_log(root, seed, steps)  # root/data/t-0
    ref = copy_log_dir(log_dir, root.parent / f"{root.name}-reference")
    cfg = LogConfig.from_props(topic_props(seed))
    log = Log(ref / TP.dir_name, cfg)
    before = rows_of(log)
    end = clean_in_process(log, None, now_ms=int(time.time() * 1000))
    after = rows_of(log)
    log.close()
    assert before != after
    return Workload(root, seed, before, after, end)


def sidecar_config(w: Workload, command: list[str] | None, **cleaner: Any) -> dict[str, Any]:
    """Offload on for every log (dirty bytes threshold 0), a fast offload loop, no retry within a test."""
    c: dict[str, Any] = {"log.cleaner.offload.enable": True, "log.cleaner.offload.dirty.bytes.threshold": 0,
                         "log.cleaner.backoff.ms": 200, "log.cleaner.uncleanable.retry.initial.ms": 600_000,
                         "log.cleaner.offload.timeout.ms": 300_000, **cleaner}
    if command is not None:
        c["log.cleaner.offload.command"] = " ".join(command)
    return {"node": {"log.dirs": [str(w.log_dir)], "log.initial.task.delay.ms": 60_000},
            "cleaner": c,
            "topics": {TP.topic: {"partitions": 1, "configs": topic_props(w.seed)}}}


def start_tolerating_death(proc: SidecarProcess) -> bool:
    """Start the sidecar; False when it died while starting (a kill at an early step)."""
    try:
        proc.start()
        return True
    except SidecarError:
        if proc.proc is not None and proc.proc.poll() is not None:
            return False
        raise


def wait_for_exit(proc: SidecarProcess, timeout_s: float) -> int:
    assert proc.proc is not None
    code = proc.proc.wait(timeout_s)
    proc.proc = None
    return code


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def partition_status(proc: SidecarProcess) -> dict[str, Any]:
    status: dict[str, Any] = next(p for p in proc.client.status()["partitions"]
                                  if p["topic"] == TP.topic and p["partition"] == TP.partition)
    return status


def checkpoint(log_dir: Path) -> int | None:
    path = log_dir / CLEANER_OFFSET_CHECKPOINT
    return OffsetCheckpointFile(path).read().get(TP) if path.exists() else None


def temp_files(log_dir: Path) -> list[str]:
    return sorted(p.name for p in (log_dir / TP.dir_name).iterdir() if p.name.endswith(TEMP_SUFFIXES))


def staging_root(log_dir: Path) -> Path:
    return log_dir / STAGING_DIR_NAME


def assert_consistent_after_kill(w: Workload) -> str:
    """The log a restart loads is exactly the one before the round or exactly the one after it,
    and the checkpoint moved only with it; returns "before" or "after"."""
    rows = rows_in(w.log_dir, w.seed)
    assert temp_files(w.log_dir) == [], "the loader left temporary files"
    state = "before" if rows == w.before else "after" if rows == w.after else "neither"
    assert state != "neither", "the log is neither the one before the round nor the one after it"
    if checkpoint(w.log_dir) == w.end_offset:
        assert state == "after", "the checkpoint moved but the segments were not swapped in"
    assert verify_path(w.log_dir).ok
    return state


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, contents of /proc/<pid>/<name>) of every process, skipping those that exit meanwhile."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/{name}").read_bytes()
        except OSError:
            continue
        yield int(entry), data


def job_pids(staging_fragment: str) -> list[int]:
    """Processes whose command line names ``staging_fragment`` (a hand-off's staging directory)."""
    return [pid for pid, cmdline in _proc_files("cmdline")
            if staging_fragment in cmdline.replace(b"\0", b" ").decode(errors="replace")]
