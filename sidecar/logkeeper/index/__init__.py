"""logkeeper.index: Kafka's offset index (.index) and time index (.timeindex), memory-mapped.

Formats are written out in :mod:`logkeeper.index.offset_index` (8-byte entries: relative offset
int32 + position int32) and :mod:`logkeeper.index.time_index` (12-byte entries: timestamp int64 +
relative offset int32); the shared file life cycle is in :mod:`logkeeper.index.abstract_index`, the bisect of the
entries (Kafka's warm section) in :mod:`logkeeper.index.search`.
"""

from logkeeper.index.offset_index import OffsetIndex, OffsetPosition
from logkeeper.index.time_index import TimeIndex, TimestampOffset

__all__ = ["OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]
