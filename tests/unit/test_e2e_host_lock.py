"""The real node's host lock (tests/e2e/host_lock.py): two make e2e runs on one host once shared
the bridge, the iptables chains and 10.96.0.1, and one's pods met the other's API server. A second
run must wait for the first, and say who holds the lock."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.host_lock import host_lock

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from tests.e2e.host_lock import host_lock
with host_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(path: Path, seconds: float) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], cwd=REPO, text=True,
                         stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_second_holder_times_out_naming_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "node.lock"
    first = _holder(lock, 30)
    try:
        with pytest.raises(TimeoutError, match=re.escape(f"held by pid {first.pid} in {REPO}")), \
                host_lock(lock, wait_s=0.5, every_s=0.1):
            pass
    finally:
        first.kill()
        first.wait()


def test_second_holder_gets_it_once_the_first_ends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "node.lock"
    first = _holder(lock, 1.5)
    try:
        t = time.monotonic()
        with host_lock(lock, wait_s=30, every_s=0.2):
            assert first.poll() is not None  # it had to end first
        assert time.monotonic() - t < 30
        assert f"held by pid {first.pid}" in capsys.readouterr().out
    finally:
        first.kill()
        first.wait()


def test_a_killed_holder_releases_it(tmp_path: Path) -> None:
    lock = tmp_path / "node.lock"
    first = _holder(lock, 60)
    first.kill()  # a crashed run: flock goes with the process, nothing to clean up by hand
    first.wait()
    with host_lock(lock, wait_s=2):
        assert "pid" in lock.read_text()
