"""Producer state snapshots: Kafka's ``.snapshot`` files, written at each roll and at a clean
close, read at load.

Why: without one, a log's producer state (open transactions, idempotent producers' last
batches) is rebuilt at load by scanning the headers of every segment. And Kafka, loading a
directory with the clean-shutdown marker but no snapshot, skips that scan and starts with no
producer state at all (its LogLoader's "upgrade" path): an open transaction logkeeper left would
vanish, and Kafka's read_committed readers would read its records. So, as Kafka does, a roll
writes the state at the new segment's base offset, a clean close writes it at the log end
offset, and a load starts from the latest snapshot and scans only the batches after it: after a
crash, the active segment's.

Format, Kafka's ProducerSnapshot version 1 (big-endian)::

    version int16 (1) | crc uint32 | count int32 | count x entry (46 bytes):
      producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64 |
      offset_delta int32 | timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64

``crc`` is the CRC-32C of every byte after it. The file ``<offset, 20 digits>.snapshot`` holds
the state after every batch below ``offset``. An entry keeps a producer's last batch only (its
last offset -1 when it has none): after a load from a snapshot, a retry is recognised against
that batch alone, as in Kafka.

Rules:

- roll (``write(..., durable=False)``): written to a temporary name and renamed, not fsynced
  (Kafka's ``takeSnapshot(false)``: the append path holds the log's lock); the flush that moves
  the recovery point past it fsyncs it (``sync``). A power cut may leave it empty or torn: the
  CRC and length checks refuse it and the load falls back.
- clean close (``write``, durable): fsynced and renamed through fileio.replace_file_durably;
  the other snapshots stay, as Kafka's do.
- a snapshot goes with its segment: retention's deletions and the cleaner's replacements delete
  the snapshots at the base offsets of the segments they remove (``delete_at``).
- load (``restore``): leftover temporary files and strays (Kafka's rule: a snapshot at no
  segment's base offset, except the latest one when it lies above every base, which is a clean
  close's) are deleted; so are snapshots above the log end offset (a tail cut by recovery or a
  truncation) and a corrupt one; the latest left is read and the batches at or above its offset
  are scanned on top; with none, every segment is scanned. Why a snapshot that survived a power
  cut can be trusted: it holds the state of the batches below its offset, and recovery keeps
  those batches whole or cuts the log below the snapshot, which then goes.
- truncation (``delete_above``): snapshots above the new end are deleted before the state is
  rebuilt, so that no later load can take one that describes removed batches.

logkeeper does not track the transaction coordinator's epoch: an entry read from Kafka's
snapshot keeps it, others write -1 (Kafka's "none"). Producers idle for producer.id.expiration.ms
are dropped at load, as Kafka drops them when it reads a snapshot (producer_state.py).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..fileio import TMP_SUFFIX, fsync_dir, fsync_if_exists, replace_file_durably
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
_TMP_NAME = names.SNAPSHOT_SUFFIX + TMP_SUFFIX


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


def read(path: Path) -> list[SnapshotEntry]:
    """The entries of the snapshot file ``path`` (CorruptSnapshotError when it is not one)."""
    return decode(path.read_bytes(), path)


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
    return _listing(directory)[0]


def _listing(directory: Path) -> tuple[dict[int, Path], list[Path]]:
    """The snapshots by offset, and the temporary files of writes a crash interrupted."""
    found, leftovers = {}, []
    for entry in os.scandir(directory):
        if entry.name.endswith(names.SNAPSHOT_SUFFIX):
            try:
                found[names.offset_from_file_name(entry.name)] = Path(entry.path)
            except ValueError:
                continue
        elif entry.name.endswith(_TMP_NAME):
            leftovers.append(Path(entry.path))
    return found, leftovers


def strays(offsets: Iterable[int], bases: Iterable[int]) -> list[int]:
    """Kafka's stray snapshots (ProducerStateManager.removeStraySnapshots): those at no segment's
    base offset, except the latest of them when it lies above every base (a clean close's, at the
    log end)."""
    base_set = set(bases)
    top = max(base_set, default=None)
    found = sorted(o for o in offsets if o not in base_set)
    if found and top is not None and found[-1] > top:
        found.pop()
    return found


def _delete(paths: Iterable[Path], directory: Path) -> None:
    removed = False
    for path in paths:
        path.unlink(missing_ok=True)
        removed = True
    if removed:
        fsync_dir(directory)


def delete_above(directory: Path, offset: int) -> None:
    """Delete the snapshots above ``offset`` (durably): they describe batches no longer there."""
    _delete_above(directory, offset, [p for o, p in snapshots(directory).items() if o > offset])


def _delete_above(directory: Path, offset: int, above: list[Path]) -> None:
    if above:
        log.info("deleting producer snapshots above offset %d in %s: %s", offset, directory,
                 ", ".join(p.name for p in above))
        _delete(above, directory)


class LoadPlan(NamedTuple):
    """What a load does with a directory's snapshots, in its order (``restore``; ``verify``
    reports it): delete the strays unread, delete those above the log end, then read the
    candidates, latest first, until one is valid (deleting each corrupt one on the way)."""

    strays: list[int]
    above: list[int]
    candidates: list[int]


def load_plan(offsets: Iterable[int], bases: Iterable[int], log_end_offset: int | None,
              scan_from: int | None = None) -> LoadPlan:
    """The load's plan for snapshots at ``offsets`` in a log of segments at ``bases``
    (``log_end_offset`` None: no bound, a directory without segments)."""
    found = set(offsets)
    stray = strays(found, bases)
    rest = sorted(found.difference(stray), reverse=True)
    end = log_end_offset if log_end_offset is not None else max(rest, default=0)
    usable = end if scan_from is None else min(end, scan_from)
    return LoadPlan(stray, [o for o in rest if o > end], [o for o in rest if o <= usable])


def delete_at(directory: Path, offsets: Iterable[int]) -> None:
    """Delete the snapshots at ``offsets`` (the base offsets of segments that went), without an
    fsync: one that comes back after a power cut still holds a true state."""
    for offset in offsets:
        names.segment_file(directory, offset, names.SNAPSHOT_SUFFIX).unlink(missing_ok=True)


def restore(directory: Path, segments: LogSegments, log_end_offset: int,
            scan_from: int | None = None) -> ProducerStateManager:
    """The producer state at load: from the latest valid snapshot at or below the log end offset
    (and at or below ``scan_from``, where the scan must start: the load emptied the transaction
    indexes from there, and the scan puts their aborted transactions back) and the batches after
    it, or from every segment when there is none."""
    found, leftovers = _listing(directory)  # listed once: every partition's load comes through here
    plan = load_plan(found, segments.base_offsets(), log_end_offset, scan_from)
    doomed = [*leftovers, *(found[o] for o in plan.strays)]
    if doomed:
        log.info("deleting leftover and stray producer snapshots in %s: %s", directory,
                 ", ".join(p.name for p in doomed))
        _delete(doomed, directory)
    _delete_above(directory, log_end_offset, [found[o] for o in plan.above])
    for offset in plan.candidates:
        try:
            state = state_from(read(found[offset]))
        except CorruptSnapshotError as e:
            log.warning("deleting a producer snapshot that cannot be read: %s", e)
            _delete([found[offset]], directory)
            continue
        return rebuild_producer_state(segments.values(offset, None), state, from_offset=offset)
    return rebuild_producer_state(segments.values())


def write(directory: Path, offset: int, state: ProducerStateManager, *, durable: bool = True) -> None:
    """The state at ``offset`` (every batch below it is in the log) as ``<offset>.snapshot``:
    fsynced and its name made durable, or (``durable=False``, a roll) only renamed into place."""
    path = names.segment_file(directory, offset, names.SNAPSHOT_SUFFIX)
    data = encode(entries_of(state))
    if durable:
        replace_file_durably(path, data)
        return
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def sync(directory: Path, offset: int) -> None:
    """fsync the snapshot at ``offset`` written by a roll (gone meanwhile: nothing to do)."""
    fsync_if_exists(names.segment_file(directory, offset, names.SNAPSHOT_SUFFIX))
