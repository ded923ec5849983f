"""Index files on a full or failing disk: an OSError, never a SIGBUS (issue 17, point 3).

A store into -- or, on tmpfs, even a read of -- a hole of a shared mapping makes the kernel
allocate a page; on a full disk it cannot and the process dies of SIGBUS. The index therefore maps
only blocks it allocated with ``posix_fallocate`` (abstract_index.py). Two kinds of test:

* fault injection: ``os.posix_fallocate`` fails (ENOSPC, EIO) at each point where the index
  allocates (create, growing past the allocated prefix by append and by bulk append), and the
  index raises the OSError and stays usable; opening a file left untrimmed allocates nothing;
* a real full tmpfs (mounted by the test as root, skipped with the reason elsewhere), in a
  subprocess so that a regression shows as "killed by SIGBUS" instead of killing the test run.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from logkeeper.index.abstract_index import ALLOCATION_CHUNK_BYTES
from logkeeper.index.offset_index import OffsetIndex, OffsetPosition
from logkeeper.index.time_index import TimeIndex, TimestampOffset
from tests.disk import small_tmpfs

MAX_SIZE = 1024 * 1024  # more than one allocation chunk
CHUNK_ENTRIES = ALLOCATION_CHUNK_BYTES // 8  # offset index entries in the first chunk


class FailingFallocate:
    """``os.posix_fallocate`` that records its calls and fails with ``err`` while armed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, err: int = errno.ENOSPC) -> None:
        self.real: Callable[[int, int, int], None] = os.posix_fallocate
        self.err = err
        self.armed = False
        self.calls: list[tuple[int, int]] = []
        monkeypatch.setattr(os, "posix_fallocate", self)

    def __call__(self, fd: int, offset: int, length: int) -> None:
        self.calls.append((offset, length))
        if self.armed:
            raise OSError(self.err, os.strerror(self.err))
        self.real(fd, offset, length)


@pytest.fixture(params=[errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def fallocate(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> FailingFallocate:
    return FailingFallocate(monkeypatch, request.param)


def allocated_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_new_index_allocates_its_first_chunk_and_stays_sparse(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "a.index", 0, 10 * 1024 * 1024) as idx:
        assert idx.length == 10 * 1024 * 1024 and idx.max_entries == 10 * 1024 * 1024 // 8
        assert ALLOCATION_CHUNK_BYTES <= allocated_bytes(idx.path) < 1024 * 1024


def test_a_lazy_index_allocates_only_the_pages_its_entries_reach(tmp_path: Path) -> None:
    """The cleaner's indexes (lazy_blocks): nothing allocated ahead, so the trim frees no block."""
    import numpy as np

    page = mmap.PAGESIZE
    with OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE, lazy_blocks=True) as idx, \
            TimeIndex(tmp_path / "a.timeindex", 0, MAX_SIZE, lazy_blocks=True) as tidx:
        assert allocated_bytes(idx.path) == 0 and allocated_bytes(tidx.path) == 0
        offsets = np.arange(0, 25 * 100, 100, dtype=np.int64)
        idx.append_many(offsets, offsets * 10)
        tidx.maybe_append(1000, 0)
        assert allocated_bytes(idx.path) == page and allocated_bytes(tidx.path) == page
        more = np.arange(25 * 100, 600 * 100, 100, dtype=np.int64)  # into the second page
        idx.append_many(more, more * 10)
        assert allocated_bytes(idx.path) == 2 * page and idx.lookup(10**9) == OffsetPosition(59_900, 599_000)
    assert idx.path.stat().st_size == 600 * 8 and tidx.path.stat().st_size == 12


def test_trimming_a_lazy_index_keeps_its_map_and_it_grows_again(tmp_path: Path) -> None:
    """A trim that leaves no mapped page wholly past the new end (each cleaned segment's) cuts the
    file under the map instead of remapping it; an index grown back (an old segment made active
    again) allocates and remaps before an entry goes past the cut, and the entries survive."""
    import numpy as np

    idx = OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE, lazy_blocks=True)
    offsets = np.arange(0, 25 * 100, 100, dtype=np.int64)
    idx.append_many(offsets, offsets * 10)
    mapped = idx._mm
    idx.trim_to_valid_size()
    assert idx._mm is mapped and mapped is not None
    assert idx.path.stat().st_size == 25 * 8 and idx.max_entries == 25
    assert idx.lookup(1250) == OffsetPosition(1200, 12000)
    idx.resize(MAX_SIZE)
    more = np.arange(25 * 100, 600 * 100, 100, dtype=np.int64)  # past the cut, into a second page
    idx.append_many(more, more * 10)
    assert idx.lookup(10**9) == OffsetPosition(59_900, 599_000)
    idx.close()
    with OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE) as again:
        assert again.entries == 600 and again.lookup(1250) == OffsetPosition(1200, 12000)
    # a regular index's trim leaves whole mapped pages past the end: it remaps
    with OffsetIndex(tmp_path / "b.index", 0, MAX_SIZE) as regular:
        regular.append(0, 0)
        before = regular._mm
        regular.trim_to_valid_size()
        assert regular._mm is not before and regular.lookup(5) == OffsetPosition(0, 0)


