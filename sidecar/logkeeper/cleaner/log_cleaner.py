"""LogCleaner: the cleaner threads of a process, their shared throttler, the CleanerManager and the
metrics snapshot (Kafka's LogCleaner).

Plugs into the LogManager through a small interface: ``log_dirs`` (one cleaner-offset-checkpoint
each) and ``logs_provider()`` (partition -> Log); the LogManager may pass its handler for a failed
log directory (``log_dir_failure``). ``install_hooks(manager.cleaner_hooks)`` fills the LogManager's
CleanerHooks (log/cleaner_hooks.py) with this cleaner's calls:

    hook                   cleaner call
    pause_for_retention()  pause_cleaning_for_non_compacted_partitions (its partitions)
    abort_and_pause(tp)    abort_and_pause_cleaning(tp): waits until a clean of tp stopped
    resume(tp)             resume_cleaning([tp])
    abort(tp)              abort_cleaning(tp)
    truncate_checkpoint    maybe_truncate_checkpoint(dir, tp, offset)
    remove_partition       update_checkpoints(dir, remove=tp)
    on_dir_failure(dir)    handle_log_dir_failure(dir)

The cleaner threads apply retention (log/retention.py) to the compacted logs, between cleanings,
while those logs are marked in progress; the LogManager's pass covers the other logs, paused.

With ``log.cleaner.offload.enable``, an Offloader (offload.py) takes the logs whose backlog is
too big for the offset map to the Spark job, on a thread of its own started and stopped with the
cleaner threads; the manager's ``offload_filter`` keeps the cleaner threads off them.

Each of ``log.cleaner.threads`` threads owns an offset map of dedupe.buffer.size / threads bytes
(at most 2 GiB, 24 bytes a slot). Nothing starts when ``log.cleaner.enable`` is false.
``message_max_bytes`` is the broker's message.max.bytes (Kafka's CleanerConfig.maxMessageSize: the
most a read buffer grows to beyond a topic's max.message.bytes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..log.cleaner_hooks import CleanerHooks
from ..log.names import TopicPartition
from .cleaner import Cleaner
from .config import CleanerConfig
from .manager import CleanerManager, LogsProvider
from .metrics import CleanerMetrics, buffer_utilization_percent
from .offset_map import SipHashOffsetMap
from .staging import remove_leftovers
from .states import state_name
from .stats import MonotonicMs, monotonic_ms
from .throttler import Throttler

if TYPE_CHECKING:
    from .offload import Offload, Offloader
from .worker import (
    CleanerThread,
    CleanerWorker,
    DeleteOldSegments,
    LogDirFailure,
    RoundSink,
    StatsSink,
    running_check,
)

DEFAULT_MESSAGE_MAX_BYTES = 1048588  # the broker's message.max.bytes (log/manager_config.py defines it)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LogCleaner:
    def __init__(self, config: CleanerConfig, log_dirs: Sequence[Path], logs_provider: LogsProvider, *,
                 clock_ms: Callable[[], int] = wall_clock_ms, stats_clock_ms: MonotonicMs = monotonic_ms,
                 delete_old_segments: DeleteOldSegments | None = None,
                 log_dir_failure: LogDirFailure | None = None, stats_sink: StatsSink | None = None,
                 message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES, round_sink: RoundSink | None = None) -> None:
        self.config = config
        self.round_sink = round_sink
        self.message_max_bytes = message_max_bytes
        self.clock_ms = clock_ms
        self.stats_clock_ms = stats_clock_ms
        self.delete_old_segments = delete_old_segments
        self.log_dir_failure = log_dir_failure
        self.stats_sink = stats_sink
        self.manager = CleanerManager(log_dirs, logs_provider, clock_ms=clock_ms,
                                      retry_initial_ms=config.log_cleaner_uncleanable_retry_initial_ms,
                                      retry_max_ms=config.log_cleaner_uncleanable_retry_max_ms)
        self.manager.log_dir_failure = log_dir_failure
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second)
        self.threads: list[CleanerThread] = []
        # the hand-off's modules (and the Spark job's) are imported only when it is on
        self.offloader: Offloader | None = None
        if config.log_cleaner_offload_enable:
            from .offload import Offloader

            self.offloader = Offloader(config, self.manager, logs_provider, clock_ms=clock_ms,
                                       log_dir_failure=log_dir_failure)
            self.manager.offload_filter = self.offloader.wants

    def offload_status(self) -> dict[str, Offload]:
        """The offload's state per partition handed off (empty when the offload is off)."""
        return self.offloader.status() if self.offloader is not None else {}

    # ------------------------------------------------------------------ workers
    def new_worker(self, cleaner_id: int, check_running: Callable[[], None] | None = None) -> CleanerWorker:
        cfg = self.config
        manager = self.manager

        def check_done(tp: TopicPartition) -> None:
            if check_running is not None:
                check_running()
            manager.check_cleaning_aborted(tp)

        cleaner = Cleaner(
            cleaner_id,
            SipHashOffsetMap(cfg.dedupe_buffer_per_thread, load_factor=cfg.log_cleaner_io_buffer_load_factor),
            io_buffer_size=cfg.io_buffer_per_cleaner, max_io_buffer_size=self.message_max_bytes,
            load_factor=cfg.log_cleaner_io_buffer_load_factor,
            throttler=self.throttler if cfg.throttled else None, clock_ms=self.clock_ms,
            stats_clock_ms=self.stats_clock_ms, check_done=check_done,
            producer_expiration_ms=cfg.producer_id_expiration_ms)
        return CleanerWorker(cleaner, manager, delete_old_segments=self.delete_old_segments,
                             log_dir_failure=self.log_dir_failure, stats_sink=self.stats_sink,
                             clock_ms=self.clock_ms, round_sink=self.round_sink)

    def startup(self) -> None:
        if not self.config.log_cleaner_enable:
            return
        if self.offloader is not None:
            self.offloader.startup(self.config.log_cleaner_backoff_ms)
        else:
            remove_leftovers(self.config.log_cleaner_offload_staging_dir, self.manager.log_dirs)
        for i in range(self.config.num_threads):
            running = threading.Event()
            running.set()
            worker = self.new_worker(i, running_check(running, f"kafka-log-cleaner-thread-{i}"))
            thread = CleanerThread(worker, self.config.log_cleaner_backoff_ms, running)
            self.threads.append(thread)
            thread.start()

    def shutdown(self, timeout_s: float | None = 60.0) -> None:
        if self.offloader is not None:
            self.offloader.shutdown(timeout_s)
        for thread in self.threads:
            thread.shutdown(timeout_s)
        self.threads.clear()

    # ------------------------------------------------------------------ the LogManager's calls
    def abort_cleaning(self, tp: TopicPartition, timeout_s: float | None = None) -> None:
        self.manager.abort_cleaning(tp, timeout_s)

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout_s: float | None = None) -> None:
        self.manager.abort_and_pause_cleaning(tp, timeout_s)

    def resume_cleaning(self, tps: Iterable[TopicPartition]) -> None:
        self.manager.resume_cleaning(tps)

    def update_checkpoints(self, data_dir: Path, remove: TopicPartition | None = None) -> None:
        self.manager.update_checkpoints(data_dir, remove=remove)

    def alter_checkpoint_dir(self, tp: TopicPartition, source_dir: Path, dest_dir: Path) -> None:
        self.manager.alter_checkpoint_dir(tp, source_dir, dest_dir)

    def handle_log_dir_failure(self, data_dir: Path) -> None:
        self.manager.handle_log_dir_failure(data_dir)

    def maybe_truncate_checkpoint(self, data_dir: Path, tp: TopicPartition, offset: int) -> None:
        self.manager.maybe_truncate_checkpoint(data_dir, tp, offset)

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, object]]:
        return list(self.manager.pause_cleaning_for_non_compacted_partitions())

    def install_hooks(self, hooks: CleanerHooks) -> None:
        """Point the LogManager's hooks at this cleaner (see the module docstring)."""
        manager = self.manager

        def pause_for_retention() -> list[TopicPartition]:
            return [tp for tp, _log in manager.pause_cleaning_for_non_compacted_partitions()]

        def resume(tp: TopicPartition) -> None:
            manager.resume_cleaning([tp])

        def remove_partition(data_dir: Path, tp: TopicPartition) -> None:
            manager.update_checkpoints(data_dir, remove=tp)

        hooks.pause_for_retention = pause_for_retention
        hooks.abort_and_pause = manager.abort_and_pause_cleaning
        hooks.resume = resume
        hooks.abort = manager.abort_cleaning
        hooks.truncate_checkpoint = manager.maybe_truncate_checkpoint
        hooks.remove_partition = remove_partition
        hooks.on_dir_failure = manager.handle_log_dir_failure

    def await_cleaned(self, tp: TopicPartition, offset: int, max_wait_ms: int = 60000) -> bool:
        """Wait (polling every 100 ms, at most ``max_wait_ms``) until ``tp``'s checkpoint reaches ``offset``."""
        deadline = time.monotonic() + max_wait_ms / 1000.0
        while True:
            if self.manager.all_cleaner_checkpoints().get(tp, -1) >= offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    # ------------------------------------------------------------------ metrics
    def dead_thread_count(self) -> int:
        return sum(1 for t in self.threads if t.failed)

    def metrics(self, workers: Sequence[CleanerWorker] | None = None) -> CleanerMetrics:
        ws = list(workers) if workers is not None else [t.worker for t in self.threads]
        stats = [w.last_stats for w in ws]
        now = self.clock_ms()
        dirs = self.manager.log_dirs
        return CleanerMetrics(
            max_buffer_utilization_percent=buffer_utilization_percent(s.buffer_utilization for s in stats),
            cleaner_recopy_percent=int(100 * sum(s.bytes_written for s in stats)
                                       / max(sum(s.bytes_read for s in stats), 1)),
            max_clean_time_secs=int(max((s.elapsed_secs for s in stats), default=0.0)),
            max_compaction_delay_secs=int(max((float(w.last_pre_clean_stats.max_compaction_delay_ms) for w in ws),
                                              default=0.0) / 1000),
            dead_thread_count=self.dead_thread_count(),
            max_dirty_percent=int(100 * self.manager.dirtiest_log_cleanable_ratio),
            time_since_last_run_ms=now - self.manager.time_of_last_run_ms,
            uncleanable_partitions_count={str(d): len(self.manager.uncleanable_partitions(d)) for d in dirs},
            uncleanable_bytes={str(d): self.manager.uncleanable_bytes(d) for d in dirs},
            uncleanable={str(tp): {"failures": u.failures, "retry_at_ms": u.retry_at_ms, "reason": u.reason}
                         for d in dirs for tp, u in self.manager.uncleanable_partitions(d).items()},
            backlogs={str(tp): b.to_dict() for tp, b in self.manager.backlogs().items()},
            states={str(tp): state_name(st) for tp, st in self.manager.cleaning_states().items()},
            rounds=sum(w.rounds for w in ws),
            offloads=self.offload_status(),
        )
