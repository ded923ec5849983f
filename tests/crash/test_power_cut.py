"""Power cuts: only what was fsynced survives, and nothing the engine promised is lost.

SIGKILL (``test_manager_sigkill.py``) keeps the page cache, so it proves nothing about the order
of fsyncs. Here the engine runs on a FUSE file system that remembers only what was fsynced
(``powercut_fs.py``): at a random moment the power is cut (the file system freezes and writes
the image a disk could hold: fsynced file contents under fsynced directory entries; in half the
cuts, random prefixes of the later changes too, the last write torn or zeroed); then a fresh
LogManager recovers a copy of that image on a real directory, and the test checks the
durability contract there (the README's "Durability contract"):

- ``cut`` (2 partitions, retention by size): a record is promised once ``LogManager.flush``
  returned a recovery point above it (an explicit flush; the sidecar's acks=all with a flush);
- ``cutfm`` (flush.messages=1, no retention): once ``append`` returned (the log fsyncs inside
  the append, as Kafka does when flush.messages is reached);
- ``cutms`` (flush.ms=0, the flusher runs every 10 ms, no retention): once the log's recovery
  point, moved by the background flusher, was seen above it;
- ``cutc`` (compacted, flush.messages=1, the log cleaner running: ``.cleaned`` segments swapped
  in by ``log/replace.py``): once ``append`` returned; compaction may drop a record, but the
  last promised record of its key stays unless a later record of that key is there;
- ``cutd`` (flush.messages=1, no retention), deleted with ``LogManager.delete_log`` now and then
  and created again from offset 0: its records are promised as ``cutfm``'s; a deletion, once
  ``delete_log`` returned, is a promise too: no record of the deleted log comes back (writer ids
  grow with each deletion, so a record's writer tells which log it was written to);
- ``cuti`` (flush.messages=1, no retention), written by idempotent producers (a producer id for
  each writer): its records are promised as ``cutfm``'s, and after the cut each producer's last
  promised batch is sent again, as a client retries a request whose answer the cut took: it must
  not be appended twice (the producer state survived the cut: snapshots, or the log scanned);
- ``cutt`` (flush.messages=1, no retention), written in transactions (a producer id for each
  writer; COMMIT or ABORT markers appended as a transaction coordinator writes them): its records
  are promised as ``cutfm``'s, and each marker once its append returned. After the cut every
  promised marker is there as promised, and what recovery rebuilt agrees with the log: the
  transaction index lists exactly its aborted transactions (a read_committed consumer skips their
  records by it) and the producer state holds open exactly those without a marker (the last
  stable offset is the first of them). A child aborts the transactions earlier writers left open,
  as a coordinator aborts a dead producer's;
- ``cutct``: ``cutt``'s workload with keys, compacted by the cleaner as it is written
  (delete.retention.ms 0, so markers go as soon as their transaction has no data left): a
  promised record of a transaction the log leaves open stays; each key's last promised committed
  record stays unless a later committed record of the key is there; a promised marker stays
  unless the cleaner removed every record of its transaction; each aborted transaction with
  records left is in the transaction index, and the producer state agrees with the log;
- every log, when a clean ``LogManager.shutdown`` returned (children now and then shut down and
  start again in the same process: the next start trusts the clean-shutdown marker; half the
  time after a pause, as a stopped sidecar waits, so that cuts land there too).

The child sends each promise through a pipe right after the call returned; the parent drains
the pipe BEFORE it cuts, so only promises made before the cut count. For every partition the
recovered log must end at or after its promise, and every promised offset from the log start on
must be readable and hold the record written there: values carry their offset and the id of
the writer (child and start), so a record from an older incarnation of a segment (a deleted segment
coming back after a cut) is caught, not mistaken for the promised one. ``logkeeper verify``
(``tools.verify.verify_path``) must pass and no temporary file may be left.

The next child starts from the cut image itself (not from the recovered copy), so the engine's
own recovery runs under the FUSE layer and is cut too. Every ``EPOCH`` cuts the disks start
empty again, so a round stays short. Count: LOGKEEPER_POWER_CUTS (small by default; ``make
crash`` sets 1000). A summary line goes to stdout and, when LOGKEEPER_CRASH_REPORT names a
file, is appended there.

Two things the engine rightly does, which this test once called losses (the failures were rare,
seen under load; ``test_power_cut_checks.py`` keeps each as a regression test):

- a roll makes the new segment's name durable before the old segment's tail is flushed (Kafka
  flushes it later, too), so a cut can lose that unpromised tail and keep the empty new segment:
  the log end offset recovered from it lies above a gap no promise covered, with no record after
  it until the next child appends;
- between draining the pipe and the cut the child goes on: appends (durable, not yet promised),
  a roll, a cleaning that drops a promised record superseded by one of those appends. Compaction
  keeps each key's newest record, so a later record of the key stands for the promised one;
- in that window it may also delete ``cutd``'s log, its rename durable before the cut: the log's
  promises no longer hold ("cutd-0 promised up to 49 is missing", cut 7 of the default seed once,
  when ``cutct`` joined the partitions). The pipe is read again after the child is killed, and a
  deletion it announces there forgets the log's promises as one announced before the drain does.

And one mistake of the test's own: its children gave the topics' overrides after starting the
LogManager, so a retention run in between could apply the broker's retention.bytes to a topic
without retention (``open_manager`` now orders them as the sidecar does).
"""

