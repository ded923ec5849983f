"""Open transactions of a log: what the last stable offset and the transaction index need.

A transactional producer's data batches open a transaction at their first offset; its COMMIT
or ABORT marker (a control batch) closes it. The last stable offset (LSO) is the first offset
of the earliest open transaction, or the log end offset when none is open: readers under
read_committed and the cleaner stop there. An ABORT marker adds an entry to the transaction
index of the segment it lands in.

Only header fields are needed (producer id, flags, offsets), plus the 4-byte key of control
records to tell COMMIT from ABORT; nothing here walks data records.

Idempotent producers (producer id >= 0): per producer its epoch and the metadata of its last
five batches (first and last sequence, first and last offset), as Kafka's ProducerStateEntry.
A client's request is checked before it is appended (``check_request``: ``check_sequence`` per
batch, Kafka's rules), and the state follows what was appended (``on_appended``):

- an epoch below the producer's current one: InvalidProducerEpochError;
- the same epoch and the same first and last sequence as one of the five retained batches: a
  duplicate (a retry of an acknowledged batch): not appended, answered with the original offsets;
- a higher epoch: the sequence must restart at 0 (else OutOfOrderSequenceError);
- the same epoch: first sequence = last sequence + 1 (wrapping from 2^31 - 1 to 0), else
  OutOfOrderSequenceError; a producer with no state (new, or its batches removed) may start
  anywhere.

At load the state comes from the latest ``.snapshot`` file (Kafka's format, written at each roll
and at a clean close: producer_snapshot.py) and a scan of the batch headers after it, or from a scan of every
segment when there is none (a headers-only scan of a segment runs at memory speed).

Producers expire as in Kafka (``remove_expired``): one with no open transaction whose last
batch's max timestamp is ``producer.id.expiration.ms`` (default 1 day) or more before now is
forgotten, at load and then every ``producer.id.expiration.check.interval.ms`` (the LogManager's
task). Without it the state of a long-lived log grows with every producer id ever seen (an
idempotent Java client takes a new one at each start), and every roll's snapshot with it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ..index.txn_index import AbortedTxn
from ..records.batch import BatchHeader
from ..records.batch_format import CONTROL_FLAG, TRANSACTIONAL_FLAG
from ..records.control import ControlType, EndTxnMarker, end_txn_marker
from ..records.scan import BatchTable
from .assign import LogAppendInfo

if TYPE_CHECKING:
    from .segment import LogSegment
    from .validator import ValidatedRequest

log = logging.getLogger(__name__)


@dataclass
class CompletedTxn:
    """A transaction ended by a marker: its producer, first and last offsets, and outcome."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