def test_a_lazy_index_append_with_no_block_raises_and_keeps_the_index(tmp_path: Path,
                                                                      fallocate: FailingFallocate) -> None:
    import numpy as np

    idx = OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE, lazy_blocks=True)
    tidx = TimeIndex(tmp_path / "a.timeindex", 0, MAX_SIZE, lazy_blocks=True)
    fallocate.armed = True
    offsets = np.arange(10, dtype=np.int64)
    with pytest.raises(OSError) as e:
        idx.append_many(offsets, offsets)
    assert e.value.errno == fallocate.err and idx.entries == 0
    with pytest.raises(OSError):
        idx.append(0, 0)
    with pytest.raises(OSError):
        tidx.maybe_append(1000, 0)
    assert idx.entries == 0 and tidx.entries == 0
    fallocate.armed = False
    idx.append_many(offsets, offsets)
    tidx.maybe_append(1000, 9)
    assert idx.entry(9) == OffsetPosition(9, 9) and tidx.last_entry == TimestampOffset(1000, 9)
    idx.close()
    tidx.close()


def test_create_fails_with_the_error_and_leaves_no_file(tmp_path: Path, fallocate: FailingFallocate) -> None:
    fallocate.armed = True
    for cls in (OffsetIndex, TimeIndex):
        path = tmp_path / f"n.{cls.__name__}"
        with pytest.raises(OSError) as e:
            cls(path, 0, MAX_SIZE)
        assert e.value.errno == fallocate.err
        assert not path.exists()  # a half-made file would be taken as full of entries next time


def test_append_past_the_allocated_prefix_raises_and_keeps_the_index(tmp_path: Path,
                                                                    fallocate: FailingFallocate) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE)
    for i in range(CHUNK_ENTRIES):  # the first chunk: already allocated, no call
        idx.append(i, i)
    fallocate.armed = True
    calls = len(fallocate.calls)
    with pytest.raises(OSError) as e:
        idx.append(CHUNK_ENTRIES, CHUNK_ENTRIES)  # the store would be in a hole: allocate first
    assert e.value.errno == fallocate.err and len(fallocate.calls) == calls + 1
    assert (idx.entries, idx.last_offset) == (CHUNK_ENTRIES, CHUNK_ENTRIES - 1)
    assert idx.lookup(10**9) == OffsetPosition(CHUNK_ENTRIES - 1, CHUNK_ENTRIES - 1)
    fallocate.armed = False  # space freed: appends go on
    idx.append(CHUNK_ENTRIES, CHUNK_ENTRIES)
    assert idx.lookup(10**9) == OffsetPosition(CHUNK_ENTRIES, CHUNK_ENTRIES)
    idx.close()
    assert idx.path.stat().st_size == (CHUNK_ENTRIES + 1) * 8


def test_time_index_append_past_the_allocated_prefix(tmp_path: Path, fallocate: FailingFallocate) -> None:
    idx = TimeIndex(tmp_path / "a.timeindex", 0, MAX_SIZE)
    per_chunk = ALLOCATION_CHUNK_BYTES // 12 + 1  # the entry that crosses the chunk's end
    for i in range(per_chunk - 1):
        idx.maybe_append(1000 + i, i)
    fallocate.armed = True
    with pytest.raises(OSError):
        idx.maybe_append(10**6, per_chunk)
    assert idx.entries == per_chunk - 1 and idx.last_entry == TimestampOffset(1000 + per_chunk - 2, per_chunk - 2)
    fallocate.armed = False
    idx.maybe_append(10**6, per_chunk)
    assert idx.lookup(10**6) == TimestampOffset(10**6, per_chunk)
    idx.close()


