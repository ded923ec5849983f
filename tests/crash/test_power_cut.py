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
- every log, when a clean ``LogManager.shutdown`` returned (children now and then shut down and
  start again in the same process: the next start trusts the clean-shutdown marker).

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
seen under load; ``test_power_cut_checks.py`` keeps both as regression tests):

- a roll makes the new segment's name durable before the old segment's tail is flushed (Kafka
  flushes it later, too), so a cut can lose that unpromised tail and keep the empty new segment:
  the log end offset recovered from it lies above a gap no promise covered, with no record after
  it until the next child appends;
- between draining the pipe and the cut the child goes on: appends (durable, not yet promised),
  a roll, a cleaning that drops a promised record superseded by one of those appends. Compaction
  keeps each key's newest record, so a later record of the key stands for the promised one.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log.scheduler import Scheduler
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records
from logkeeper.tools.verify import verify_path

CUTS = int(os.environ.get("LOGKEEPER_POWER_CUTS", "20"))
EPOCH = 12  # cuts in a row on the same disks before they start empty again (loads stay short)
SEED = int(os.environ.get("LOGKEEPER_CRASH_SEED", "20261124"))
PARTITIONS = [TopicPartition("cut", 0), TopicPartition("cut", 1), TopicPartition("cutfm", 0),
              TopicPartition("cutms", 0), TopicPartition("cutc", 0)]
NO_RETENTION = {2, 3, 4}  # indexes of PARTITIONS whose log start must stay 0
COMPACTED = 4  # its records have keys (offset % KEYS); the cleaner may drop all but each key's last
KEYS = 17
TOPIC_PROPS: dict[str, dict[str, Any]] = {
    "cutfm": {"flush.messages": 1, "retention.bytes": -1},
    "cutms": {"flush.ms": 0, "retention.bytes": -1},
    "cutc": {"cleanup.policy": "compact", "flush.messages": 1, "min.cleanable.dirty.ratio": 0.01},
}
CLEANER_PROPS = {"log.cleaner.backoff.ms": 10, "log.cleaner.dedupe.buffer.size": 1 << 20,
                 "log.cleaner.io.buffer.size": 64 * 1024}
MSG = struct.Struct("<BIqq")  # kind, partition index, two numbers: 21 bytes (< PIPE_BUF)
PROMISE, START, SEGMENT = 0, 1, 2  # (end offset, writer), (log end offset, writer), (base, next offset)
GENERATIONS = 50  # clean restarts a child may make; writer ids are child * GENERATIONS + restarts
TEMP_SUFFIXES = (".tmp", ".cleaned", ".swap", ".deleted")

try:  # mfusepy loads libfuse when imported: without it (or without mfusepy) the test is skipped
    from tests.crash.powercut_fs import Daemon, fuse_available

    _why_not = fuse_available()
except (ImportError, OSError) as e:
    _why_not = f"{type(e).__name__}: {e}"
if _why_not is not None and os.environ.get("LOGKEEPER_REQUIRE_FUSE") == "1":
    raise RuntimeError(f"LOGKEEPER_REQUIRE_FUSE=1 but FUSE is unusable here: {_why_not}")
pytestmark = [pytest.mark.skipif(_why_not is not None, reason=f"FUSE unusable here: {_why_not}"),
              # a cut takes about a second on 2 busy cores: the default 600 s is not enough for 1000
              pytest.mark.timeout(max(600, 5 * CUTS))]


def manager_props(dirs: list[Path]) -> dict[str, Any]:
    return {
        "log.dirs": [str(d) for d in dirs],
        "log.segment.bytes": 8 * 1024,  # many rolls
        "log.index.size.max.bytes": 4 * 1024,
        "log.index.interval.bytes": 512,  # index entries in every segment
        "log.retention.bytes": 24 * 1024,
        "log.retention.ms": -1,
        "log.segment.delete.delay.ms": 20,
        "log.initial.task.delay.ms": 0,
        "log.retention.check.interval.ms": 30,
        "log.flush.scheduler.interval.ms": 10,
        "log.flush.offset.checkpoint.interval.ms": 15,
        "log.flush.start.offset.checkpoint.interval.ms": 15,
        "num.recovery.threads.per.data.dir": 1,
    }