def end_txn_marker_of(batch: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The COMMIT or ABORT marker of a control batch (``batch`` may run on past it); None for
    other control types."""
    return end_txn_marker(memoryview(batch)[:header.size], header.attributes, header.record_count)


BATCHES_RETAINED = 5
INT32_MAX = (1 << 31) - 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record (sequences wrap from 2^31 - 1 to 0)."""
    return (base_sequence + last_offset_delta) % (INT32_MAX + 1)


class BatchMeta(NamedTuple):
    """A producer's batch as idempotence checks it: sequence and offset ranges."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    """A producer's epoch and its last batches (at most BATCHES_RETAINED)."""

    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))
    last_timestamp: int = -1  # the max timestamp of its last batch (Kafka expires producers by it)
    coordinator_epoch: int = -1  # of the producer's last marker (on_batch), as Kafka's entry keeps it

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass
class ProducerStateManager:
    """Open transactions by producer id (first offset) and idempotent producers' last batches,
    updated batch by batch."""

    ongoing: dict[int, int] = field(default_factory=dict)
    producers: dict[int, ProducerEntry] = field(default_factory=dict)

    def check_sequence(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
                       pending: dict[int, tuple[int, int]] | None = None) -> BatchMeta | None:
        """Raise when a client's batch breaks its producer's sequence; return the retained batch
        it duplicates, or None to append it. ``pending``: (epoch, last sequence) of batches of the
        same request checked before this one (updated here)."""
        entry = self.producers.get(producer_id)
        known = pending.get(producer_id) if pending is not None else None
        cur_epoch, cur_last = known if known is not None else \
            ((entry.epoch, entry.last_seq) if entry is not None else (-1, -1))
        if known is None and entry is not None and epoch == entry.epoch:
            for b in entry.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return b
        if epoch < cur_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than its current epoch {cur_epoch}")
        if epoch > cur_epoch:
            if first_seq != 0 and cur_epoch >= 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} starts epoch {epoch} at sequence {first_seq}, not 0")
        elif cur_last >= 0 and first_seq != (cur_last + 1) % (INT32_MAX + 1):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow {cur_last}")
        if pending is not None:
            pending[producer_id] = (epoch, last_seq)
        return None

    def on_producer_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
                          first_offset: int, last_offset: int, *, is_control: bool, timestamp: int) -> None:
        """Record an appended (or loaded) batch of an idempotent or transactional producer
        (``timestamp``: the batch's max timestamp)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch, coordinator_epoch=entry.coordinator_epoch)
        elif epoch < entry.epoch:
            return  # a marker or batch of an older epoch (loaded data): the newer epoch stands
        entry.last_timestamp = timestamp
        if not is_control and first_seq >= 0:
            entry.batches.append(BatchMeta(first_seq, last_seq, first_offset, last_offset))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers with no open transaction whose last batch's max timestamp is
        ``expiration_ms`` or more before ``now_ms`` (Kafka's isProducerExpired); how many went."""
        doomed = [pid for pid, entry in self.producers.items()
                  if pid not in self.ongoing and now_ms - entry.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, log_end_offset: int) -> int:
        first = self.first_unstable_offset()
        return log_end_offset if first is None else min(first, log_end_offset)

    def on_batch(self, header: BatchHeader, marker: EndTxnMarker | None) -> CompletedTxn | None:
        """Update from one appended batch (``marker``: a control batch's, end_txn_marker_of), after
        on_producer_batch saw it; return the transaction a marker completes."""
        if not header.is_transactional or not header.has_producer_id:
            return None
        pid = header.producer_id
        if header.is_control:
            if marker is None:
                return None
            entry = self.producers.get(pid)
            if entry is not None and marker.coordinator_epoch is not None:
                # every marker, of an empty transaction too (Kafka's appendEndTxnMarker)
                entry.coordinator_epoch = marker.coordinator_epoch
            first = self.ongoing.pop(pid, None)
            if first is None:
                return None  # an empty transaction: nothing to abort or index
            return CompletedTxn(pid, first, header.base_offset, marker.control_type == ControlType.ABORT)
        self.ongoing.setdefault(pid, header.base_offset)
        return None

    def check_request(self, request: ValidatedRequest, log_name: str) -> LogAppendInfo | None:
        """Idempotent producers' sequence and epoch checks of a client's request; the original
        offsets when the request is a retry of one batch already appended (Log.append answers
        with them instead of appending)."""
        pending: dict[int, tuple[int, int]] = {}
        for b in request.batches:
            h = b.header
            if h.producer_id < 0:
                continue
            seen = self.check_sequence(h.producer_id, h.producer_epoch, h.base_sequence,
                                       last_sequence(h.base_sequence, h.last_offset_delta), pending)
            if seen is not None:
                if len(request.batches) != 1:
                    raise OutOfOrderSequenceError(
                        f"producer {h.producer_id}: a request of {len(request.batches)} batches repeats "
                        f"sequences {seen.first_seq}-{seen.last_seq} already appended")
                return _duplicate(seen, h.producer_id, request.num_records, request.size, log_name)
        return None

    def check_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, num_records: int,
                    size: int, log_name: str) -> LogAppendInfo | None:
        """``check_request`` of a request that is one batch of an idempotent producer, from its
        header's fields (Log._append_plain)."""
        seen = self.check_sequence(producer_id, epoch, first_seq, last_seq)
        return None if seen is None else _duplicate(seen, producer_id, num_records, size, log_name)

    def on_appended(self, data: bytes | bytearray | memoryview, request: ValidatedRequest,
                    bases: list[int]) -> list[AbortedTxn]:
        """A request's batches were appended at ``bases`` (``data``: the bytes written): the
        producers' sequences, then the transactions their batches open and their markers end.
        Returns the entries of the transactions aborted, for the transaction index."""
        if request.has_producer_id:  # first: a marker's coordinator epoch goes on its producer's entry
            for b, base in zip(request.batches, bases):
                h = b.header
                if h.producer_id >= 0:
                    self.on_producer_batch(h.producer_id, h.producer_epoch, h.base_sequence,
                                           last_sequence(h.base_sequence, h.last_offset_delta), base,
                                           base + h.last_offset_delta, is_control=h.is_control,
                                           timestamp=h.max_timestamp)
        aborted = []
        if request.has_transactional:
            mv = memoryview(data)
            for b, base in zip(request.batches, bases):
                if not b.header.is_transactional:
                    continue
                header = b.header._replace(base_offset=base)
                raw = mv[b.position:b.position + header.size]
                done = self.on_batch(header, end_txn_marker_of(raw, header) if header.is_control else None)
                if done is not None and done.is_aborted:
                    aborted.append(self.aborted_entry(done))
        return aborted

    def aborted_entry(self, txn: CompletedTxn) -> AbortedTxn:
        """The transaction index entry of an aborted txn. Its LSO, as Kafka records it, is the
        first offset of the earliest other open transaction, else the marker's offset + 1."""
        others = self.first_unstable_offset()
        lso = txn.last_offset + 1 if others is None else others
        return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)