from __future__ import annotations

import faulthandler
import os
import random
import shutil
import signal
import struct
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from tests.crash.powercut_checks import (
    CLEANER_PROPS,
    COMPACTED,
    COMPACTED_TXN,
    DELETED_TOPIC,
    IDEMPOTENT,
    PARTITIONS,
    TXN_LOGS,
    Expected,
    Figures,
    idempotent_batch,
    key_of,
    open_manager,
    value_of,
)
from tests.crash.powercut_image import check_image
from tests.crash.powercut_txn_checks import marker_batch, transactional_batch

CUTS = int(os.environ.get("LOGKEEPER_POWER_CUTS", "20"))
EPOCH = 12  # cuts in a row on the same disks before they start empty again (loads stay short)
SEED = int(os.environ.get("LOGKEEPER_CRASH_SEED", "20261124"))
MSG = struct.Struct("<BIqq")  # kind, partition index, two numbers: 21 bytes (< PIPE_BUF)
PROMISE, START, SEGMENT = 0, 1, 2  # (end offset, writer), (log end offset, writer), (base, next offset)
DELETING, DELETED = 3, 4  # (0, 0) before delete_log, (the new log's writer, 0) after it returned
BATCH = 5  # an IDEMPOTENT promise: (base offset, producer id << 24 | base sequence << 3 | records)
MARKER = 6  # a TXN_LOGS marker's promise: (its offset, first offset << 24 | producer id << 1 | aborted)
TXN_DATA = 7  # a COMPACTED_TXN data batch's promise: (first offset, producer id << 3 | records)
GENERATIONS = 50  # clean restarts a child may make; writer ids are child * GENERATIONS + restarts
# DELETED_TOPIC's writer ids are the writer's times this, plus the deletions it made: they grow
# with every deletion, so a record of a deleted log is told apart from the new log's
DELETIONS = 100

try:  # mfusepy loads libfuse when imported: without it (or without mfusepy) the test is skipped
    from tests.crash.powercut_mount import Daemon, fuse_available

    _why_not = fuse_available()
except (ImportError, OSError) as e:
    _why_not = f"{type(e).__name__}: {e}"
if _why_not is not None and os.environ.get("LOGKEEPER_REQUIRE_FUSE") == "1":
    raise RuntimeError(f"LOGKEEPER_REQUIRE_FUSE=1 but FUSE is unusable here: {_why_not}")
