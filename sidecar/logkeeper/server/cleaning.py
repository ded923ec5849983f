"""Cleaning control of the API: pause, resume, a round now; and the last round of each partition.

- ``pause(tp)``: Kafka's abort-and-pause: a round in progress on ``tp`` is aborted, and the
  partition stays paused (paused(n) counts the pauses) until as many ``resume(tp)``.
- ``clean_now(tp)``: one round on ``tp`` at once, whatever its dirty ratio (the active segment,
  and anything at or above the last stable offset, stay out as always), on a worker of its own
  (one such round at a time; its offset map, dedupe.buffer.size / threads at most, grows as the
  round needs). The background threads skip the partition meanwhile (it is in progress).
- ``RoundLog``: the cleaner threads and the manual worker report every finished round here
  (``LogCleaner(round_sink=...)``); the status shows each partition's last one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..cleaner.log_cleaner import LogCleaner
from ..cleaner.stats import CleanerStats, format_stats
from ..cleaner.worker import CleanerWorker
from ..errors import CleanerShutdownError
from ..log.names import TopicPartition
from .errors import CleaningConflictError
from .status_schema import Round

MANUAL_CLEANER_ID = 1000  # the id in the stats line of rounds asked for through the API
PAUSE_TIMEOUT_S = 10.0


class RoundLog:
    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._last: dict[TopicPartition, Round] = {}

    def record(self, tp: TopicPartition, start: int, end: int, stats: CleanerStats, cleaner_id: int) -> None:
        """The round that cleaned ``[start, end)`` of ``tp``, as /v1/status and /v1/.../clean show it."""
        report = Round(
            dirty_section=[start, end], finished_ms=self._clock_ms(), bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written, messages_read=stats.messages_read,
            messages_written=stats.messages_written, map_messages_read=stats.map_messages_read,
            invalid_messages_read=stats.invalid_messages_read, buffer_utilization=stats.buffer_utilization,
            elapsed_secs=stats.elapsed_secs, elapsed_index_secs=stats.elapsed_index_secs,
            size_reduction_percent=100.0 * (1.0 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0.0,
            stats_line=format_stats(cleaner_id, str(tp), start, end, stats))
        with self._lock:
            self._last[tp] = report

    def last(self, tp: TopicPartition) -> Round | None:
        with self._lock:
            return self._last.get(tp)

    def snapshot(self) -> dict[TopicPartition, Round]:
        with self._lock:
            return dict(self._last)

    def forget(self, tp: TopicPartition) -> None:
        with self._lock:
            self._last.pop(tp, None)


class CleaningControl:
    def __init__(self, cleaner: LogCleaner, rounds: RoundLog, is_stopping: Callable[[], bool]) -> None:
        self.cleaner = cleaner
        self.rounds = rounds
        self._is_stopping = is_stopping
        self._manual_lock = threading.Lock()
        self._manual: CleanerWorker | None = None

    def pause(self, tp: TopicPartition) -> str:
        try:
            self.cleaner.abort_and_pause_cleaning(tp, timeout_s=PAUSE_TIMEOUT_S)
        except RuntimeError as e:
            raise CleaningConflictError(str(e)) from None
        except TimeoutError as e:
            raise CleaningConflictError(f"{e}; try again") from None
        return self.state(tp)

    def resume(self, tp: TopicPartition) -> str:
        try:
            self.cleaner.resume_cleaning([tp])
        except RuntimeError as e:
            raise CleaningConflictError(str(e)) from None
        return self.state(tp)

    def state(self, tp: TopicPartition) -> str:
        from ..cleaner.states import state_name

        return state_name(self.cleaner.manager.cleaning_state(tp))

    def manual_workers(self) -> list[CleanerWorker]:
        return [self._manual] if self._manual is not None else []

    def _check_running(self) -> None:
        if self._is_stopping():
            raise CleanerShutdownError("the sidecar is shutting down")

    def clean_now(self, tp: TopicPartition) -> Round | None:
        """One round on ``tp``; None when its dirty section is empty."""
        with self._manual_lock:
            if self._manual is None:
                self._manual = self.cleaner.new_worker(MANUAL_CLEANER_ID, self._check_running)
            worker = self._manual
            manager = self.cleaner.manager
            try:
                ltc = manager.grab_log_to_clean(tp)
            except RuntimeError as e:
                raise CleaningConflictError(str(e)) from None
            data_dir = manager.log_dir_of(ltc.log)
            if ltc.cleanable_bytes <= 0:
                manager.done_cleaning(tp, data_dir, ltc.first_dirty_offset)
                return None
            before = worker.rounds
            try:
                worker.clean_log(ltc)
            except CleanerShutdownError:
                raise
            except Exception as e:
                entry = manager.mark_partition_uncleanable(data_dir, tp, f"{type(e).__name__}: {e}")
                raise CleaningConflictError(
                    f"cleaning {tp} failed: {type(e).__name__}: {e}; it is uncleanable until {entry.retry_at_ms} "
                    f"(ms since the epoch)") from e
            if worker.rounds == before:
                raise CleaningConflictError(f"the cleaning of {tp} was aborted (paused, truncated or deleted)")
            return self.rounds.last(tp)