def _duplicate(seen: BatchMeta, producer_id: int, num_records: int, size: int, log_name: str) -> LogAppendInfo:
    """The answer to a retry of a batch already appended: its original offsets."""
    log.info("%s: duplicate batch of producer %d (sequences %d-%d) answered with offset %d",
             log_name, producer_id, seen.first_seq, seen.last_seq, seen.first_offset)
    return LogAppendInfo(seen.first_offset, seen.last_offset, -1, -1, 1, num_records, size, duplicate=True)


def load_producer_batches(state: ProducerStateManager, table: BatchTable, from_offset: int = 0) -> None:
    """Feed a segment's batches of idempotent producers at or above ``from_offset`` (in offset
    order) to ``state``: for each producer only its last BATCHES_RETAINED batches of the segment,
    found with numpy, so that a segment of many small batches costs no Python loop per batch."""
    rows = np.flatnonzero((table.producer_id >= 0) & (table.base_offset >= from_offset))
    if rows.size == 0:
        return
    pids = table.producer_id[rows]
    order = np.lexsort((rows, pids))  # by producer, then by position
    sorted_pids = pids[order]
    group_end = np.r_[np.flatnonzero(sorted_pids[1:] != sorted_pids[:-1]), sorted_pids.size - 1]
    ends = np.repeat(group_end, np.diff(np.r_[-1, group_end]))
    keep = np.sort(rows[order[(ends - np.arange(sorted_pids.size)) < BATCHES_RETAINED]])
    for i in keep.tolist():
        base = int(table.base_offset[i])
        delta = int(table.last_offset_delta[i])
        seq = int(table.base_sequence[i])
        state.on_producer_batch(int(table.producer_id[i]), int(table.producer_epoch[i]), seq,
                                last_sequence(seq, delta) if seq >= 0 else -1, base, base + delta,
                                is_control=bool(int(table.attributes[i]) & CONTROL_FLAG),
                                timestamp=int(table.max_timestamp[i]))


def rebuild_producer_state(segments: Iterable[LogSegment], state: ProducerStateManager | None = None,
                           from_offset: int = 0) -> ProducerStateManager:
    """A log's producer state from its segments' batch headers at or above ``from_offset``, on
    top of ``state`` (a snapshot's at that offset; else empty): open transactions, the
    producers' last batches, and the transaction index entries of aborted transactions that
    are missing (appended to the segment of their marker)."""
    state = state if state is not None else ProducerStateManager()
    for seg in segments:
        table = seg.log.scan()
        load_producer_batches(state, table, from_offset)
        flagged = np.flatnonzero(((table.attributes & TRANSACTIONAL_FLAG) != 0) & (table.base_offset >= from_offset))
        if flagged.size == 0:
            continue
        indexed = {t.last_offset for t in seg.txn_index.entries}
        for i in flagged.tolist():
            pos, size = int(table.position[i]), int(table.size[i])
            raw = seg.log.read(pos, size)
            header = BatchHeader.parse(raw)
            marker = end_txn_marker_of(raw, header) if header.is_control else None
            done = state.on_batch(header, marker)
            if done is not None and done.is_aborted and done.last_offset not in indexed:
                seg.txn_index.append(state.aborted_entry(done))
    return state
