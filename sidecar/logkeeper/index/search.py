"""The bisect of an index's entries, as Kafka does it (its ``AbstractIndex.indexSlotRangeFor``):
pure functions over the bytes of fixed-size, big-endian entries, one field of which is sorted.

Why a struct bisect and not numpy: ``np.searchsorted`` on an ``np.frombuffer`` view of the map
with a big-endian dtype (``>i4``/``>i8``) byte-swaps -- i.e. copies -- the whole haystack first
(numpy needs native byte order; the 12-byte time entries are also misaligned), so a lookup costs
O(n), orders of magnitude slower on a full 10 MiB index than ~20 ``unpack_from`` probes here
(bench/results/design_figures.md: index search). A numpy view would also export the map's
buffer, making ``mmap.close``/remap raise BufferError while any view is alive. ``unpack_from``
reads the map in place and holds no export beyond each call.

Search range (Kafka's warm section): when the target is above the entry that starts the last
``warm_entries`` entries, only that section is searched, so in-sync lookups keep touching the
same few pages; otherwise the cold part is searched.
"""

from __future__ import annotations

import mmap
import struct

Buffer = mmap.mmap | bytes | bytearray


def search(buf: Buffer, entries: int, size: int, warm_entries: int, target: int, field: struct.Struct,
           field_offset: int, upper: bool) -> int:
    """Over ``field`` (at ``field_offset`` of each ``size``-byte entry) of the first ``entries``
    (at least one): with ``upper=False`` the slot of the largest entry <= target, or -1; with
    ``upper=True`` a slot of an entry >= target (Kafka's "smallest upper bound"), or -1."""
    unpack = field.unpack_from
    first_hot = max(0, entries - 1 - warm_entries)
    key: int = unpack(buf, first_hot * size + field_offset)[0]
    if key < target:
        lo, hi = first_hot, entries - 1
    else:
        key = unpack(buf, field_offset)[0]
        if key > target:
            return 0 if upper else -1
        lo, hi = 0, first_hot
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        key = unpack(buf, mid * size + field_offset)[0]
        if key > target:
            hi = mid - 1
        elif key < target:
            lo = mid
        else:
            return mid
    if not upper:
        return lo
    return -1 if lo == entries - 1 else lo + 1


def entries_below(buf: Buffer, entries: int, size: int, warm_entries: int, target: int, field: struct.Struct,
                  field_offset: int) -> int:
    """How many leading entries have ``field < target`` (the entry count after truncate_to).

    Kafka's rule: no entry <= target -> 0; an entry equal to target -> its slot; else the
    largest lower bound's slot + 1. If several entries share the value (possible for time
    index offsets), step back to the first so that every entry >= target goes.
    """
    slot = search(buf, entries, size, warm_entries, target, field, field_offset, upper=False)
    if slot < 0:
        return 0
    key: int = field.unpack_from(buf, slot * size + field_offset)[0]
    if key != target:
        return slot + 1
    while slot > 0:
        key = field.unpack_from(buf, (slot - 1) * size + field_offset)[0]
        if key != target:
            break
        slot -= 1
    return slot
