"""``logkeeper clean LOG_DIR [--config key=value ...]``: compact every partition of a log directory.

Opens each partition directory of LOG_DIR as a Log (with the log start offsets and recovery
points of the directory's checkpoint files when present; a directory without
``.kafka_cleanshutdown`` is recovered from its recovery points first), runs cleaning rounds
until no log is cleanable, printing Kafka's stats line for each round, and leaves the logs
closed: flushed, ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint`` written, the replaced segments' ``.deleted`` files removed.

Configuration: ``--config`` takes cleaner keys (``log.cleaner.threads`` ...,
``producer.id.expiration.ms``: cleaner/config.py), broker defaults of topic keys
(``log.cleaner.min.cleanable.ratio``, ``log.cleaner.delete.retention.ms``, ``message.max.bytes``
...: log/manager_config.py) and topic keys (``min.cleanable.dirty.ratio``, ``delete.retention.ms``,
``segment.bytes`` ...), applied to every partition; a topic key wins over its broker default. Unlike a broker, which
knows each topic's policy, the command treats every partition as ``cleanup.policy=compact``
unless told otherwise. Kafka's rules are otherwise unchanged: the active (last) segment is never
cleaned, nor anything at or above the last stable offset, and a log is cleaned only while its
dirty ratio exceeds min.cleanable.dirty.ratio (pass ``min.cleanable.dirty.ratio=0`` to clean
whatever is dirty).

Output: Kafka's stats lines for each round, then one line per log saying what was done or why
nothing was (clean_report.py). On stderr, a round that runs longer than 10 s says every 10 s
(progress_lines.EVERY_S) how far it has come (``orders-0: indexing 512.0 of 1,125.2 MB (45%), 10 s
into the round``: round_progress.py), and at the end where the time went (``logkeeper clean:
12.31 s: opening 1 log 0.30 s, cleaning 10.90 s, closing 0.10 s, removing replaced files 0.74 s``:
clean_report.PhaseTimes). Exit status: 0 when every log was cleaned or had nothing to
clean; 1 when some partition failed (its line names the error; the others are still cleaned);
2 for a bad argument or a directory that is not a log dir (log_dir_rule.py; nothing is touched).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from ..errors import InvalidConfigError
from ..log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from ..log.log import Log
from ..log.log_config import TOPIC_SETTINGS, LogConfig
from ..log.manager_config import BROKER_LOG_DEFAULT_SETTINGS, ManagerConfig
from ..log.names import DELETED_SUFFIX, LOG_SUFFIX, PartitionDirName, TopicPartition
from ..log_dir_rule import require_log_dir
from ..progress_lines import EVERY_S, ProgressLines
from .backlog import Backlog
from .clean_report import PhaseTimes, Tally, why_not_cleaned
from .config import CLEANER_SETTINGS, CleanerConfig
from .log_cleaner import LogCleaner
from .offset_map import BYTES_PER_SLOT
from .round_progress import progress_of
from .stats import CleanerStats

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
MAX_ROUNDS = 1_000_000  # a bound on the loop; every round moves a checkpoint forward

_LOG = logging.getLogger(__name__)


def split_overrides(overrides: Mapping[str, str]) -> tuple[CleanerConfig, LogConfig]:
    """Cleaner config and the topic config every partition gets, from ``--config`` pairs."""
    cleaner_props: dict[str, Any] = {}
    broker_props: dict[str, Any] = {}
    topic_props: dict[str, Any] = {"cleanup.policy": "compact"}
    for key, value in overrides.items():
        if key in CLEANER_SETTINGS.by_key:
            cleaner_props[key] = value
        elif key in BROKER_LOG_DEFAULT_SETTINGS.by_key:
            broker_props[key] = value
        elif key in TOPIC_SETTINGS.by_key:
            topic_props[key] = value
        else:
            raise InvalidConfigError(f"unknown config key {key}: not a cleaner, broker or topic key")
    defaults = ManagerConfig.from_props(broker_props).default_log_config
    return CleanerConfig.from_props(cleaner_props), defaults.with_overrides(topic_props)


def open_logs(log_dir: Path, config: LogConfig, clock_ms: Callable[[], int],
              producer_expiration_ms: int) -> dict[TopicPartition, Log]:
    starts = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
    recovery = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
    clean = (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    logs: dict[TopicPartition, Log] = {}
    try:
        for path in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            try:
                parsed = PartitionDirName.parse(path.name)
            except ValueError:
                continue
            if parsed.kind:
                continue  # -delete, -stray and -future directories are not live partitions
            tp = parsed.topic_partition
            logs[tp] = Log(path, config, log_start_offset=starts.get(tp, 0),
                           recovery_point=recovery.get(tp, 0), had_clean_shutdown=clean, clock_ms=clock_ms,
                           producer_expiration_ms=producer_expiration_ms)
    except BaseException:
        for log in logs.values():
            log.close()
        raise
    return logs


class ReplacedFiles:
    """Removes the logs' replaced segments (``.deleted``) on a helper thread while the command
    goes on: every SWEEP_INTERVAL_S during the rounds, those whose file.delete.delay.ms has
    passed (a round swaps its groups in by batches, each leaving its old segments behind), and
    all of them when ``wait`` is called before exiting.

    The command has no readers to wait for; it keeps Kafka's delay for the round's sake. An
    unlink during a round holds the directory's lock against the round's file creations, and on
    ext4 without a journal every inode freed in the last minute lengthens the scan each later
    creation makes for a free one: removing files as they were replaced made a round of 1 MiB
    segments take about 30% longer (bench/results/cleaner_output.md). With the delay a short
    round runs free of unlinks, and a long one still frees its replaced bytes as it goes, as a
    broker does. ``--config file.delete.delay.ms=0`` removes them as soon as they are replaced."""

    SWEEP_INTERVAL_S = 0.2

    def __init__(self, logs: Mapping[TopicPartition, Log]) -> None:
        self._logs = logs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def remove(self) -> None:
        """Start sweeping (once): what is replaced from now on goes within SWEEP_INTERVAL_S of
        its delay, or when ``wait`` is called."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._sweep, name="replaced-files", daemon=True)
            self._thread.start()

    def _sweep(self) -> None:
        while not self._stop.wait(self.SWEEP_INTERVAL_S):
            self._remove(all_now=False)
        self._remove(all_now=True)  # the command is done: no delay is left to keep

    def _remove(self, *, all_now: bool) -> None:
        for log in self._logs.values():
            try:
                log.delete_expired_files(all_now=all_now)
            except OSError as e:  # remove_leftovers retries what is left
                _LOG.warning("cannot remove replaced segments of %s: %s", log.dir, e)

    def wait(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


def _segment_bytes(log_dir: Path) -> int:
    """The bytes of the partitions' segment files, from their directory entries: a hint, so a
    directory it cannot read counts 0 (opening the logs reports it, naming the file)."""
    total = 0
    with os.scandir(log_dir) as parts:
        for part in parts:
            try:
                if part.is_dir():
                    with os.scandir(part.path) as entries:
                        total += sum(e.stat().st_size for e in entries if e.name.endswith(LOG_SUFFIX))
            except OSError:
                continue
    return total


def close_logs(log_dir: Path, logs: Mapping[TopicPartition, Log]) -> None:
    for log in logs.values():
        log.flush()
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
        {tp: log.recovery_point for tp, log in logs.items()})
    OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
        {tp: log.log_start_offset for tp, log in logs.items()})
    for log in logs.values():
        log.close(clean_shutdown=True)  # flushed above: the producer snapshot at the log end