def test_bulk_append_past_the_allocated_prefix(tmp_path: Path, fallocate: FailingFallocate) -> None:
    import numpy as np

    idx = OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE)
    offsets = np.arange(CHUNK_ENTRIES * 3, dtype=np.int64)
    fallocate.armed = True
    with pytest.raises(OSError):
        idx.append_many(offsets, offsets)
    assert idx.entries == 0
    fallocate.armed = False
    idx.append_many(offsets, offsets)
    assert idx.entries == len(offsets) and idx.entry(len(offsets) - 1) == OffsetPosition(len(offsets) - 1,
                                                                                       len(offsets) - 1)
    idx.close()


def test_regrowing_after_a_trim_allocates_again(tmp_path: Path, fallocate: FailingFallocate) -> None:
    """A rolled segment that becomes active again (truncation) grows its trimmed index back: the
    grown tail is a hole until entries reach it."""
    idx = OffsetIndex(tmp_path / "a.index", 0, MAX_SIZE)
    idx.append(0, 0)
    idx.trim_to_valid_size()
    idx.resize(MAX_SIZE)
    fallocate.armed = True
    with pytest.raises(OSError):
        idx.append(1, 1)
    fallocate.armed = False
    idx.append(1, 1)
    assert idx.entries == 2
    idx.close()


def untrimmed(path: Path, entries: int, length: int) -> Path:
    """An index file as a killed process leaves it: entries, then a hole up to its full size."""
    with open(path, "wb") as f:
        for i in range(entries):
            f.write((i).to_bytes(4, "big") + (i * 10).to_bytes(4, "big"))
        f.truncate(length)
    return path


def _first_hole(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE)
    finally:
        os.close(fd)


