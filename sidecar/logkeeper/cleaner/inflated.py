"""Decompressed batches kept from a round's offset-map build for its cleaning pass.

A round reads every compressed batch of its dirty section twice: the map's build decompresses
it to hash its keys, the cleaning pass to decide and copy its records (Kafka's cleaner does the
same). On a compressed log decompressing is most of a round's work, so the build keeps what it
decompressed, up to a byte budget, and the cleaning pass takes each batch's records from here
instead of decompressing them again. Both walk the dirty section in offset order, so the budget
holds its first batches, the ones the pass reaches first; a batch taken leaves the budget.

An entry is keyed by the segment's ``FileRecords`` (the object, which the key keeps alive, so
a file made again under the same name is another key) and the batch's position: a segment
below the round's end is not appended to, and a truncation or deletion under a round aborts it
(the cleaner's check_done). The cache lives for one round; what was not taken (batches past a
full map, batches the pass skips) goes with it.

The budget is half the offset map's memory (``inflated_budget``: log.cleaner.dedupe.buffer.size
over log.cleaner.threads, 64 MiB a thread by default): a user who sizes the cleaner's memory
sizes this with it, and the map and this hold at most 1.5 times a thread's share of the buffer.

Threads: the build keeps from its hashing threads and the pass takes from its decompressing
ones (ahead.py, codec_pool.py); one lock.
"""

from __future__ import annotations

import threading

from .offset_map import BYTES_PER_SLOT


def inflated_budget(map_slots: int) -> int:
    """The bytes a round may keep: half the memory of an offset map of ``map_slots`` slots."""
    return map_slots * BYTES_PER_SLOT // 2


class InflatedBatches:
    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._used = 0
        self._held: dict[tuple[object, int], bytes] = {}
        self._lock = threading.Lock()
        self.kept = 0  # batches kept and taken (tests read them)
        self.taken = 0

    def keep(self, records: object, position: int, data: bytes) -> None:
        """Hold ``data``, the decompressed records of the batch at ``position`` of ``records``,
        if the budget has room for it."""
        with self._lock:
            if self._used + len(data) > self._budget:
                return
            old = self._held.get((records, position))
            if old is not None:
                self._used -= len(old)
            self._held[(records, position)] = data
            self._used += len(data)
            self.kept += 1

    def take(self, records: object, position: int) -> bytes | None:
        """The records kept for that batch (given once), or None."""
        with self._lock:
            data = self._held.pop((records, position), None)
            if data is not None:
                self._used -= len(data)
                self.taken += 1
            return data

    @property
    def held_bytes(self) -> int:
        return self._used
