"""Moving a file the Spark job staged into a partition directory, with the blame put right.

The staged file is renamed into place; when the staging directory is on another file system
(``log.cleaner.offload.staging.dir``) it is copied and fsynced. The two sides fail differently:

* reading the staged file fails: the hand-off fails (``OffloadError``) and is retried later; the
  log directory has nothing to do with it;
* writing into the partition directory fails (ENOSPC, EIO, ...): the OSError propagates, and the
  hand-off takes that log directory offline, as any other write of a log's files does.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..fileio import pwrite_all
from .offload_job import OffloadError

COPY_CHUNK_BYTES = 1 << 20


def install_staged(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` (rename, or copy with its modification time and fsync)."""
    try:
        os.rename(source, target)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise  # same file system: the partition directory's (the staged file was just checked)
    _copy(source, target)


def _copy(source: Path, target: Path) -> None:
    try:
        src = os.open(source, os.O_RDONLY)
        st = os.fstat(src)
    except OSError as e:
        raise OffloadError(f"staged file {source}: {e}") from None
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            position = 0
            while True:
                try:
                    chunk = os.pread(src, COPY_CHUNK_BYTES, position)
                except OSError as e:
                    raise OffloadError(f"staged file {source}: {e}") from None
                if not chunk:
                    break
                pwrite_all(dst, chunk, position)
                position += len(chunk)
            os.fsync(dst)
        finally:
            os.close(dst)
        # the segment's modification time drives time-based retention of a segment without timestamps
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(src)