def remove_leftovers(logs: Mapping[TopicPartition, Log]) -> None:
    """Replaced segments ReplacedFiles did not remove (a failed unlink, a swap that failed after
    its renames): no reader is left, offline."""
    for log in logs.values():
        for leftover in log.dir.glob(f"*{DELETED_SUFFIX}"):
            leftover.unlink(missing_ok=True)


def run_clean(log_dir: Path, overrides: dict[str, str], out: TextIO, clock_ms: Callable[[], int],
              round_sink: Callable[[TopicPartition, CleanerStats], None] | None = None, *,
              err: TextIO | None = None, progress_every_s: float = EVERY_S) -> int:
    """Clean every log of ``log_dir``; 0, or 1 when some partition failed. A wrong directory or
    config raises UsageError / InvalidConfigError before anything is opened. ``round_sink`` is
    given each round's stats (bench/bench_spark.py sums them). ``err``: where a round that runs
    longer than ``progress_every_s`` says how far it has come, every ``progress_every_s``
    (round_progress.py), and where the command's time went at the end (PhaseTimes); stdout keeps
    Kafka's stats lines and the per-log lines only."""
    times = PhaseTimes()
    log_dir = Path(log_dir)
    require_log_dir(log_dir, "clean")
    cleaner_config, topic_config = split_overrides(overrides)
    failed: dict[TopicPartition, str] = {}
    backlogs: dict[TopicPartition, Backlog] = {}
    tallies: dict[TopicPartition, Tally] = {}

    def print_stats(text: str) -> None:
        out.write(text)

    def count_round(tp: TopicPartition, _start: int, _end: int, stats: CleanerStats, _id: int) -> None:
        tallies.setdefault(tp, Tally()).add(stats)
        if round_sink is not None:
            round_sink(tp, stats)

    # the worker (and its offset map) first: the map's table is made while the logs open
    cleaner = LogCleaner(cleaner_config, [log_dir], lambda: logs, clock_ms=clock_ms, stats_sink=print_stats,
                         message_max_bytes=topic_config.max_message_bytes, round_sink=count_round)
    lines = ProgressLines(err, progress_every_s) if err is not None else None

    def tick() -> None:  # at each of the round's abort checks, on its thread
        assert lines is not None
        lines.tick(lambda: progress_of(worker.cleaner.progress()))

    worker = cleaner.new_worker(0, tick if lines is not None else None)
    offset_map = worker.cleaner.offset_map
    if _segment_bytes(log_dir) >= offset_map.capacity_slots * BYTES_PER_SLOT:
        offset_map.warm()  # a log smaller than the map is unlikely to need the full table
    logs = open_logs(log_dir, topic_config, clock_ms, cleaner_config.producer_id_expiration_ms)
    times.done(f"opening {len(logs)} log{'' if len(logs) == 1 else 's'}")
    replaced = ReplacedFiles(logs)
    replaced.remove()  # sweeps during the rounds
    try:
        for _ in range(MAX_ROUNDS):
            cleaned = worker.try_clean_filthiest_log()
            failure = worker.last_failure
            if failure is not None:
                failed[failure.log.topic_partition] = str(failure)
                out.write(f"{failure.log.topic_partition}: failed: {failure}\n")
            for tp, mark in cleaner.manager.backlogs().items():
                backlogs.setdefault(tp, mark)  # the first estimate, made when the dirty section was whole
            if not cleaned and failure is None:
                break
        _report_backlogs(backlogs, out)
        checkpoints = cleaner.manager.all_cleaner_checkpoints()
        for tp, log in sorted(logs.items(), key=lambda kv: str(kv[0])):
            if tp in failed:
                continue
            what = tallies[tp].line() if tp in tallies else why_not_cleaned(log, checkpoints.get(tp), clock_ms())
            out.write(f"{tp}: {what}\n")
        times.done("cleaning")
    finally:
        try:
            close_logs(log_dir, logs)
            times.done("closing")
        finally:
            replaced.wait()
        remove_leftovers(logs)
        times.done("removing replaced files")  # those the sweeps during the rounds left
    if err is not None:
        err.write(times.line() + "\n")
    return 1 if failed else 0


def _report_backlogs(backlogs: Mapping[TopicPartition, Backlog], out: TextIO) -> None:
    for tp, b in sorted(backlogs.items(), key=lambda kv: str(kv[0])):
        out.write(f"backlog {tp}: about {b.estimated_keys:,} distinct keys in {b.dirty_bytes:,} dirty bytes, more than "
                  f"one offset map holds ({b.map_keys:,}): at least {b.passes} passes\n")
