"""Rebuilding a segment's offset and time indexes from the batches of its log.

Two callers, one way of filling an index: recovery rebuilds both of a segment it validates
(LogSegment.recover, after checking every batch), and an index opened lazily that fails its
sanity check is rebuilt alone, there and then (lazy_index.py), as Kafka's loader rebuilds an index
it finds corrupt. The entries are where appends would have put them (index_plan.py), so an index
rebuilt from an intact log is the file appends wrote, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CorruptRecordError
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..records.scan import BatchTable, ScanStop, scan_batches
from .file_records import FileRecords
from .index_plan import IndexPlan, IndexState, plan_index_entries


def plan_of(table: BatchTable, n: int, base_offset: int, interval_bytes: int) -> IndexPlan:
    """The entries of a segment holding the first ``n`` batches of ``table``."""
    return plan_index_entries(table.position[:n], table.size[:n], table.last_offset[:n],
                              table.max_timestamp[:n], interval_bytes, IndexState.empty(base_offset))


def plan_from_log(records: FileRecords, base_offset: int, interval_bytes: int, index_path: Path) -> IndexPlan:
    """The entries of every batch of a log below the recovery point (its batches' headers only:
    recovery checked their CRCs before the recovery point passed them). Batches that stop before
    the end of the file are a damaged log, not a damaged index: CorruptRecordError, naming the log
    and the position, and the index is not rebuilt over part of its segment."""
    with records.mapped() as buf:
        table = scan_batches(buf, 0, records.size_in_bytes)
    if table.stop_reason != ScanStop.END:
        raise CorruptRecordError(table.stop_position, f"{table.stop_reason.words}; {index_path.name} not rebuilt "
                                 "from it", str(records.path))
    return plan_of(table, len(table), base_offset, interval_bytes)


def refill_offset_index(index: OffsetIndex, plan: IndexPlan, max_index_size: int) -> None:
    index.truncate()
    index.resize(max_index_size)
    index.append_many(*plan.offset_entries)
    index.trim_to_valid_size()


def refill_time_index(index: TimeIndex, plan: IndexPlan, max_index_size: int) -> None:
    """The plan's entries, then the entry a segment gets when it stops being active (its largest
    timestamp, kept only when it grows, as every time entry)."""
    index.truncate()
    index.resize(max_index_size)
    index.append_many(*plan.time_entries)
    index.maybe_append(plan.max_timestamp, plan.offset_of_max_timestamp, skip_full_check=True)
    index.trim_to_valid_size()


def refill(index: OffsetIndex | TimeIndex, plan: IndexPlan, max_index_size: int) -> None:
    if isinstance(index, OffsetIndex):
        refill_offset_index(index, plan, max_index_size)
    else:
        refill_time_index(index, plan, max_index_size)

