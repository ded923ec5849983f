"""CleanerManager: which partitions are being cleaned, paused or uncleanable, where each log's
clean section ends (``cleaner-offset-checkpoint`` per log directory), and which log to clean next
(Kafka's LogCleanerManager).

The logs come from ``logs_provider()`` (the LogManager's map of partition -> Log), read afresh on
every decision so that logs may come and go. A log's directory is its partition directory's
parent, and must be one of ``log_dirs`` to have a checkpoint.

Cleaning states follow states.py. ``abort_and_pause_cleaning`` waits (on a condition, checked
every 100 ms, as Kafka's) until the cleaner has stopped and the state is paused; logkeeper adds an
optional ``timeout_s`` bound. ``check_cleaning_aborted`` is what a cleaner thread calls between
windows to notice an abort.

Choosing a log (``grab_filthiest_compacted_log``): among compacted logs neither in a cleaning
state nor uncleanable, with bytes in their clean + cleanable sections, those whose cleanable
ratio exceeds min.cleanable.dirty.ratio, or that have cleanable bytes and waited past
max.compaction.lag.ms, are eligible; the highest ratio wins and becomes in-progress. A checkpoint
found invalid is rewritten on the way.

Offloaded logs: when ``offload_filter`` is set (offload.py), the logs it answers True for are
not chosen: the Spark hand-off takes them.

Uncleanable partitions: a failure while choosing or cleaning marks the partition uncleanable in
its directory. Kafka never retries it until a restart; logkeeper retries it after a backoff that
starts at ``retry_initial_ms`` and doubles per consecutive failure up to ``retry_max_ms``. It counts
as uncleanable (in the metrics too) until a round on it succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import LogCleaningAbortedError, LogkeeperError
from ..log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from ..log.log import Log
from ..log.names import TopicPartition
from .backlog import Backlog
from .selection import LogToClean, calculate_cleanable_bytes, cleanable_offsets, max_compaction_delay
from .states import ABORTED, IN_PROGRESS, Aborted, InProgress, LogCleaningState, Paused
from .stats import PreCleanStats

_LOG = logging.getLogger(__name__)

LogsProvider = Callable[[], Mapping[TopicPartition, Log]]


class LogCleaningException(LogkeeperError):
    """A failure while choosing or cleaning ``log``: its partition becomes uncleanable."""

    def __init__(self, log: Log, message: str) -> None:
        super().__init__(message)
        self.log = log


@dataclass
class Uncleanable:
    """A partition whose round failed: failures so far, when to retry, and why."""

    failures: int
    retry_at_ms: int
    reason: str


class CleanerManager:
    def __init__(self, log_dirs: Sequence[Path], logs_provider: LogsProvider, *,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 retry_initial_ms: int = 60000, retry_max_ms: int = 3600000) -> None:
        self.logs_provider = logs_provider
        self.clock_ms = clock_ms
        self.retry_initial_ms = retry_initial_ms
        self.retry_max_ms = retry_max_ms
        self._checkpoints = {Path(d).resolve(): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT)
                             for d in log_dirs}
        self._in_progress: dict[TopicPartition, LogCleaningState] = {}
        self._uncleanable: dict[Path, dict[TopicPartition, Uncleanable]] = {}
        self._backlogs: dict[TopicPartition, Backlog] = {}
        self._lock = threading.RLock()
        self._paused_cond = threading.Condition(self._lock)
        self.dirtiest_log_cleanable_ratio = 0.0
        self.time_of_last_run_ms = clock_ms()
        # logs this returns True for are left to the Spark hand-off (offload.py), not cleaned here
        self.offload_filter: Callable[[LogToClean], bool] | None = None
        # told (dir, message, error) when a cleaner checkpoint cannot be written: that directory
        # goes offline, as Kafka's checkpoint files report to its LogDirFailureChannel
        self.log_dir_failure: Callable[[Path, str, BaseException], None] | None = None

    # ------------------------------------------------------------------ checkpoints
    @staticmethod
    def log_dir_of(log: Log) -> Path:
        return log.dir.parent.resolve()

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for checkpoint in self._checkpoints.values():
                try:
                    out.update(checkpoint.read())
                except (OSError, LogkeeperError) as e:
                    _LOG.error("failed to read cleaner checkpoint %s: %s", checkpoint.path, e)
        return out

    def update_checkpoints(self, data_dir: Path, update: tuple[TopicPartition, int] | None = None,
                           remove: TopicPartition | None = None) -> None:
        failed: OSError | None = None
        with self._lock:
            checkpoint = self._checkpoints.get(Path(data_dir).resolve())
            if checkpoint is None:
                return
            try:
                logs = self.logs_provider()
                current = {tp: off for tp, off in checkpoint.read().items() if tp in logs}
                if remove is not None:
                    current.pop(remove, None)
                if update is not None:
                    current[update[0]] = update[1]
                checkpoint.write(current)
            except (OSError, LogkeeperError) as e:
                _LOG.error("failed to update cleaner checkpoint %s: %s", checkpoint.path, e)
                if isinstance(e, OSError):
                    failed = e
        # outside the lock: taking the directory offline calls back into handle_log_dir_failure
        if failed is not None and self.log_dir_failure is not None:
            self.log_dir_failure(Path(data_dir), f"failed to write the cleaner checkpoint {checkpoint.path}", failed)

    def alter_checkpoint_dir(self, tp: TopicPartition, source_dir: Path, dest_dir: Path) -> None:
        with self._lock:
            source = self._checkpoints.get(Path(source_dir).resolve())
            offset = source.read().get(tp) if source is not None else None
            if offset is not None:
                self.update_checkpoints(source_dir, remove=tp)
                self.update_checkpoints(dest_dir, update=(tp, offset))
            entry = self._uncleanable.get(Path(source_dir).resolve(), {}).pop(tp, None)
            if entry is not None:
                self._uncleanable.setdefault(Path(dest_dir).resolve(), {})[tp] = entry

    def handle_log_dir_failure(self, data_dir: Path) -> None:
        _LOG.warning("stopping cleaning logs in dir %s", data_dir)
        with self._lock:
            self._checkpoints.pop(Path(data_dir).resolve(), None)

    def maybe_truncate_checkpoint(self, data_dir: Path, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            log = self.logs_provider().get(tp)
            checkpoint = self._checkpoints.get(Path(data_dir).resolve())
            if log is None or not log.config.compact or checkpoint is None:
                return
            existing = checkpoint.read()
            if existing.get(tp, 0) > offset:
                existing[tp] = offset
                checkpoint.write(existing)

    # ------------------------------------------------------------------ states
    def cleaning_state(self, tp: TopicPartition) -> LogCleaningState | None:
        with self._lock:
            return self._in_progress.get(tp)

    def set_cleaning_state(self, tp: TopicPartition, state: LogCleaningState) -> None:
        with self._lock:
            self._in_progress[tp] = state

    def abort_cleaning(self, tp: TopicPartition, timeout_s: float | None = None) -> None:
        """Abort the cleaning of ``tp`` if in progress, waiting until it stopped."""
        with self._lock:
            self.abort_and_pause_cleaning(tp, timeout_s)
            self.resume_cleaning([tp])

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout_s: float | None = None) -> None:
        """Abort ``tp``'s cleaning if in progress and pause it (once more); waits until paused."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state is None:
                self._in_progress[tp] = Paused(1)
            elif isinstance(state, InProgress):
                self._in_progress[tp] = ABORTED
            elif isinstance(state, Paused):
                self._in_progress[tp] = Paused(state.count + 1)
            else:
                raise RuntimeError(f"compaction for partition {tp} cannot be aborted and paused since it is in "
                                   f"{state} state")
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while not isinstance(self._in_progress.get(tp), Paused):
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"cleaning of {tp} did not stop within {timeout_s} s")
                self._paused_cond.wait(0.1)

    def resume_cleaning(self, tps: Iterable[TopicPartition]) -> None:
        """Undo one pause of each partition."""
        with self._lock:
            for tp in tps:
                state = self._in_progress.get(tp)
                if state is None:
                    raise RuntimeError(f"compaction for partition {tp} cannot be resumed since it is not paused")
                if not isinstance(state, Paused):
                    raise RuntimeError(f"compaction for partition {tp} cannot be resumed since it is in "
                                       f"{state} state")
                if state.count == 1:
                    del self._in_progress[tp]
                else:
                    self._in_progress[tp] = Paused(state.count - 1)

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if isinstance(self._in_progress.get(tp), Aborted):
                raise LogCleaningAbortedError(f"cleaning of {tp} was aborted")

    def done_cleaning(self, tp: TopicPartition, data_dir: Path, end_offset: int) -> None:
        """Save the checkpoint and leave in-progress; or, when aborted, become paused(1)."""
        with self._lock:
            self._leave_in_progress(tp, lambda: self.update_checkpoints(data_dir, update=(tp, end_offset)))

    def done_deleting(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._leave_in_progress(tp)

    def _leave_in_progress(self, tp: TopicPartition, on_success: Callable[[], None] | None = None) -> None:
        """The end of a round on ``tp`` (lock held): in-progress -> none (after ``on_success``),
        aborted -> paused(1)."""
        state = self._in_progress.get(tp)
        if isinstance(state, InProgress):
            if on_success is not None:
                on_success()
            del self._in_progress[tp]
        elif isinstance(state, Aborted):
            self._in_progress[tp] = Paused(1)
            self._paused_cond.notify_all()
        elif state is None:
            raise RuntimeError(f"state for partition {tp} should exist")
        else:
            raise RuntimeError(f"in-progress partition {tp} cannot be in {state} state")

    # ------------------------------------------------------------------ uncleanable partitions
    def mark_partition_uncleanable(self, data_dir: Path, tp: TopicPartition, reason: str = "") -> Uncleanable:
        with self._lock:
            entries = self._uncleanable.setdefault(Path(data_dir).resolve(), {})
            previous = entries.get(tp)
            failures = 1 if previous is None else previous.failures + 1
            delay = min(self.retry_max_ms, self.retry_initial_ms * (1 << min(failures - 1, 40)))
            entry = Uncleanable(failures, self.clock_ms() + delay, reason)
            entries[tp] = entry
            return entry

    def clear_uncleanable(self, data_dir: Path, tp: TopicPartition) -> None:
        with self._lock:
            entries = self._uncleanable.get(Path(data_dir).resolve())
            if entries is not None:
                entries.pop(tp, None)

    def uncleanable_partitions(self, data_dir: Path) -> dict[TopicPartition, Uncleanable]:
        with self._lock:
            return dict(self._uncleanable.get(Path(data_dir).resolve(), {}))

    def is_uncleanable_partition(self, log: Log, tp: TopicPartition) -> bool:
        """Uncleanable and not yet due for a retry."""
        with self._lock:
            entry = self._uncleanable.get(self.log_dir_of(log), {}).get(tp)
            return entry is not None and self.clock_ms() < entry.retry_at_ms

    def maintain_uncleanable_partitions(self) -> None:
        """Forget uncleanable partitions whose log is gone."""
        with self._lock:
            logs = self.logs_provider()
            for data_dir in list(self._uncleanable):
                entries = self._uncleanable[data_dir]
                for tp in [tp for tp in entries if tp not in logs]:
                    del entries[tp]
                if not entries:
                    del self._uncleanable[data_dir]
            for tp in [tp for tp in self._backlogs if tp not in logs]:
                del self._backlogs[tp]

    def uncleanable_bytes(self, data_dir: Path) -> int:
        with self._lock:
            entries = self.uncleanable_partitions(data_dir)
            if not entries:
                return 0
            logs = self.logs_provider()
            checkpoints = self.all_cleaner_checkpoints()
            now = self.clock_ms()
            total = 0
            for tp in entries:
                log = logs.get(tp)
                if log is not None:
                    offsets = cleanable_offsets(log, checkpoints.get(tp), now)
                    total += calculate_cleanable_bytes(log, offsets.first_dirty_offset,
                                                       offsets.first_uncleanable_dirty_offset)[1]
            return total

    def cleaning_states(self) -> dict[TopicPartition, LogCleaningState]:
        """Every partition in a cleaning state (absent: none)."""
        with self._lock:
            return dict(self._in_progress)

    @property
    def log_dirs(self) -> list[Path]:
        with self._lock:
            return list(self._checkpoints)

    # ------------------------------------------------------------------ backlogs
    def set_backlog(self, tp: TopicPartition, backlog: Backlog | None) -> None:
        with self._lock:
            if backlog is None:
                self._backlogs.pop(tp, None)
            else:
                self._backlogs[tp] = backlog

    def backlogs(self) -> dict[TopicPartition, Backlog]:
        with self._lock:
            return dict(self._backlogs)

    # ------------------------------------------------------------------ choosing work
    def grab_filthiest_compacted_log(self, pre_stats: PreCleanStats | None = None) -> LogToClean | None:
        pre = pre_stats if pre_stats is not None else PreCleanStats()
        with self._lock:
            now = self.clock_ms()
            self.time_of_last_run_ms = now
            last_clean = self.all_cleaner_checkpoints()
            dirty: list[LogToClean] = []
            for tp, log in self.logs_provider().items():
                if not log.config.compact or tp in self._in_progress or self.is_uncleanable_partition(log, tp):
                    continue
                try:
                    offsets = cleanable_offsets(log, last_clean.get(tp), now)
                    if offsets.force_update_checkpoint:
                        self.update_checkpoints(self.log_dir_of(log), update=(tp, offsets.first_dirty_offset))
                    delay = max_compaction_delay(log, offsets.first_dirty_offset, now)
                    pre.update_max_compaction_delay(delay)
                    ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset,
                                     delay > 0)
                except Exception as e:
                    raise LogCleaningException(
                        log, f"failed to calculate log cleaning stats for partition {tp}: {e}") from e
                if ltc.total_bytes > 0:
                    dirty.append(ltc)
            self.dirtiest_log_cleanable_ratio = max((d.cleanable_ratio for d in dirty), default=0.0)
            cleanable = [d for d in dirty if (d.need_compaction_now and d.cleanable_bytes > 0)
                         or d.cleanable_ratio > d.log.config.min_cleanable_dirty_ratio]
            if self.offload_filter is not None:
                cleanable = [d for d in cleanable if not self.offload_filter(d)]
            if not cleanable:
                return None
            pre.record_cleanable_partitions(len(cleanable))
            filthiest = max(cleanable, key=lambda d: d.cleanable_ratio)
            self._in_progress[filthiest.topic_partition] = IN_PROGRESS
            return filthiest

    def grab_log_to_clean(self, tp: TopicPartition) -> LogToClean:
        """``tp``'s log, now in progress, for a round asked for by hand (the sidecar's API), whatever
        its dirty ratio (the active segment and the uncleanable section stay out, as always).
        RuntimeError when ``tp`` has no log, is not compacted or is in a cleaning state."""
        with self._lock:
            log = self.logs_provider().get(tp)
            if log is None:
                raise RuntimeError(f"partition {tp} has no log")
            if not log.config.compact:
                policy = ",".join(log.config.cleanup_policy)
                raise RuntimeError(f"partition {tp} is not compacted (cleanup.policy={policy})")
            state = self._in_progress.get(tp)
            if state is not None:
                raise RuntimeError(f"compaction for partition {tp} cannot start since it is in {state} state")
            now = self.clock_ms()
            offsets = cleanable_offsets(log, self.all_cleaner_checkpoints().get(tp), now)
            if offsets.force_update_checkpoint:
                self.update_checkpoints(self.log_dir_of(log), update=(tp, offsets.first_dirty_offset))
            ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
            self._in_progress[tp] = IN_PROGRESS
            return ltc

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, Log]]:
        """For the LogManager's retention: non-compacted logs not in a cleaning state, now
        paused(1); the caller resumes them when done."""
        with self._lock:
            out = [(tp, log) for tp, log in self.logs_provider().items()
                   if not log.config.compact and tp not in self._in_progress]
            for tp, _log in out:
                self._in_progress[tp] = Paused(1)
            return out

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Compacted logs free for retention (compact,delete) and log-start deletion, now
        in-progress; the caller calls ``done_deleting``."""
        with self._lock:
            out = [(tp, log) for tp, log in self.logs_provider().items()
                   if tp not in self._in_progress and log.config.compact
                   and not self.is_uncleanable_partition(log, tp)]
            for tp, _log in out:
                self._in_progress[tp] = IN_PROGRESS
            return out