pytestmark = [pytest.mark.skipif(_why_not is not None, reason=f"FUSE unusable here: {_why_not}"),
              # a cut takes about a second on 2 busy cores: the default 600 s is not enough for 1000
              pytest.mark.timeout(max(600, 5 * CUTS))]


def author_of(i: int, writer: int, deletions: int) -> int:
    """The writer id partition ``i``'s records carry: DELETED_TOPIC's grows with each deletion."""
    return writer * DELETIONS + deletions if i == DELETED_TOPIC else writer


def child(dirs: list[Path], out_fd: int, child_id: int, seed: int) -> None:  # pragma: no cover - child
    """Append at random, sending each promise as soon as the call that makes it returned. Now
    and then the manager is shut down cleanly (a promise of everything: shutdown flushes every
    log) and started again in the same process; each start is a new writer id."""
    faulthandler.disable()  # after the cut a read of a mapped file faults (SIGBUS): expected, no dump
    rng = random.Random(seed)
    for generation in range(GENERATIONS):
        writer = child_id * GENERATIONS + generation
        m = open_manager(dirs, None)  # own scheduler thread: flusher, retention
        logs = [m.get_or_create_log(tp) for tp in PARTITIONS]
        # the cleaner compacts "cutc" meanwhile: .cleaned segments, .swap renames (log/replace.py)
        cleaner = LogCleaner(CleanerConfig.from_props(CLEANER_PROPS), m.live_log_dirs, m.current_logs)
        cleaner.install_hooks(m.cleaner_hooks)
        cleaner.startup()
        for i, lg in enumerate(logs):
            # what the child found on disk: offsets missing then (lost in an earlier cut before
            # any promise covered them) leave a gap that its promises do not cover
            for seg in lg.segments.values():
                os.write(out_fd, MSG.pack(SEGMENT, i, seg.base_offset, seg.read_next_offset()))
            os.write(out_fd, MSG.pack(START, i, lg.log_end_offset, writer))
        reported_ms = 0
        deletions = 0
        sequence = 0  # the next sequence of this writer's idempotent producer
        txn_sequence = dict.fromkeys(TXN_LOGS, 0)  # ... of its transactional producer, a log each
        txn_first: dict[int, int] = {}  # TXN_LOGS' log -> the first offset of its open transaction
        # transactions an earlier writer left open are aborted, as a transaction coordinator
        # aborts a dead producer's when it times out; until then they hold the last stable offset
        for t in TXN_LOGS:
            for pid, first in sorted(logs[t].producer_state.ongoing.items()):
                info = m.append(PARTITIONS[t], marker_batch(logs[t].log_end_offset, pid, True), assign_offsets=False)
                os.write(out_fd, MSG.pack(MARKER, t, info.first_offset, first << 24 | pid << 1 | 1))
        appends = rng.randint(20, 400) if rng.random() < 0.3 else 1 << 62
        for _ in range(appends):
            i = rng.randrange(len(PARTITIONS))
            author = author_of(i, writer, deletions)
            if i == DELETED_TOPIC and deletions < DELETIONS - 1 and rng.random() < 0.1:
                os.write(out_fd, MSG.pack(DELETING, i, 0, 0))
                m.delete_log(PARTITIONS[i])  # renamed -delete, durable, removed 20 ms later
                deletions += 1
                os.write(out_fd, MSG.pack(DELETED, i, author + 1, 0))
                logs[i] = m.get_or_create_log(PARTITIONS[i])
                continue
            leo = logs[i].log_end_offset
            now = int(time.time() * 1000)
            n = rng.randint(1, 6)
            if i == IDEMPOTENT:  # the producer id is the writer's; flush.messages=1 as below
                info = m.append(PARTITIONS[i], idempotent_batch(leo, writer, sequence, n))
                os.write(out_fd, MSG.pack(BATCH, i, info.first_offset, writer << 24 | sequence << 3 | n))
                sequence += n
                continue
            if i in TXN_LOGS:  # flush.messages=1: a promise as each append returns
                if i in txn_first and rng.random() < 0.3:
                    aborted = rng.random() < 0.5
                    info = m.append(PARTITIONS[i], marker_batch(leo, writer, aborted), assign_offsets=False)
                    first = txn_first.pop(i)
                    os.write(out_fd, MSG.pack(MARKER, i, info.first_offset, first << 24 | writer << 1 | aborted))
                    continue
                info = m.append(PARTITIONS[i], transactional_batch(leo, writer, txn_sequence[i], n, i))
                if i == COMPACTED_TXN:  # the checks need each record's transaction: the cleaner may drop it
                    os.write(out_fd, MSG.pack(TXN_DATA, i, info.first_offset, writer << 3 | n))
                else:
                    os.write(out_fd, MSG.pack(PROMISE, i, info.last_offset + 1, writer))
                txn_sequence[i] += n
                txn_first.setdefault(i, info.first_offset)
                continue
            data = build_batch([Record(leo + k, now, key_of(i, leo + k), value_of(leo + k, author, rng.randint(1, 5)))
                                for k in range(n)])
            info = m.append(PARTITIONS[i], data)
            if i in (2, COMPACTED, DELETED_TOPIC):  # flush.messages=1: the append returned after its fsync
                os.write(out_fd, MSG.pack(PROMISE, i, info.last_offset + 1, author))
            elif i < 2 and rng.random() < 0.3:
                os.write(out_fd, MSG.pack(PROMISE, i, m.flush(PARTITIONS[i]), writer))
            if logs[3].recovery_point > reported_ms:
                reported_ms = logs[3].recovery_point  # moved by the flusher (flush.ms) after its fsync
                os.write(out_fd, MSG.pack(PROMISE, 3, reported_ms, writer))
        cleaner.shutdown()
        m.shutdown()
        for i, lg in enumerate(logs):
            os.write(out_fd, MSG.pack(PROMISE, i, lg.log_end_offset, author_of(i, writer, deletions)))
        if rng.random() < 0.5:  # a stopped sidecar: the next start trusts what the clean shutdown left
            time.sleep(rng.uniform(0.0, 0.2))
    time.sleep(3600)  # the cut comes


