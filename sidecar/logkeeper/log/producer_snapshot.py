"""Producer state snapshots: Kafka's ``.snapshot`` files, read at load and written at a clean close.

Why: without one, a log's producer state (open transactions, idempotent producers' last
batches) is rebuilt at load by scanning the headers of every segment. And Kafka, loading a
directory with the clean-shutdown marker but no snapshot, skips that scan and starts with no
producer state at all (its LogLoader's "upgrade" path): an open transaction logkeeper left would
vanish, and Kafka's read_committed readers would read its records. So a clean close writes the
state at the log end offset, as Kafka's own close does, and a load starts from the latest
snapshot and scans only the batches after it.

Format, Kafka's ProducerSnapshot version 1 (big-endian)::

    version int16 (1) | crc uint32 | count int32 | count x entry (46 bytes):
      producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64 |
      offset_delta int32 | timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64

``crc`` is the CRC-32C of every byte after it. The file ``<offset, 20 digits>.snapshot`` holds
the state after every batch below ``offset``. An entry keeps a producer's last batch only (its
last offset -1 when it has none): after a load from a snapshot, a retry is recognised against
that batch alone, as in Kafka.

Rules:

- load (``restore``): snapshots above the log end offset (a tail cut by recovery or a
  truncation) are deleted, as a corrupt one is; the latest left is read and the batches at or
  above its offset are scanned on top; with none, every segment is scanned;
- truncation (``delete_above``): snapshots above the new end are deleted before the state is
  rebuilt, so that no later load can take one that describes removed batches;
- clean close (``write``): the other snapshots are deleted, then the new one is written through
  fileio.replace_file_durably (whose directory fsync makes the deletions durable too). A crash in
  between leaves no snapshot: the next load scans, which is always correct for logkeeper; the
  clean-shutdown marker comes only after every log closed, so Kafka scans too.

logkeeper does not track the transaction coordinator's epoch: an entry read from Kafka's
snapshot keeps it, others write -1 (Kafka's "none"). Producers are not expired (Kafka drops those
idle for producer.id.expiration.ms when it loads a snapshot).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..fileio import TMP_SUFFIX, fsync_dir, replace_file_durably
from ..records.batch import crc32c
from . import names
from .producer_state import INT32_MAX, BatchMeta, ProducerEntry, ProducerStateManager, rebuild_producer_state

if TYPE_CHECKING:
    from .segments import LogSegments

log = logging.getLogger(__name__)

VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6  # the CRC covers every byte after the version and itself


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (named in the message): it is deleted, and an older
    snapshot or a scan of the segments takes its place."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode(entries: Iterable[SnapshotEntry]) -> bytes:
    body = b"".join(_ENTRY.pack(*e) for e in entries)
    count = len(body) // _ENTRY.size
    tail = struct.pack(">i", count) + body
    return struct.pack(">hI", VERSION, crc32c(tail)) + tail


def decode(data: bytes, path: Path) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{path}: {len(data)} bytes, shorter than a snapshot's header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"{path}: unknown snapshot version {version}")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{path}: {len(data)} bytes do not hold the {count} entries its header counts")
    computed = crc32c(memoryview(data)[_CRC_FROM:])
    if computed != crc:
        raise CorruptSnapshotError(f"{path}: CRC {computed:#010x} of its entries, {crc:#010x} stored")
    return [SnapshotEntry(*e) for e in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size:])]


def entries_of(state: ProducerStateManager) -> list[SnapshotEntry]:
    """One entry per producer: its epoch, last batch, timestamp and open transaction."""
    out = []
    for pid in sorted(state.producers.keys() | state.ongoing.keys()):
        entry = state.producers.get(pid) or ProducerEntry(-1)
        last = entry.batches[-1] if entry.batches else None
        out.append(SnapshotEntry(
            pid, entry.epoch,
            last.last_seq if last else -1, last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            entry.last_timestamp, entry.coordinator_epoch, state.ongoing.get(pid, -1)))
    return out


def state_from(entries: Iterable[SnapshotEntry]) -> ProducerStateManager:
    state = ProducerStateManager()
    for e in entries:
        entry = state.producers[e.producer_id] = ProducerEntry(
            e.epoch, last_timestamp=e.timestamp, coordinator_epoch=e.coordinator_epoch)
        if e.last_offset >= 0:
            first_seq = (e.last_sequence - e.offset_delta) % (INT32_MAX + 1) if e.last_sequence >= 0 else -1
            entry.batches.append(BatchMeta(first_seq, e.last_sequence, e.last_offset - e.offset_delta,
                                           e.last_offset))
        if e.current_txn_first_offset >= 0:
            state.ongoing[e.producer_id] = e.current_txn_first_offset
    return state


def snapshots(directory: Path) -> dict[int, Path]:
    """The snapshot files of a partition directory by offset (read only: verify lists them too)."""
    found = {}
    for entry in os.scandir(directory):
        if entry.name.endswith(names.SNAPSHOT_SUFFIX):
            try:
                found[names.offset_from_file_name(entry.name)] = Path(entry.path)
            except ValueError:
                continue
    return found


def _delete(paths: Iterable[Path], directory: Path) -> None:
    removed = False
    for path in paths:
        path.unlink(missing_ok=True)
        removed = True
    if removed:
        fsync_dir(directory)


def delete_above(directory: Path, offset: int, found: dict[int, Path] | None = None) -> None:
    """Delete the snapshots above ``offset`` (durably): they describe batches no longer there.
    ``found``: the directory's snapshots when the caller has listed them already."""
    above = [p for o, p in (snapshots(directory) if found is None else found).items() if o > offset]
    if above:
        log.info("deleting producer snapshots above offset %d in %s: %s", offset, directory,
                 ", ".join(p.name for p in above))
        _delete(above, directory)


def restore(directory: Path, segments: LogSegments, log_end_offset: int) -> ProducerStateManager:
    """The producer state at load: from the latest valid snapshot at or below the log end offset
    and the batches after it, or from every segment when there is none."""
    found = snapshots(directory)  # listed once: every partition's load comes through here
    delete_above(directory, log_end_offset, found)
    for offset in sorted((o for o in found if o <= log_end_offset), reverse=True):
        try:
            state = state_from(decode(found[offset].read_bytes(), found[offset]))
        except CorruptSnapshotError as e:
            log.warning("deleting a producer snapshot that cannot be read: %s", e)
            _delete([found[offset]], directory)
            continue
        return rebuild_producer_state(segments.values(offset, None), state, from_offset=offset)
    return rebuild_producer_state(segments.values())


def write(directory: Path, offset: int, state: ProducerStateManager) -> None:
    """The state at ``offset`` (the log end offset, every batch below it flushed) as the
    directory's only snapshot."""
    path = names.segment_file(directory, offset, names.SNAPSHOT_SUFFIX)
    others = [p for p in snapshots(directory).values() if p != path]
    others += directory.glob(f"*{names.SNAPSHOT_SUFFIX}{TMP_SUFFIX}")  # writes a crash interrupted
    for p in others:
        p.unlink(missing_ok=True)
    replace_file_durably(path, encode(entries_of(state)))
