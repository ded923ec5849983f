"""How the sidecar process asks glibc's allocator to keep its large buffers.

A fetch answers up to a MiB a partition. Over TLS (plaintext answers are sent from the page
cache, never read: protocol/handlers_data.py) the records are read into a buffer of that size and
encoded into the response frame, two allocations of about a MiB each, freed once it is sent. With
glibc's defaults each one is fresh memory from the kernel: an allocation from 128 KiB up is an
mmap of its own (the threshold grows only after such a block is freed) and the top of the heap
is given back (trimmed) when more than 128 KiB (later twice the grown threshold) is free there.
Every page of a fresh buffer is then a page fault when first written, 256 a MiB, and on a VM
those faults, not the copies, were most of the event loop's time for a fetch; reused heap memory
cut both a 1 MiB fetch's time and the server's CPU per MB (the figures:
bench/results/design_figures.md, heap; bench/bench_kafka_raw.py measures it against Kafka and
against glibc's defaults).

So the sidecar sets both thresholds once at start: allocations up to MMAP_THRESHOLD come from
the heap (reused, their pages already resident) and up to TRIM_THRESHOLD of free memory stays at
the top of each heap arena. That is the memory the process may keep beyond what it uses, per
arena of a thread that allocates such buffers (the event loop's and the io pool's); larger
buffers are still mmaps of their own, returned to the kernel when freed. Request frames do not go
through this (memory_pool.FrameCache maps big frames itself, so a claimed size costs nothing until
its bytes arrive, and keeps a few mappings for reuse).

Only glibc has these knobs; elsewhere (musl) nothing is done. A user's own GLIBC_TUNABLES or
MALLOC_*_ variables win: the allocator read them at start and nothing is changed then."""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 4 << 20  # a fetch of a few partitions' MiB each stays in the heap
TRIM_THRESHOLD = 16 << 20  # a few such fetches' read buffers and frames, back to back

_USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_large_buffers(environ: Mapping[str, str] | None = None) -> str:
    """Set the thresholds (see the module docstring); what was done, for the log."""
    env = os.environ if environ is None else environ
    overridden = [name for name in _USER_SETTINGS if name in env]
    if overridden:
        return f"left as set by {', '.join(overridden)}"
    if platform.libc_ver()[0] != "glibc":
        return "not glibc: left as is"
    libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (no ldconfig run to find it)
    # mallopt answers 1 on success, 0 on an invalid value: these are valid on every glibc
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "mallopt refused the thresholds: left as is"
    return f"buffers up to {MMAP_THRESHOLD >> 20} MiB from the heap, {TRIM_THRESHOLD >> 20} MiB kept free at its top"
