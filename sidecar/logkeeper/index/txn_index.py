"""TransactionIndex: the aborted transactions whose data lies in one segment (``.txnindex``).

| byte | field            | type  | notes                                             |
|------|------------------|-------|---------------------------------------------------|
| 0    | version          | int16 | 0                                                 |
| 2    | producerId       | int64 |                                                   |
| 10   | firstOffset      | int64 | first offset of the aborted transaction           |
| 18   | lastOffset       | int64 | offset of the ABORT marker                        |
| 26   | lastStableOffset | int64 | the LSO when the marker was written               |

34 bytes an entry, appended in marker order; no preallocation (the file exists only once an
abort lands in the segment). Unlike the offset and time indexes it cannot be rebuilt from the
segment alone: it needs the producers' open transactions at the segment's start, which the log
tracks while it recovers or appends.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptIndexError
from ..fileio import as_path, fsync_if_exists

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    """One entry of a transaction index: an aborted transaction's producer and offsets."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset,
                          self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int, *, absent: bool = False) -> None:
        """``absent``: the caller listed the directory and found no such file (a log's load: most
        segments have none, and trying to open each was a good part of loading a segment), so
        it is not looked for."""
        self._path = as_path(path)
        self.base_offset = base_offset
        self._lock = threading.Lock()
        # a damaged file (a power cut tore its last entry) is not an error of opening: the segment's
        # sanity check raises it, and the loader rebuilds the index from the log as it does the others
        self._corrupt: CorruptIndexError | None = None
        self._entries: list[AbortedTxn] = []
        if not absent:
            try:
                self._entries = self._read()
            except CorruptIndexError as e:
                self._corrupt = e

    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def _read(self) -> list[AbortedTxn]:
        try:  # a raw descriptor: most segments have no file, and a log loads thousands of them
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:  # no transaction was ever aborted in this segment
            return []
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"transaction index {self._path} has {len(data)} bytes, not a multiple of {ENTRY_SIZE}"
            )
        out = []
        for pos in range(0, len(data), ENTRY_SIZE):
            version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
            if version != VERSION:
                raise CorruptIndexError(f"transaction index {self._path}: version {version} at position {pos}")
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def append(self, txn: AbortedTxn) -> bool:
        """Add ``txn``; whether that created the file: its name is durable only once the caller
        fsyncs the directory (a segment's first aborted transaction)."""
        with self._lock:
            if self._entries and txn.last_offset < self._entries[-1].last_offset:
                raise ValueError(
                    f"aborted transaction ending at {txn.last_offset} is before the last one in "
                    f"{self._path} ({self._entries[-1].last_offset})"
                )
            created = not self._entries and not self._path.exists()  # a stat per segment at most
            with open(self._path, "ab") as f:
                f.write(txn.pack())
            self._entries.append(txn)
            return created

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        return [t for t in self._entries
                if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset``."""
        with self._lock:
            keep = [t for t in self._entries if t.last_offset < offset]
            if len(keep) != len(self._entries):
                self._entries = keep
                self._rewrite()

    def reset(self) -> None:
        with self._lock:
            self._entries = []
            self._corrupt = None
            if self._path.exists():
                self._rewrite()

    def _rewrite(self) -> None:
        with open(self._path, "wb") as f:
            f.write(b"".join(t.pack() for t in self._entries))

    def sanity_check(self) -> None:
        if self._corrupt is not None:
            raise self._corrupt
        for t in self._entries:
            if t.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"transaction index {self._path}: last offset {t.last_offset} below base "
                    f"offset {self.base_offset}"
                )

    # No file is the common case (no transaction was aborted in the segment): flush and rename
    # try the call and take FileNotFoundError for it, instead of a stat first on every segment.
    def flush(self) -> None:
        fsync_if_exists(self._path)

    def rename_to(self, new_path: Path) -> None:
        try:
            os.replace(self._path, new_path)
        except FileNotFoundError:
            pass
        self._path = as_path(new_path)

    def delete_if_exists(self) -> bool:
        try:
            self._path.unlink()
            return True
        except FileNotFoundError:
            return False

    def close(self) -> None:
        """Nothing is held open between appends."""
