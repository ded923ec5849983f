"""One cleaner's work loop (Kafka's CleanerThread body), without the thread.

``try_clean_filthiest_log``: choose the filthiest log (manager.py), clean one round of it
(cleaner.py), save its checkpoint, log the stats line; then run ``delete_old_segments`` on every
compacted log that is free (marked in-progress meanwhile, so retention never runs while the same
log is being cleaned). A failure marks the partition uncleanable (retried with backoff).

``CleanerThread`` runs it in a loop: a round right after a productive one, otherwise a sleep of
``log.cleaner.backoff.ms`` (cut short by shutdown). An unexpected error ends the thread and
counts it dead, as in Kafka.

``delete_old_segments(log)`` is the retention a cleaner thread applies to the compacted logs it
is free to touch (log/retention.py's rules: segments below the log start offset for every
compacted log; retention.ms and retention.bytes too for ``compact,delete``), as Kafka's cleaner
threads do; the LogManager's own retention pass leaves compacted logs to them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import CleanerShutdownError, KafkaStorageError, LogCleaningAbortedError, LogkeeperError
from ..log.log import Log
from ..log.names import TopicPartition
from ..log.retention import delete_old_segments
from .backlog import estimate_backlog
from .cleaner import Cleaner
from .manager import CleanerManager, LogCleaningException
from .selection import LogToClean
from .stats import CleanerStats, PreCleanStats, format_delayed, format_invalid, format_stats

_LOG = logging.getLogger("logkeeper.cleaner")

DeleteOldSegments = Callable[[Log], object]
LogDirFailure = Callable[[Path, str, BaseException], None]
StatsSink = Callable[[str], None]
RoundSink = Callable[[TopicPartition, int, int, CleanerStats, int], None]  # partition, dirty section, stats, id


def retention_on(clock_ms: Callable[[], int]) -> DeleteOldSegments:
    """log/retention.py's ``delete_old_segments`` at the cleaner's clock."""

    def delete_old(log: Log) -> object:
        return delete_old_segments(log, clock_ms())

    return delete_old


def running_check(running: threading.Event, name: str) -> Callable[[], None]:
    """A check that raises CleanerShutdownError once ``running`` is cleared."""

    def check() -> None:
        if not running.is_set():
            raise CleanerShutdownError(f"{name} is shutting down")

    return check


def failure_reason(e: Exception) -> str:
    """A failed round as users read it (clean's output, the status): our errors and the OS's are
    sentences about their data already; anything else is a bug of ours, named by its class so
    that it can be found."""
    if isinstance(e, LogkeeperError):
        return str(e)
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return f"{type(e).__name__}: {e}"


class CleanerWorker:
    def __init__(self, cleaner: Cleaner, manager: CleanerManager, *,
                 delete_old_segments: DeleteOldSegments | None = None,
                 log_dir_failure: LogDirFailure | None = None, stats_sink: StatsSink | None = None,
                 clock_ms: Callable[[], int], round_sink: RoundSink | None = None) -> None:
        self.cleaner = cleaner
        self.manager = manager
        self.delete_old_segments = delete_old_segments or retention_on(clock_ms)
        self.log_dir_failure = log_dir_failure
        self.stats_sink = stats_sink
        self.round_sink = round_sink
        self.clock_ms = clock_ms
        self.last_stats = CleanerStats(cleaner.stats_clock_ms)
        self.last_stats.map_complete_ms = self.last_stats.end_ms = self.last_stats.start_ms
        self.last_pre_clean_stats = PreCleanStats()
        self.rounds = 0
        self.failures = 0
        self.last_failure: LogCleaningException | None = None

    def try_clean_filthiest_log(self) -> bool:
        """One unit of work; True when a log was cleaned (``last_failure`` tells a failed one)."""
        self.last_failure = None
        try:
            return self._clean_filthiest_log()
        except LogCleaningException as e:
            self.failures += 1
            self.last_failure = e
            tp, data_dir = e.log.topic_partition, self.manager.log_dir_of(e.log)
            entry = self.manager.mark_partition_uncleanable(data_dir, tp, str(e))
            _LOG.warning("unexpected exception thrown when cleaning log %s; marking its partition (%s) as "
                         "uncleanable, retry #%d at %d ms", e.log, tp, entry.failures, entry.retry_at_ms,
                         exc_info=e)
            return False

    def _clean_filthiest_log(self) -> bool:
        pre = PreCleanStats()
        ltc = self.manager.grab_filthiest_compacted_log(pre)
        cleaned = False
        if ltc is not None:
            self.last_pre_clean_stats = pre
            try:
                self.clean_log(ltc)
                cleaned = True
            except CleanerShutdownError:
                raise
            except Exception as e:
                raise LogCleaningException(ltc.log, failure_reason(e)) from e
        deletable = self.manager.deletable_logs()
        try:
            for _tp, log in deletable:
                try:
                    self.delete_old_segments(log)
                except CleanerShutdownError:
                    raise
                except OSError as e:
                    # the disk's fault, not the partition's: as for a cleaning, its directory goes offline
                    if self.log_dir_failure is None:
                        raise LogCleaningException(log, failure_reason(e)) from e
                    data_dir = self.manager.log_dir_of(log)
                    self.log_dir_failure(data_dir, f"failed to delete old segments of {log.name} in dir "
                                                   f"{data_dir} due to an I/O error", e)
                except Exception as e:
                    raise LogCleaningException(log, failure_reason(e)) from e
        finally:
            self.manager.done_deleting([tp for tp, _log in deletable])
        return cleaned

    def clean_log(self, ltc: LogToClean) -> None:
        tp: TopicPartition = ltc.topic_partition
        data_dir = self.manager.log_dir_of(ltc.log)
        start = ltc.first_dirty_offset
        end = start
        finished: CleanerStats | None = None
        try:
            end, stats = self.cleaner.clean(ltc)
            self.rounds += 1
            self.record_stats(ltc.log.name, start, end, stats)
            finished = stats
            self.manager.set_backlog(tp, estimate_backlog(
                ltc.log, first_dirty=start, first_uncleanable=ltc.first_uncleanable_offset, end_offset=end,
                map_keys=self.cleaner.offset_map.size, map_max_entries=self.cleaner.offset_map.max_entries,
                clean_bytes=ltc.clean_bytes, dirty_bytes=ltc.cleanable_bytes, now_ms=self.clock_ms(),
                previous=self.manager.backlogs().get(tp)))
            self.manager.clear_uncleanable(data_dir, tp)
        except LogCleaningAbortedError:
            pass  # aborted (paused, truncated or deleted): let it go
        except KafkaStorageError:
            pass  # the log's directory is already offline: let it go
        except OSError as e:
            if self.log_dir_failure is None:
                raise
            self.log_dir_failure(data_dir, f"failed to clean up log for {tp} in dir {data_dir} due to "
                                           f"an I/O error", e)
        finally:
            self.manager.done_cleaning(tp, data_dir, end)
        # Reported once done_cleaning has moved the checkpoint to the round's end: a status read
        # in between would pair this round with the previous checkpoint (and its dirty ratio).
        if finished is not None and self.round_sink is not None:
            self.round_sink(tp, start, end, finished, self.cleaner.id)

    def record_stats(self, name: str, start: int, end: int, stats: CleanerStats) -> None:
        self.last_stats = stats
        message = format_stats(self.cleaner.id, name, start, end, stats)
        _LOG.info("%s", message)
        lines = [message]
        delayed = format_delayed(self.last_pre_clean_stats)
        if delayed is not None:
            _LOG.info("%s", delayed)
            lines.append(delayed + "\n")
        invalid = format_invalid(stats)
        if invalid is not None:
            _LOG.warning("%s", invalid)
            lines.append(invalid + "\n")
        if self.stats_sink is not None:
            self.stats_sink("".join(lines))


class CleanerThread(threading.Thread):
    """Runs a worker until shut down; ``running`` is the flag its ``check_done`` also reads."""

    def __init__(self, worker: CleanerWorker, backoff_ms: int, running: threading.Event) -> None:
        super().__init__(name=f"kafka-log-cleaner-thread-{worker.cleaner.id}", daemon=True)
        self.worker = worker
        self.backoff_ms = backoff_ms
        self._running = running
        self._running.set()
        self._wake = threading.Event()
        self.failed = False

    def run(self) -> None:
        try:
            while self._running.is_set():
                if not self.worker.try_clean_filthiest_log():
                    self._wake.wait(self.backoff_ms / 1000.0)
                    self._wake.clear()
                self.worker.manager.maintain_uncleanable_partitions()
        except CleanerShutdownError:
            pass
        except Exception:
            if self._running.is_set():
                self.failed = True
                _LOG.exception("%s died", self.name)

    def shutdown(self, timeout_s: float | None = None) -> None:
        self._running.clear()
        self._wake.set()
        self.join(timeout_s)
