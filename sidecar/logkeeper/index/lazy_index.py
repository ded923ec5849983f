"""LazyIndex: an offset or time index opened when it is first used, as Kafka's LazyIndex.

Why: a log loaded after a clean shutdown has one pair of indexes a segment, and nothing reads
most of them until a fetch, the cleaner or retention looks an offset or a time up there.
Opening one opens the file, maps it, reads its length and looks for its first hole: a large part
of loading a log of many segments (what leaving them closed saves: bench/results/startup.md and
kafka_cleaner.md, their readings). So a segment loaded from disk holds its indexes as LazyIndex,
and the loader checks only that their files are there and hold whole entries
(LogSegment.sanity_check), as Kafka's loader checks only that they exist: the segments above the
recovery point are rebuilt by recovery anyway, and the others were trimmed and flushed when rolled.
The last segment's open at load (loader.py says why).

The index's own sanity check runs when it is opened. One that fails is rebuilt there and then by
the segment's ``rebuild`` (from its log: index_rebuild.py), as Kafka's loader rebuilds an index it
finds corrupt, so the read that opened it goes on with a sound index instead of failing or going
to a wrong position; a segment that cannot rebuild it (read-only) fails that read, naming the file.

The wrapper also renames, deletes and closes an index that was never opened: by its path alone.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..errors import CorruptIndexError
from ..fileio import as_path
from .abstract_index import AbstractIndex

log = logging.getLogger(__name__)

IndexT = TypeVar("IndexT", bound="AbstractIndex[Any]")


class LazyIndex(Generic[IndexT]):
    def __init__(self, path: Path, open_index: Callable[[Path], IndexT],
                 rebuild: Callable[[IndexT], None] | None = None, *, opened: bool = False) -> None:
        """``opened``: open it at once (a new segment's: its first append would open it anyway;
        it is not checked). ``rebuild(index)``: refill an index that failed its check."""
        self._path = path
        self._open = open_index
        self._rebuild = rebuild
        self._index: IndexT | None = open_index(path) if opened else None
        self._closed = False
        self._lock = threading.Lock()
        self._length: int | None = None  # the file's, while not opened (the file does not change)

    def get(self, *, checked: bool = True) -> IndexT:
        """The index, opened (and sanity-checked, unless not ``checked``: recovery, which rebuilds
        it) on the first call; ValueError once closed."""
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                if self._closed:
                    raise ValueError(f"index {self._path} is closed")
                index = self._open(self._path)
                try:
                    if checked:
                        self._check(index)
                except BaseException:
                    index.close_handler()
                    raise
                self._index = index
            return self._index

    def _check(self, index: IndexT) -> None:
        try:
            index.sanity_check()
        except CorruptIndexError as e:
            if self._rebuild is None:
                raise
            self._rebuild(index)
            index.sanity_check()
            log.warning("%s; rebuilt from its segment's log", e)

    @property
    def is_open(self) -> bool:
        return self._index is not None

    def file_length(self) -> int:
        """The length of the file of an index not opened (FileNotFoundError when there is none)."""
        if self._length is None:
            self._length = os.stat(self._path).st_size
        return self._length

    def bytes_bound(self) -> int:
        """The bytes of the entries: exact when open; for an index not opened, the file's length,
        which they never pass (the cleaner sizes its groups by it without opening the indexes of
        segments it reads from their start)."""
        index = self._index
        return index.size_in_bytes if index is not None else self.file_length()

    @property
    def path(self) -> Path:
        index = self._index
        return index.path if index is not None else self._path

    def rename_to(self, path: Path) -> None:
        """Atomically rename the file; the new path is adopted even if the rename fails (as the
        index's own rename_to)."""
        with self._lock:
            if self._index is not None:
                self._index.rename_to(path)
                return
            try:
                os.replace(self._path, path)
            finally:
                self._path = as_path(path)

    def delete_if_exists(self) -> bool:
        """Close and delete the file; True if this call deleted it."""
        with self._lock:
            self._closed = True
            if self._index is not None:
                return self._index.delete_if_exists()
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def flush(self) -> None:
        """msync an open index; one never opened has nothing unwritten."""
        index = self._index
        if index is not None:
            index.flush()

    def close(self, *, sync: bool = False) -> None:
        """Close an open index (trimmed, and fsynced with ``sync``); one never opened is as it
        was found on disk, so there is nothing to trim or sync. Later uses raise ValueError."""
        with self._lock:
            self._closed = True
            if self._index is not None:
                self._index.close(sync=sync)

    def close_handler(self) -> None:
        """Unmap without trimming; safe to repeat. Later uses raise ValueError."""
        with self._lock:
            self._closed = True
            if self._index is not None:
                self._index.close_handler()