def run_child(dirs: list[Path], child_id: int, seed: int, delay_s: float, daemon: Daemon, cut_seed: int,
              torn: bool, image_out: Path) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int, int, int]],
                                                    dict[str, Any]]:
    """Run a child on the mount, cut the power after ``delay_s``; return the messages seen before
    the cut, those the child sent between the drain and its end (``late``: their promises do not
    count, but a deletion they announce may have happened before the cut), and the cut's figures."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        try:
            child(dirs, w, child_id, seed)
        except BaseException:
            if os.path.exists(dirs[0]):  # else EIO: the power is cut; if not, say why it died
                traceback.print_exc()
                sys.stderr.flush()
        finally:
            os._exit(3)
    os.close(w)
    os.set_blocking(r, False)
    data = bytearray()
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline:
        time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
        try:
            while chunk := os.read(r, 65536):
                data += chunk
        except BlockingIOError:
            pass
    # drain what the child wrote up to now: these promises were made before the cut
    try:
        while chunk := os.read(r, 65536):
            data += chunk
    except BlockingIOError:
        pass
    done, status = os.waitpid(pid, os.WNOHANG)
    figures = daemon.cut(cut_seed, torn, image_out)
    if not done:  # after the cut the child fails on EIO in any way it likes; kill it anyway
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    late = bytearray()
    try:
        while chunk := os.read(r, 65536):
            late += chunk
    except BlockingIOError:
        pass
    os.close(r)
    if done:
        raise AssertionError(f"child {child_id} (seed {seed}) died before the power cut: exit status "
                             f"{os.waitstatus_to_exitcode(status)}")
    def unpack(b: bytearray) -> list[tuple[int, int, int, int]]:
        return [MSG.unpack_from(b, k) for k in range(0, len(b) - len(b) % MSG.size, MSG.size)]

    return unpack(data), unpack(data[len(data) - len(data) % MSG.size:] + late), figures


def warm_up(tmp_path: Path) -> None:
    """Run the compiled kernels once here, so children inherit them compiled."""
    dirs = [tmp_path / "warm0", tmp_path / "warm1"]
    m = open_manager(dirs, Scheduler())
    for i, tp in enumerate(PARTITIONS):
        m.get_or_create_log(tp)
        for k in range(3):
            m.append(tp, build_batch([Record(k, int(time.time() * 1000), key_of(i, k), value_of(k, 0, 1))]))
        m.flush(tp)
    # the cleaner's kernels too: children inherit them compiled
    cleaner = LogCleaner(CleanerConfig.from_props(CLEANER_PROPS), m.live_log_dirs, m.current_logs)
    cleaner.install_hooks(m.cleaner_hooks)
    compacted = PARTITIONS[COMPACTED]
    for k in range(3, 60):
        m.append(compacted, build_batch([Record(k, int(time.time() * 1000), key_of(COMPACTED, k),
                                                value_of(k, 0, 30))]))
    lg = m.get_log(compacted)
    assert lg is not None
    lg.roll()
    cleaner.startup()
    try:
        assert cleaner.await_cleaned(compacted, lg.active_segment.base_offset, max_wait_ms=60000)
    finally:
        cleaner.shutdown()
    m.shutdown()
    check_image(dirs, Expected(), Figures(), "warm-up")


def empty_image(path: Path) -> Path:
    for d in ("disk0", "disk1"):
        (path / d).mkdir(parents=True)
    return path


def report(line: str) -> None:
    print(line)
    target = os.environ.get("LOGKEEPER_CRASH_REPORT")
    if target:
        with open(target, "a") as f:
            f.write(line + "\n")


def test_power_cuts_lose_nothing_promised(tmp_path: Path) -> None:
    warm_up(tmp_path)
    master = random.Random(SEED)
    figures = Figures()
    mount = tmp_path / "mnt"
    dirs_on_mount = [mount / "disk0", mount / "disk1"]
    image = empty_image(tmp_path / "image-start")
    expected = Expected()
    started = time.monotonic()
    threading.excepthook = threading.__excepthook__  # a daemon thread's error must not be hidden
    for n in range(CUTS):
        if n and n % EPOCH == 0:  # fresh disks: rounds stay short
            shutil.rmtree(image)
            image = empty_image(tmp_path / f"image-empty-{n}")
            expected = Expected()
        seed = master.randrange(1 << 30)
        cut_seed = master.randrange(1 << 30)
        torn = master.random() < 0.5
        # a fifth of the cuts while the child starts (recovers the last cut), the rest while it works
        delay = master.uniform(0.0, 0.15) if master.random() < 0.2 else master.uniform(0.15, 0.6)
        where = f"cut {n + 1} (seed {seed}, cut seed {cut_seed}, torn {torn}, after {delay * 1000:.0f} ms)"
        out = tmp_path / f"image-{n}"
        daemon = Daemon(image, mount)
        try:
            messages, late, cut = run_child(dirs_on_mount, n + 1, seed, delay, daemon, cut_seed, torn, out)
        finally:
            daemon.stop()
        figures.cuts += 1
        figures.torn_cuts += torn
        figures.lost_bytes += cut["lost_bytes"]
        figures.undone_dir_changes += cut["undone_dir_changes"]
        figures.fsyncs += cut["fsync"]
        figures.dir_fsyncs += cut["fsyncdir"]
        # in order: a clean restart inside the child sends its segments and start again
        starts: dict[int, int] = {}
        writers: dict[int, int] = {}  # partition -> the writer of its last start (it makes the promises)
        found: dict[int, list[tuple[int, int]]] = {}
        promises = 0
        for kind, i, a, b in messages:
            if kind == SEGMENT:
                if i in starts:  # the first segment of a new start
                    starts.pop(i)
                    found[i] = []
                found.setdefault(i, []).append((a, b))
            elif kind == START:
                starts[i], writers[i] = a, b
            elif kind == DELETING:  # a cut from here on may keep the log or not
                expected.forget(i)
            elif kind == DELETED:  # delete_log returned: the new log starts empty, at offset 0
                expected.deleted(i, a)
                starts[i], found[i] = 0, []
                figures.deletions += 1
            elif kind == MARKER:
                first, pid, aborted = b >> 24, b >> 1 & ((1 << 23) - 1), bool(b & 1)
                expected.txns[(i, a)] = (pid, first, aborted)
                promises += 1
                expected.add(i, a + 1, writers[i], starts[i], found.get(i, []))
            elif kind == TXN_DATA:
                pid, count = b >> 3, b & 7
                expected.txn_data.update(dict.fromkeys(range(a, a + count), pid))
                promises += 1
                expected.add(i, a + count, pid, starts[i], found.get(i, []))
            elif kind == BATCH:
                pid, seq, count = b >> 24, b >> 3 & ((1 << 21) - 1), b & 7
                expected.batches[pid] = (a, seq, count)
                promises += 1
                expected.add(i, a + count, pid, starts[i], found.get(i, []))
            else:
                promises += 1
                expected.add(i, a, b, starts[i], found.get(i, []))
        for kind, i, _, _ in late:  # a deletion begun after the drain may be done before the cut
            if kind == DELETING:
                expected.forget(i)
        if os.environ.get("LOGKEEPER_CRASH_KEEP"):  # for a post-mortem: the child's messages, the
            # last two cuts' (the image a failing cut started from was written by the cut before)
            (tmp_path / f"messages-{n}.txt").write_text("\n".join(map(str, messages)) + "\n")
            (tmp_path / f"messages-{n - 2}.txt").unlink(missing_ok=True)
        figures.productive += bool(promises)
        figures.promises += promises
        check = tmp_path / "check"
        shutil.rmtree(check, ignore_errors=True)
        shutil.copytree(out, check)
        check_image([check / "disk0", check / "disk1"], expected, figures, where)
        shutil.rmtree(image)
        image = out  # the next child recovers the cut image itself, under the FUSE layer
    elapsed = time.monotonic() - started
    report(f"power cuts: {figures.cuts} cuts ({figures.torn_cuts} with torn tails) in {elapsed:.1f} s; "
           f"{figures.productive} children made promises ({figures.promises} promises); "
           f"{figures.records_checked} promised records checked, {figures.records_lost} lost "
           f"({figures.superseded_after_promise} compacted away by records written after the promise); "
           f"{figures.deletions} log deletions promised, {figures.deleted_records_back} deleted logs back; "
           f"{figures.retries} promised idempotent batches sent again, {figures.retries_appended} appended twice; "
           f"{figures.markers_checked} promised transaction markers found, {figures.markers_cleaned} rightly "
           f"removed by the cleaner, {figures.markers_lost} lost; {figures.aborted_cleaned} promised records of "
           "aborted transactions cleaned away; "
           f"{figures.open_transactions} open transactions recovered, {figures.transaction_state_wrong} "
           "recovered transaction states wrong; "
           f"dropped at the cuts: {figures.lost_bytes} unsynced bytes, {figures.undone_dir_changes} "
           f"directory changes; {figures.fsyncs} fsyncs and {figures.dir_fsyncs} directory fsyncs seen")
    assert figures.productive >= max(1, CUTS // 4), (
        f"only {figures.productive} of {CUTS} children made a promise before the cut")
