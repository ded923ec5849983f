"""Compaction backlogs: logs whose dirty section holds more distinct keys than one offset map.

Such a log is cleaned in several rounds, and every round recopies the whole clean section
before it, so the work grows with (clean bytes) x (rounds). Kafka just keeps going; logkeeper
goes on too, but marks the log as a backlog so that a later stage (a Spark job) can compact it
in one pass with exact keys.

After the first round whose map filled before the end of the dirty section, the distinct keys
of the whole dirty section are counted with a HyperLogLog sketch (one more hashing pass over the
dirty section, compiled; 2^14 one-byte registers, about 1% standard error)::

    estimated keys    = HyperLogLog count of the keys of the data records in [first dirty,
                        first uncleanable) (control batches skipped; aborted data counted too)
    passes            = ceil(estimated keys / keys one map holds)
    dirty bytes       = bytes of the dirty section
    recopied bytes    = (passes - 1) x (clean bytes + dirty bytes): what the remaining rounds read
                        again

HyperLogLog (Flajolet et al.): register = the top 14 bits of the key's hash h1 (the offset map's), value = 1
+ the leading zeros of the remaining bits; estimate = 0.7213 / (1 + 1.079 / m) x m^2 /
sum(2^-register), or m ln(m / empty registers) while that is below 2.5 m. The mark stays while the
log's rounds remain partial, and is dropped once a round maps the whole dirty section.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..aot import kernel
from ..log.log import Log
from ..log.names import TopicPartition
from ..records.batch_format import CONTROL_FLAG
from ..records.scan_kernels import _varint, _varlong
from .map_kernel import MAP_CONTROL, MAP_DATA, record_area, rows_of
from .offset_map import fresh_state, map_hash
from .segment_view import SegmentView, record_areas

HLL_BITS = 14


@dataclass(frozen=True, slots=True)
class Backlog:
    """A log whose dirty keys overflow one offset map: the estimate handed to the Spark offload."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    first_uncleanable_offset: int
    estimated_keys: int
    map_keys: int
    passes: int
    dirty_bytes: int
    clean_bytes: int
    recopied_bytes: int
    marked_ms: int

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["topic_partition"] = str(self.topic_partition)
        return out


@kernel("u1[], u1[], map_row[], i8, i8, map_state[], u1[] -> none")
def _sketch_kernel(buf, dbuf, rows, start, end, state, registers):  # type: ignore[no-untyped-def]
    """The HyperLogLog registers of the keys of the data rows' records in [start, end), hashed
    the offset map's way (so it counts the keys the map tells apart)."""
    shift = np.uint64(64 - HLL_BITS)
    top = np.uint64(1) << np.uint64(63)
    for r in range(rows.shape[0]):
        row = rows[r]
        if row.mode != MAP_DATA:
            continue
        src, p, e = record_area(row, buf, dbuf)
        for _j in range(row.record_count):
            if p >= e:
                break
            length, q, _err = _varint(src, p, e)
            rec_end = q + length
            _ts, q, _err = _varlong(src, q + 1, rec_end)
            delta, q, _err = _varint(src, q, rec_end)
            key_len, q, _err = _varint(src, q, rec_end)
            offset = row.base_offset + delta
            if key_len >= 0 and start <= offset < end and q + key_len <= rec_end:
                h1, _h2 = map_hash(state, src, q, key_len)
                h = np.uint64(h1)
                index = h >> shift
                w = (h << np.uint64(HLL_BITS)) | (np.uint64(1) << np.uint64(HLL_BITS - 1))
                rank = 1
                while (w & top) == np.uint64(0):
                    rank += 1
                    w <<= np.uint64(1)
                if rank > registers[index]:
                    registers[index] = rank
            p = rec_end


def estimate_distinct_keys(log: Log, start: int, end: int) -> int:
    """HyperLogLog estimate of the distinct keys of the data records in [start, end)."""
    registers = np.zeros(1 << HLL_BITS, dtype=np.uint8)
    state = fresh_state()
    for seg in log.segments.values(start, end):
        with SegmentView(seg, seg.start_position(start)) as view:
            t = view.table
            for lo, hi in view.windows(16 * 1024 * 1024):
                mode = np.where(t.attributes[lo:hi] & CONTROL_FLAG, MAP_CONTROL, MAP_DATA).astype(np.int8)
                areas = record_areas(view, lo, hi, skip=mode != MAP_DATA)
                rows = rows_of(areas, t.record_count[lo:hi], t.base_offset[lo:hi], t.last_offset[lo:hi], mode)
                _sketch_kernel(view.buf, areas.dbuf, rows, start, end, state, registers)
    m = float(registers.shape[0])
    estimate = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(np.exp2(-registers.astype(np.float64))))
    empty = int(np.count_nonzero(registers == 0))
    if estimate <= 2.5 * m and empty:
        estimate = m * math.log(m / empty)
    return round(estimate)


def estimate_backlog(log: Log, *, first_dirty: int, first_uncleanable: int, end_offset: int,
                     map_keys: int, map_max_entries: int, clean_bytes: int, dirty_bytes: int,
                     now_ms: int, previous: Backlog | None = None) -> Backlog | None:
    """The backlog mark after a round that stopped at ``end_offset``: None when the round covered
    the whole dirty section; ``previous`` (the mark of an earlier partial round) is kept."""
    if end_offset >= first_uncleanable or map_keys <= 0:
        return None
    if previous is not None:
        return previous
    keys = max(map_keys, estimate_distinct_keys(log, first_dirty, first_uncleanable))
    passes = max(1, math.ceil(keys / max(1, map_max_entries)))
    return Backlog(log.topic_partition, first_dirty, first_uncleanable, keys, map_keys, passes, dirty_bytes,
                   clean_bytes, (passes - 1) * (clean_bytes + dirty_bytes), now_ms)
