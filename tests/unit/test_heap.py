"""server/heap.py: the sidecar's allocator settings keep a fetch's MiB buffers resident.

Counted, not timed: the minor page faults of a fetch-shaped loop (a 1 MiB read buffer copied into
a growing frame, both freed), in a fresh interpreter with and without the settings."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from logkeeper.server.heap import keep_large_buffers

ROUNDS = 40
PAGES_PER_MIB = 256

LOOP = f"""
import resource, sys
from logkeeper.server.heap import keep_large_buffers
if sys.argv[1] == "tuned":
    print(keep_large_buffers({{}}), file=sys.stderr)
def fetch():
    records = bytearray(1 << 20)  # as FileRecords.read_cached's buffer
    frame = bytearray(b"header")  # as the Writer's frame, grown by the records
    frame += records
    return len(frame)
fetch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({ROUNDS}):
    fetch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_fetch_buffers_stop_faulting_once_tuned():
    untuned, tuned = _faults("plain"), _faults("tuned")
    # glibc's defaults: each round's MiB buffers are fresh pages (mmap'd, or a trimmed heap top)
    assert untuned >= ROUNDS * PAGES_PER_MIB
    # tuned: the same heap memory every round, already resident
    assert tuned < ROUNDS * PAGES_PER_MIB // 10, (untuned, tuned)


def test_a_users_allocator_settings_win():
    assert keep_large_buffers({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}) == \
        "left as set by GLIBC_TUNABLES"
    assert keep_large_buffers({"MALLOC_MMAP_THRESHOLD_": "65536"}) == "left as set by MALLOC_MMAP_THRESHOLD_"
