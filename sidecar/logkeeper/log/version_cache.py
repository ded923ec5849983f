"""What the readers of one version of a ``.log`` file share: the batch table of a whole-file scan,
and the read-only mapping of the file's bytes.

Why: a cleaning round reads the same segment several times. The load rebuilds the producer
state from its batch headers, the cleaner finds the active producers in them, and the offset
map and the cleaning pass each walk its records. Scanning a segment for its batch headers is
repeated work; mapping it costs more: faulting in or populating every page of the file, and
unmapping them, every time a reader maps the file anew. Sharing one mapping avoids mapping and
unmapping the file on every read, a sizeable part of a W1 round in a fresh process
(bench/results/design_figures.md: version cache).

A file's bytes at one version never change, so both are kept under the file's *version*: a
number ``FileRecords`` draws anew from one process-wide counter when it opens the file and after
every change to it (append, truncation). An entry is only looked up under the version current at
the lookup, so a changed file is never answered from its old bytes.

Two caches, each bounded by bytes, the least recently used entry dropped first:

- ``tables``: 32 MiB of batch tables (68 bytes a batch). Their columns are read-only: callers
  share them. Old versions' tables are never asked for again and age out.
- ``mappings``: 2 GiB of mapped file bytes (their page tables take about 2 MB a GiB), and at
  most 64 mappings (Python's mmap holds a duplicate of the file's descriptor). A dropped mapping
  is unmapped as soon as no reader holds an array of it (mmap unmaps when its last reference
  goes). ``FileRecords`` keeps at most one mapping in the cache, of its current version: it
  drops the old one when it maps a new version, and drops its mapping when the file is
  truncated, renamed (a replaced segment becomes ``.deleted``), closed or deleted, so that a
  deleted segment's disk blocks are freed when it is.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from ..records.scan import BatchTable

T = TypeVar("T")

_versions = itertools.count(1)
# the bound method itself: FileRecords draws a version on every append (a hot path)
new_version = _versions.__next__


class VersionCache(Generic[T]):
    """Values by file version, bounded by ``budget_bytes`` (``size_of`` each) and ``max_entries``,
    least recently used dropped first. A value larger than the whole budget is not kept."""

    def __init__(self, budget_bytes: int, size_of: Callable[[T], int],
                 on_put: Callable[[T], None] | None = None, max_entries: int = 1 << 62) -> None:
        self.budget_bytes = budget_bytes
        self.max_entries = max_entries
        self._size_of = size_of
        self._on_put = on_put
        self._entries: OrderedDict[int, tuple[T, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, version: int) -> T | None:
        with self._lock:
            hit = self._entries.get(version)
            if hit is None:
                return None
            self._entries.move_to_end(version)
            return hit[0]

    def put(self, version: int, value: T) -> None:
        size = self._size_of(value)
        if size > self.budget_bytes:
            return
        if self._on_put is not None:
            self._on_put(value)
        with self._lock:
            if version in self._entries:
                return
            self._entries[version] = (value, size)
            self._held += size
            while self._held > self.budget_bytes or len(self._entries) > self.max_entries:
                _old, (_value, dropped) = self._entries.popitem(last=False)
                self._held -= dropped

    def drop(self, version: int) -> None:
        with self._lock:
            hit = self._entries.pop(version, None)
            if hit is not None:
                self._held -= hit[1]

    @property
    def held_bytes(self) -> int:
        return self._held

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held = 0


def table_bytes(table: BatchTable) -> int:
    return sum(v.nbytes for v in vars(table).values() if isinstance(v, np.ndarray))


def _freeze(table: BatchTable) -> None:
    for column in vars(table).values():
        if isinstance(column, np.ndarray):
            column.flags.writeable = False


def _mapped_bytes(buf: np.ndarray) -> int:
    return int(buf.nbytes)


tables: VersionCache[BatchTable] = VersionCache(32 * 1024 * 1024, table_bytes, _freeze)
mappings: VersionCache[np.ndarray] = VersionCache(2 * 1024 * 1024 * 1024, _mapped_bytes, max_entries=64)


def clear() -> None:
    tables.clear()
    mappings.clear()
