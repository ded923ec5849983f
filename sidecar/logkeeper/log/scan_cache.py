"""The batch tables of recent whole-file scans, so that one ``.log`` is scanned once, not once per user.

A cleaning round reads the header columns of the same segment several times: the load rebuilds
the producer state from them, the cleaner finds the active producers in them, the offset map
and the cleaning pass each walk them (scanning a 119 MB segment of 3,300 batches: about 4 ms a
time, most of it faulting in the pages of its headers). A scan is a pure function of the file's
bytes, so its table is kept under the file's *version*: a number that ``FileRecords`` draws anew
from one process-wide counter when it opens the file and after every change to it (append,
truncation). A table is only looked up under the version current at the lookup, so a changed
file is never answered from a table of its old bytes; old entries are simply never asked for
again and age out.

The tables are bounded by their bytes (68 bytes a batch; least recently used dropped first) and
their columns are read-only: callers share them.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

import numpy as np

from ..records.scan import BatchTable

BUDGET_BYTES = 32 * 1024 * 1024

_versions = itertools.count(1)
# the bound method itself: FileRecords draws a version on every append (a hot path)
new_version = _versions.__next__
_tables: OrderedDict[int, tuple[BatchTable, int]] = OrderedDict()
_lock = threading.Lock()
_held = 0


def _nbytes(table: BatchTable) -> int:
    return sum(v.nbytes for v in vars(table).values() if isinstance(v, np.ndarray))


def get(version: int) -> BatchTable | None:
    with _lock:
        hit = _tables.get(version)
        if hit is None:
            return None
        _tables.move_to_end(version)
        return hit[0]


def put(version: int, table: BatchTable) -> None:
    global _held
    size = _nbytes(table)
    if size > BUDGET_BYTES:
        return
    for column in vars(table).values():
        if isinstance(column, np.ndarray):
            column.flags.writeable = False
    with _lock:
        if version in _tables:
            return
        _tables[version] = (table, size)
        _held += size
        while _held > BUDGET_BYTES:
            _old, (_table, dropped) = _tables.popitem(last=False)
            _held -= dropped


def clear() -> None:
    global _held
    with _lock:
        _tables.clear()
        _held = 0