def test_an_untrimmed_file_opens_without_allocating_and_ends_at_its_first_hole(
        tmp_path: Path, fallocate: FailingFallocate) -> None:
    """A disk still full after the kill: the index opens, its entries the slots before the hole
    (the block that holds the entries, zeros after them, as Kafka would count them)."""
    path = untrimmed(tmp_path / "u.index", 3, MAX_SIZE)
    hole = _first_hole(path)
    assert 3 * 8 <= hole < MAX_SIZE
    fallocate.armed = True
    idx = OffsetIndex(path, 0, MAX_SIZE)
    assert fallocate.calls == []
    assert idx.entries == hole // 8 and idx.max_entries == MAX_SIZE // 8
    assert idx.entry(2) == OffsetPosition(2, 20) and idx.entry(3) == OffsetPosition(0, 0)
    idx.truncate()  # recovery's rebuild: the entries go back where blocks are
    for i in range(3):
        idx.append(i, i * 10)
    assert fallocate.calls == [] and idx.lookup(2) == OffsetPosition(2, 20)
    for i in range(3, hole // 8):
        idx.append(i, i * 10)
    with pytest.raises(OSError) as e:  # past the hole: allocated first, so the full disk says so
        idx.append(hole // 8, 0)
    chunk_end = -(-(hole + 8) // ALLOCATION_CHUNK_BYTES) * ALLOCATION_CHUNK_BYTES
    assert e.value.errno == fallocate.err and fallocate.calls == [(hole, chunk_end - hole)]
    fallocate.armed = False
    idx.append(hole // 8, 0)
    idx.close()
    assert path.stat().st_size == (hole // 8 + 1) * 8


def test_a_trimmed_file_is_mapped_without_allocating(tmp_path: Path, fallocate: FailingFallocate) -> None:
    path = untrimmed(tmp_path / "t.index", 3, 3 * 8)
    fallocate.armed = True
    idx = OffsetIndex(path, 0, MAX_SIZE)
    assert fallocate.calls == [] and idx.entries == 3
    idx.close_handler()


def test_read_only_index_of_an_untrimmed_file_reads_without_mapping_holes(tmp_path: Path,
                                                                          fallocate: FailingFallocate) -> None:
    path = untrimmed(tmp_path / "r.index", 3, 64 * 1024)
    fallocate.armed = True
    idx = OffsetIndex(path, 0, MAX_SIZE, writable=False)
    assert fallocate.calls == []
    assert idx.entries == _first_hole(path) // 8  # as a writable index counts them
    assert idx.entry(1) == OffsetPosition(1, 10) and idx.last_offset == 0
    idx.close()
    assert path.stat().st_size == 64 * 1024  # read-only: the file is never changed


@pytest.mark.parametrize("failing_call", [1, 2], ids=["offset-index", "time-index"])
def test_a_segment_whose_index_cannot_be_allocated_releases_its_files(tmp_path: Path, fallocate: FailingFallocate,
                                                                      failing_call: int) -> None:
    """A roll on a full disk: the new segment raises the OSError and holds no descriptor or map."""
    from logkeeper.log.segment import LogSegment

    real = fallocate.real
    calls = 0

    def nth_fails(fd: int, offset: int, length: int) -> None:
        nonlocal calls
        calls += 1
        if calls == failing_call:
            raise OSError(fallocate.err, os.strerror(fallocate.err))
        real(fd, offset, length)

    fallocate.real = nth_fails
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as e:
        LogSegment(tmp_path, 100, max_index_size=MAX_SIZE)
    assert e.value.errno == fallocate.err
    assert len(os.listdir("/proc/self/fd")) == before
    assert not (tmp_path / f"{100:020d}.timeindex").exists()


# ------------------------------------------------------------------------------------------------
# A real full file system
# ------------------------------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import errno, os, sys
    from pathlib import Path
    from logkeeper.index.offset_index import OffsetIndex
    from logkeeper.index.time_index import TimeIndex
    from tests.disk import fill

    root = Path(sys.argv[1])
    size = 1024 * 1024
    # before the disk fills: a growing index (its first chunk allocated), an untrimmed one
    growing = OffsetIndex(root / "growing.index", 0, size)
    with open(root / "untrimmed.index", "wb") as f:
        f.write((0).to_bytes(4, "big") + (7).to_bytes(4, "big"))
        f.truncate(size)
    fill(root)

    def expect_enospc(what, action):
        try:
            action()
        except OSError as e:
            assert e.errno == errno.ENOSPC, (what, e)
            print(what, "ENOSPC", flush=True)
        else:
            raise AssertionError(f"{what}: no error on a full disk")

    def append_until_full():
        for i in range(size // 8):
            growing.append(i, i)

    expect_enospc("append", append_until_full)
    assert growing.entries > 0
    expect_enospc("create", lambda: OffsetIndex(root / "new.index", 0, size))
    expect_enospc("create-time", lambda: TimeIndex(root / "new.timeindex", 0, size))
    assert not (root / "new.index").exists()
    lazy = OffsetIndex(root / "lazy.index", 0, size, lazy_blocks=True)  # allocates nothing yet
    expect_enospc("lazy-append", lambda: lazy.append(0, 0))
    lazy_time = TimeIndex(root / "lazy.timeindex", 0, size, lazy_blocks=True)
    expect_enospc("lazy-append-time", lambda: lazy_time.maybe_append(1000, 0))
    ro = OffsetIndex(root / "untrimmed.index", 0, size, writable=False)
    assert ro.entry(0).position == 7 and ro.last_offset == 0  # zeros after the entry, up to the hole
    print("read-only ok", flush=True)
    untrimmed = OffsetIndex(root / "untrimmed.index", 0, size)  # nothing to allocate: it opens
    assert untrimmed.entry(0).position == 7 and 0 < untrimmed.entries < size // 8
    untrimmed.truncate()  # recovery's rebuild, in the blocks the file has
    untrimmed.append(0, 7)
    print("open-untrimmed ok", flush=True)
    expect_enospc("untrimmed-append", lambda: [untrimmed.append(i, i) for i in range(1, size // 8)])
    untrimmed.close()
    growing.close()  # a trim frees blocks
    print("done", flush=True)
""")


def test_a_full_tmpfs_gives_enospc_not_sigbus(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", "2m") as mnt:
        done = subprocess.run([sys.executable, "-c", CHILD, str(mnt)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], check=False)
        assert done.returncode >= 0, f"killed by {signal.Signals(-done.returncode).name}: {done.stdout}"
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[:-1] == ["append ENOSPC", "create ENOSPC", "create-time ENOSPC",
                                                "lazy-append ENOSPC", "lazy-append-time ENOSPC",
                                                "read-only ok", "open-untrimmed ok", "untrimmed-append ENOSPC",
                                                "done"]
