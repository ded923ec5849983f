"""Transaction state while the cleaner walks a log (Kafka's CleanedTransactionMetadata).

The aborted transactions of the range being read come from the transaction indexes
(``collect_aborted``), ordered by first offset. Walking batches in offset order:

- before each batch, the aborted transactions that start at or before its last offset become
  ongoing (one per producer id);
- a transactional data batch of a producer with an ongoing aborted transaction is aborted data:
  it may be discarded (and the transaction remembers that it still had data here); any other
  transactional data batch marks its producer's committed transaction as having data;
- an ABORT marker ends its producer's aborted transaction: the marker may be discarded when the
  cleaner saw none of that transaction's data (or it is not in the index), otherwise it must stay
  and its transaction goes into the cleaned segment's transaction index;
- a COMMIT marker may be discarded when none of its transaction's data was seen;
- a control batch with no record was emptied by an earlier clean: it may be discarded;
  other control types are never discarded.

"May be discarded" is what the filter then combines with the delete horizon (see filter.py).
Only transactional and control batches reach this class: it loops per batch in Python, never
per record.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..index.txn_index import AbortedTxn
from ..log.log import Log
from ..log.segments import LogSegments
from ..records.control import ControlType


@dataclass
class _OngoingAborted:
    """An aborted transaction being walked, with the last batch offset seen of it."""

    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass
class CleanedTransactionMetadata:
    """Transaction state while cleaning (Kafka's CleanedTransactionMetadata)."""

    # the aborted transactions whose marker stays, in order: the cleaned segment's transaction
    # index entries (written by whoever owns that segment, once its batches are decided)
    kept_aborted: list[AbortedTxn] = field(default_factory=list)
    _heap: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)
    _seq: int = 0
    _ongoing_committed: set[int] = field(default_factory=set)
    _ongoing_aborted: dict[int, _OngoingAborted] = field(default_factory=dict)

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._heap, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._heap and self._heap[0][0] <= offset:
            txn = heapq.heappop(self._heap)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAborted(txn))

    def on_control_batch_read(self, producer_id: int, last_offset: int, control_type: int | None) -> bool:
        """A control batch (``control_type`` None when it has no record); True if discardable."""
        self._consume_aborted_up_to(last_offset)
        if control_type is None:
            return True
        if control_type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                self.kept_aborted.append(ongoing.txn)
                return False
            return True
        if control_type == ControlType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, producer_id: int, last_offset: int, is_transactional: bool) -> bool:
        """A data batch; True when it is aborted transactional data."""
        self._consume_aborted_up_to(last_offset)
        if not is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False


def collect_aborted(log: Log, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """Aborted transactions that end at or after the log start offset and begin below
    ``upper_bound_offset``, from the transaction indexes of the segment holding ``start_offset``
    and the later ones, until an entry's last stable offset reaches the upper bound (Kafka's
    UnifiedLog.collectAbortedTransactions: a marker may sit in a later segment than its data)."""
    return collect_aborted_in(log.segments, log.log_start_offset, start_offset, upper_bound_offset)


def collect_aborted_in(segments: LogSegments, log_start_offset: int, start_offset: int,
                       upper_bound_offset: int) -> list[AbortedTxn]:
    """``collect_aborted`` over a log's segments and log start offset."""
    return AbortedTxns(segments, log_start_offset, start_offset).collect(start_offset, upper_bound_offset)


class AbortedTxns:
    """The transaction indexes of a log's segments from the one holding ``from_offset`` on, read
    once, answering ``collect`` (``collect_aborted``) for ranges from there. A cleaning round asks
    for every group's: reading each later segment's index again for each group made a round
    quadratic in the segments (with Kafka's 1 MiB segments, a visible part of a round). Within a
    round nothing it asks about changes: a transaction with data below the first uncleanable
    offset was complete, its marker and index entry written, when the round began."""

    def __init__(self, segments: LogSegments, log_start_offset: int, from_offset: int) -> None:
        self._log_start_offset = log_start_offset
        self._bases: list[int] = []  # the segments' base offsets, ascending
        self._first: list[int] = []  # where each segment's entries start in _txns
        self._txns: list[AbortedTxn] = []
        floor = segments.floor_segment(from_offset)
        for seg in segments.values(floor.base_offset, None) if floor is not None else ():
            self._bases.append(seg.base_offset)
            self._first.append(len(self._txns))
            self._txns.extend(seg.txn_index.entries)

    def collect(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that end at or after the log start offset and begin below
        ``upper_bound_offset``, from the segment holding ``start_offset`` on, until an entry's last
        stable offset reaches the upper bound (a marker may sit in a later segment than its data)."""
        i = bisect.bisect_right(self._bases, start_offset) - 1
        if i < 0:
            return []
        out: list[AbortedTxn] = []
        for j in range(self._first[i], len(self._txns)):
            txn = self._txns[j]
            if txn.last_offset >= self._log_start_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                break
        return out