def open_manager(dirs: list[Path], scheduler: Scheduler | None) -> LogManager:
    """A started LogManager on ``dirs`` (its own scheduler thread when ``scheduler`` is None),
    the topics' overrides in place BEFORE it starts, as the sidecar does (server/service.py): its
    retention task runs at once, and with the overrides applied after the start the broker's
    retention.bytes could delete segments of a topic that has none (found by ``make crash``:
    "cutms-0 starts at 2027 without retention")."""
    m = LogManager(ManagerConfig.from_props(manager_props(dirs)), scheduler=scheduler)
    for topic, props in TOPIC_PROPS.items():
        m.update_topic_config(topic, props)
    m.startup()
    return m


def key_of(i: int, offset: int) -> bytes | None:
    return str(offset % KEYS).encode() if i == COMPACTED else None


def value_of(offset: int, child_id: int, repeat: int) -> bytes:
    return f"{offset}.{child_id}|".encode() * repeat


def parse_value(value: bytes | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        offset, child_id = value.split(b"|", 1)[0].split(b".")
        return int(offset), int(child_id)
    except ValueError:
        return None


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
        appends = rng.randint(20, 400) if rng.random() < 0.3 else 1 << 62
        for _ in range(appends):
            i = rng.randrange(len(PARTITIONS))
            leo = logs[i].log_end_offset
            now = int(time.time() * 1000)
            n = rng.randint(1, 6)
            data = build_batch([Record(leo + k, now, key_of(i, leo + k), value_of(leo + k, writer, rng.randint(1, 5)))
                                for k in range(n)])
            info = m.append(PARTITIONS[i], data)
            if i in (2, COMPACTED):  # flush.messages=1: the append returned after its fsync
                os.write(out_fd, MSG.pack(PROMISE, i, info.last_offset + 1, writer))
            elif i < 2 and rng.random() < 0.3:
                os.write(out_fd, MSG.pack(PROMISE, i, m.flush(PARTITIONS[i]), writer))
            if logs[3].recovery_point > reported_ms:
                reported_ms = logs[3].recovery_point  # moved by the flusher (flush.ms) after its fsync
                os.write(out_fd, MSG.pack(PROMISE, 3, reported_ms, writer))
        cleaner.shutdown()
        m.shutdown()
        for i, lg in enumerate(logs):
            os.write(out_fd, MSG.pack(PROMISE, i, lg.log_end_offset, writer))
    time.sleep(3600)  # the cut comes


@dataclass
class Figures:
    cuts: int = 0
    torn_cuts: int = 0
    productive: int = 0
    promises: int = 0
    records_checked: int = 0
    records_lost: int = 0
    superseded_after_promise: int = 0  # promised records the cleaner rightly dropped (check_compacted)
    lost_bytes: int = 0
    undone_dir_changes: int = 0
    fsyncs: int = 0
    dir_fsyncs: int = 0


@dataclass
class Expected:
    """What the disks must hold: promised end offsets and, per offset, the child that wrote it."""

    promised: dict[int, int] = field(default_factory=dict)
    writer: dict[tuple[int, int], int] = field(default_factory=dict)  # (partition, offset) -> child id
    # (partition, offset) -> the child whose promise covers it, when that child did not write it
    # itself (it was on disk when the child started): its writer is learnt at the first check
    older: dict[tuple[int, int], int] = field(default_factory=dict)
    # (partition, offset) below a promise that was on no disk when the promising child started
    gaps: set[tuple[int, int]] = field(default_factory=set)

    def add(self, i: int, end: int, child_id: int, start_leo: int, found: list[tuple[int, int]]) -> None:
        before = self.promised.get(i, 0)
        if end <= before:
            return
        for offset in range(before, end):
            if offset >= start_leo:
                self.writer[(i, offset)] = child_id
            elif any(base <= offset < nxt for base, nxt in found):
                self.older.setdefault((i, offset), child_id)
            else:
                self.gaps.add((i, offset))
        self.promised[i] = end


def run_child(dirs: list[Path], child_id: int, seed: int, delay_s: float, daemon: Daemon, cut_seed: int,
              torn: bool, image_out: Path) -> tuple[list[tuple[int, int, int, int]], dict[str, Any]]:
    """Run a child on the mount, cut the power after ``delay_s``; return the messages seen before
    the cut and the cut's figures."""
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
    os.close(r)
    if done:
        raise AssertionError(f"child {child_id} (seed {seed}) died before the power cut: exit status "
                             f"{os.waitstatus_to_exitcode(status)}")
    whole = len(data) - len(data) % MSG.size
    return [MSG.unpack_from(data, k) for k in range(0, whole, MSG.size)], figures


def check_record(i: int, rec: Any, expected: Expected, problems: list[str]) -> bool:
    """Whether a record below the promise holds what was written at its offset (see ``Expected``)."""
    tp = PARTITIONS[i]
    got = parse_value(rec.value)
    key = (i, rec.offset)
    writer = expected.writer.get(key)
    if got is None or got[0] != rec.offset or rec.key != key_of(i, rec.offset):
        problems.append(f"{tp} offset {rec.offset} holds key {rec.key!r} value {rec.value!r}")
        return False
    if writer is not None and got[1] != writer:
        problems.append(f"{tp} offset {rec.offset} holds the record of writer {got[1]}, "
                        f"writer {writer} wrote the promised one")
        return False
    if writer is None:
        covered_by = expected.older.pop(key, None)
        expected.writer[key] = got[1]  # from now on it must stay that record
        if covered_by is not None and got[1] >= covered_by:
            problems.append(f"{tp} offset {rec.offset} holds a record of writer {got[1]}, "
                            f"written after writer {covered_by} promised it")
            return False
    return True


def read_from(m: LogManager, tp: TopicPartition, offset: int) -> tuple[list[Any], BaseException | None]:
    try:
        batch = m.read(tp, offset, 1 << 20).records
    except Exception as e:  # a read failing is a lost record, named by the caller
        return [], e
    return [rec for rec in read_records(batch) if rec.offset >= offset] if batch else [], None


def check_contiguous(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                     problems: list[str]) -> None:
    """Every offset from the log start up to the promise is there (except gaps no promise covered)."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    offset = lg.log_start_offset
    while offset < want:
        if (i, offset) in expected.gaps:  # no promise covers it (see Expected.gaps)
            # it may even run up to the promise with no record after it: a roll made the next
            # segment's name durable, the old segment's unflushed tail was lost, and the log end
            # offset recovered from the empty new segment is above the gap (as in Kafka)
            offset += 1
            continue
        records, err = read_from(m, tp, offset)
        if offset < want and (not records or records[0].offset != offset):
            lost = want - offset
            problems.append(f"{tp} offset {offset} unreadable ({err or 'no batch'}): {lost} promised "
                            "records lost from there")
            figures.records_lost += lost
            return
        for rec in records:
            if rec.offset >= want:
                break
            while offset < rec.offset and (i, offset) in expected.gaps:
                offset += 1
            if rec.offset != offset:
                problems.append(f"{tp} offset {offset} missing (the next record is {rec.offset})")
                figures.records_lost += 1
            figures.records_checked += 1
            figures.records_lost += not check_record(i, rec, expected, problems)
            offset = rec.offset + 1
        offset = max(offset, records[-1].offset + 1)


def check_compacted(m: LogManager, i: int, want: int, expected: Expected, figures: Figures,
                    problems: list[str]) -> None:
    """The records kept are the ones written; each key's last promised record is among them, or a
    later record of that key is: between draining the promises and the cut the child goes on
    appending (durable, unpromised records), rolling and cleaning, and the cleaner rightly drops
    a promised record that such a record supersedes (found by ``make crash``: cut 21 of the
    default seed lost 8 keys' promised records to their successors)."""
    tp = PARTITIONS[i]
    lg = m.get_log(tp)
    assert lg is not None
    present: set[int] = set()
    newest: dict[bytes | None, int] = {}  # key -> its newest offset anywhere in the log
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        records, err = read_from(m, tp, offset)
        if err is not None:
            problems.append(f"{tp} offset {offset} unreadable: {err}")
        if not records:
            break
        for rec in records:
            if rec.offset < want:
                present.add(rec.offset)
                figures.records_checked += 1
                figures.records_lost += not check_record(i, rec, expected, problems)
            elif (parse_value(rec.value) or (-1,))[0] != rec.offset or rec.key != key_of(i, rec.offset):
                problems.append(f"{tp} offset {rec.offset} (after the promise) holds key {rec.key!r} "
                                f"value {rec.value!r}")
                continue
            newest[rec.key] = rec.offset
        offset = records[-1].offset + 1
    for key in range(KEYS):
        last = want - 1 - (want - 1 - key) % KEYS  # the key's last offset below the promise
        while last >= 0 and (i, last) in expected.gaps:
            last -= KEYS
        if last < 0 or last in present:
            continue
        if newest.get(str(key).encode(), -1) > last:
            figures.superseded_after_promise += 1
        else:
            problems.append(f"{tp} key {key}: its last promised record, offset {last}, is gone "
                            "and no later record of the key is there")
            figures.records_lost += 1


def check_image(dirs: list[Path], expected: Expected, figures: Figures, where: str) -> None:
    """Recover ``dirs`` with a fresh LogManager and check every promise (see the module doc)."""
    m = open_manager(dirs, Scheduler())  # no thread: no task runs while the image is checked
    problems: list[str] = []
    try:
        for i, tp in enumerate(PARTITIONS):
            want = expected.promised.get(i, 0)
            lg = m.get_log(tp)
            if lg is None:
                if want:
                    problems.append(f"{tp} promised up to {want} is missing")
                    figures.records_lost += want
                continue
            if lg.log_end_offset < want:
                problems.append(f"{tp} ends at {lg.log_end_offset}, promised up to {want}")
            if i in NO_RETENTION and lg.log_start_offset != 0:
                problems.append(f"{tp} starts at {lg.log_start_offset} without retention")
            check = check_compacted if i == COMPACTED else check_contiguous
            check(m, i, want, expected, figures, problems)
        for d in dirs:
            report = verify_path(d)
            if not report.ok:
                problems.append(f"verify {d}: " + "; ".join(map(str, report.problems[:5])))
            left = [str(p) for p in d.rglob("*") if p.name.endswith(TEMP_SUFFIXES)]
            if left:
                problems.append(f"temporary files left in {d}: {left}")
    finally:
        m.shutdown()
    assert not problems, f"{where}: " + "; ".join(problems[:8])


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
            messages, cut = run_child(dirs_on_mount, n + 1, seed, delay, daemon, cut_seed, torn, out)
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
        found: dict[int, list[tuple[int, int]]] = {}
        promises = 0
        for kind, i, a, b in messages:
            if kind == SEGMENT:
                if i in starts:  # the first segment of a new start
                    starts.pop(i)
                    found[i] = []
                found.setdefault(i, []).append((a, b))
            elif kind == START:
                starts[i] = a
            else:
                promises += 1
                expected.add(i, a, b, starts[i], found.get(i, []))
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
           f"dropped at the cuts: {figures.lost_bytes} unsynced bytes, {figures.undone_dir_changes} "
           f"directory changes; {figures.fsyncs} fsyncs and {figures.dir_fsyncs} directory fsyncs seen")
    assert figures.productive >= max(1, CUTS // 4), (
        f"only {figures.productive} of {CUTS} children made a promise before the cut")
