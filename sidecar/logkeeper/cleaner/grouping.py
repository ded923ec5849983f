"""Grouping the segments of a cleaning round into the segments that replace them.

Kafka's ``groupSegmentsBySize``: consecutive segments are merged into one cleaned segment while
the group's ``.log`` bytes stay within ``segment.bytes``, its offset-index and time-index bytes
each within ``segment.index.bytes``, and its offsets within an int32 span of the group's first
base offset, so that every offset fits an index entry. The last offset of a segment is bounded
by the next segment's base offset - 1 (reading it exactly would mean scanning the segment), or
by the first uncleanable offset - 1 for the last one; an empty segment never breaks a group on
that account. An index not opened counts its file's length (LogSegment.index_bytes_bound): the
bytes of its entries after a clean roll, never fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..log.segment import INT32_MAX, LogSegment


def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    i = 0
    while i < len(rest):
        first = rest[i]
        group = [first]
        log_size = first.size_in_bytes
        index_size, time_index_size = first.index_bytes_bound()
        i += 1
        while i < len(rest):
            seg = rest[i]
            seg_index, seg_time_index = seg.index_bytes_bound()
            last_offset = rest[i + 1].base_offset - 1 if i + 1 < len(rest) else first_uncleanable_offset - 1
            if not (log_size + seg.size_in_bytes <= max_size
                    and index_size + seg_index <= max_index_size
                    and time_index_size + seg_time_index <= max_index_size
                    and (seg.size_in_bytes == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(seg)
            log_size += seg.size_in_bytes
            index_size += seg_index
            time_index_size += seg_time_index
            i += 1
        groups.append(group)
    return groups
