"""Which records of a cleaning round survive, decided by exact key outside the offset map.

The in-process cleaner asks its offset map, for each keyed data record at or below the map's
latest offset, "the latest offset of this key in the dirty section" (``found``) and keeps the
record when its offset >= found (filter_kernels.decide_kernel). A job that groups the dirty
section by its full key bytes (the Spark job, spark/) knows the same answers exactly, without
hashing, and hands them to the same filter as ``ExactDecisions``:

    field               type               meaning
    latest_offset       int                the map's latest offset: records above it are kept
                                           without a lookup (the round's end offset - 1)
    first_dirty_offset  int                records at or above it are in the dirty section
    kept                int64[], sorted    dirty offsets that are the latest of their key (the
                                           records the map would name: found == offset)
    superseded          int64[], sorted    offsets below first_dirty_offset whose key has a
                                           record in the dirty section (found > offset)

so that, for a record at offset o that the filter looks up::

    o >= first_dirty_offset:  found = o      when o is in kept, else o + 1 (a later record wins)
    o <  first_dirty_offset:  found = o + 1  when o is in superseded, else -1 (key not in the map)

which is what an offset map holding every key of the dirty section answers (a record of the
clean section is older than any dirty record). The kernel walks both arrays with a cursor, as
it walks a window's records in offset order. Records the filter never looks up (control
batches, aborted data, unkeyed records, offsets above ``latest_offset``) need no entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ExactDecisions:
    """A round's keep decisions made by exact key elsewhere (the Spark job), for the cleaning pass."""

    latest_offset: int
    first_dirty_offset: int
    kept: I64
    superseded: I64

    def __post_init__(self) -> None:
        for name in ("kept", "superseded"):
            arr = getattr(self, name)
            if arr.dtype != np.int64 or arr.ndim != 1:
                raise ValueError(f"{name} must be a one-dimensional int64 array")
            if arr.size > 1 and bool(np.any(arr[1:] <= arr[:-1])):
                raise ValueError(f"{name} must be sorted and free of duplicates")

    @classmethod
    def of(cls, latest_offset: int, first_dirty_offset: int, kept: npt.ArrayLike = (),
           superseded: npt.ArrayLike = ()) -> ExactDecisions:
        """From unsorted offsets (sorted and de-duplicated here)."""
        return cls(latest_offset, first_dirty_offset, sorted_unique(kept), sorted_unique(superseded))


def sorted_unique(values: npt.ArrayLike) -> I64:
    """``values`` as int64, sorted, each once. Not np.unique: since numpy 2.3 it first collects
    the distinct values in a hash table (then sorts them), which on millions of offsets costs many
    times a plain sort (bench/results/design_figures.md: exact decisions); a sort in place and a
    mask of the first of each run is all this needs."""
    out = np.array(values, dtype=np.int64)  # a copy: sorted in place
    if out.ndim != 1:
        out = out.reshape(-1)
    out.sort()
    if out.size > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
