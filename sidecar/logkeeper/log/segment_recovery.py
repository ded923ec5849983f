"""What the loader does to a segment it cannot take on trust (Kafka's LogSegment.recover and
its index sanity checks): check the offset and time indexes of a segment below the recovery
point, and validate every batch of one above it, cutting the invalid tail and rebuilding its
indexes from what is left.

The segment keeps ``recover`` and ``sanity_check`` as its methods (the loader calls them there)
and its own state; the checks and the rebuild are here, apart from its appends and reads.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from ..errors import CorruptIndexError, LogSegmentOffsetOverflowError
from ..index.abstract_index import INT32_MAX
from ..index.lazy_index import LazyIndex
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..records.scan import ScanStop, first_crc_mismatch, scan_batches
from .file_records import FileRecords
from .index_plan import IndexPlan
from .index_rebuild import plan_of, refill_offset_index, refill_time_index

log = logging.getLogger(__name__)


class RecoveryResult(NamedTuple):
    """What recovering a segment found: bytes kept and cut, batches read, and why it cut."""

    truncated_bytes: int
    valid_bytes: int
    batches: int
    reason: str  # "" when the segment was intact


def recover(records: FileRecords, base_offset: int, index_interval_bytes: int, offset_index: OffsetIndex,
            time_index: TimeIndex, max_index_size: int) -> tuple[RecoveryResult, IndexPlan]:
    """Validate every batch of a segment's ``records``, cut the invalid tail, refill its offset
    and time indexes (opened unchecked: they are rebuilt here); return what it found and the plan
    of the entries, whose running state (bytes since the last entry, the largest timestamp) the
    segment takes on.

    Stops at the first batch that is torn, too short, of a foreign magic, fails its CRC or
    holds an offset below the segment's base or not above the previous batch's last offset
    (baseOffset is outside the CRC: a flipped bit there must not reach the indexes out of
    order); everything from there on is truncated. A batch beyond base + 2^31 - 1 raises
    LogSegmentOffsetOverflowError instead (the loader splits such a segment).
    """
    reason = ""
    with records.mapped() as buf:
        table = scan_batches(buf, 0, records.size_in_bytes)
        n = len(table)
        bad = first_crc_mismatch(buf, table)
    if bad >= 0:
        n, reason = bad, f"CRC mismatch at position {int(table.position[bad])}"
    last_offsets = table.last_offset[:n]
    overflow = np.flatnonzero(last_offsets - base_offset > INT32_MAX)
    previous_end = np.concatenate(([base_offset], last_offsets[:-1] + 1))[:n]
    below = np.flatnonzero(table.base_offset[:n] < previous_end)
    if overflow.size and (below.size == 0 or overflow[0] < below[0]):
        # not corruption: a segment from an old cleaner; the loader splits it (KAFKA-6264)
        raise LogSegmentOffsetOverflowError(base_offset, int(last_offsets[overflow[0]]), str(records.path))
    if below.size:
        n = int(below[0])
        reason = (f"offset {int(table.base_offset[n])} below the segment base or the previous batch "
                  f"at position {int(table.position[n])}")
    if not reason and table.stop_reason != ScanStop.END:
        reason = f"{table.stop_reason.words} at position {table.stop_position}"
    valid_bytes = int(table.position[n - 1] + table.size[n - 1]) if n else 0
    plan = plan_of(table, n, base_offset, index_interval_bytes)
    refill_offset_index(offset_index, plan, max_index_size)
    refill_time_index(time_index, plan, max_index_size)
    truncated = records.size_in_bytes - valid_bytes
    if truncated > 0:
        log.warning("truncating %s at position %d (%s): %d invalid bytes", records.path, valid_bytes, reason,
                    truncated)
        records.truncate_to(valid_bytes)
    return RecoveryResult(truncated, valid_bytes, n, reason if truncated > 0 else ""), plan


def check_indexes(records: FileRecords, offset_index: LazyIndex[OffsetIndex], time_index: LazyIndex[TimeIndex]) -> None:
    """Raise FileNotFoundError for a missing offset or time index of the segment of ``records``
    and CorruptIndexError for one that is damaged: the loader rebuilds both from the log. An
    index not opened yet is checked by its file alone (there, and whole entries long:
    lazy_index.py); its entries are checked when it opens."""
    for lazy, kind in ((offset_index, OffsetIndex), (time_index, TimeIndex)):
        if lazy.is_open:
            index = lazy.get()
            if index.created:  # made empty by this open
                raise FileNotFoundError(f"{kind.__name__} of {records.path} is missing")
            index.sanity_check()
            continue
        try:
            length = lazy.file_length()
        except FileNotFoundError:
            raise FileNotFoundError(f"{kind.__name__} of {records.path} is missing") from None
        if length % kind.entry_size:
            raise CorruptIndexError(f"corrupt {kind.__name__} {lazy.path}: length {length} bytes is not "
                                    f"a multiple of {kind.entry_size}")
