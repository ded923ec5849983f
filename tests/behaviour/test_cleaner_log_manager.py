"""The cleaner plugged into a LogManager through its CleanerHooks: cleaning in the background, truncation
and deletion pausing or aborting it, retention left to the right side."""

from __future__ import annotations

import time
from pathlib import Path

from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.log_cleaner import LogCleaner
from logkeeper.cleaner.states import Paused
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import Record, build_batch
from tests.cleaner_logs import keys_in_log

NOW = 1_700_000_000_000


def test_cleaner_behind_a_log_manager(tmp_path: Path) -> None:
    manager = LogManager(ManagerConfig.for_dirs(tmp_path / "d1", tmp_path / "d2"), clock_ms=lambda: NOW,
                         topic_configs={"compacted": {"cleanup.policy": "compact", "segment.bytes": 2048,
                                                      "min.cleanable.dirty.ratio": 0.01}})
    manager.startup()
    cleaner = LogCleaner(CleanerConfig.from_props({"log.cleaner.backoff.ms": 10}), manager.live_log_dirs,
                         manager.current_logs, clock_ms=lambda: NOW)
    cleaner.install_hooks(manager.cleaner_hooks)
    tp = TopicPartition("compacted", 0)
    log = manager.get_or_create_log(tp, is_new=True)
    for i in range(300):
        manager.append(tp, build_batch([Record(0, NOW, str(i % 5).encode(), str(i).encode())]))
    log.roll()
    cleaner.startup()
    try:
        assert cleaner.await_cleaned(tp, log.active_segment.base_offset, max_wait_ms=30000)
        assert len(keys_in_log(log)) < 300
        # retention passes leave compacted logs to the cleaner; the hook pauses only the others
        paused = manager.cleaner_hooks.pause_for_retention() if manager.cleaner_hooks.pause_for_retention else None
        assert paused is not None and tp not in paused
        # a truncation below the active segment pauses the cleaning of tp, then resumes it
        manager.truncate_to({tp: 100})
        assert cleaner.manager.cleaning_state(tp) is None
        assert cleaner.manager.all_cleaner_checkpoints()[tp] <= log.active_segment.base_offset
        cleaner.abort_and_pause_cleaning(tp, timeout_s=10)
        assert cleaner.manager.cleaning_state(tp) == Paused(1)
        cleaner.resume_cleaning([tp])
        # deleting the partition aborts its cleaning and drops its checkpoint
        data_dir = log.dir.parent
        manager.delete_log(tp)
        time.sleep(0.05)
        assert tp not in cleaner.manager.all_cleaner_checkpoints()
        assert (data_dir / "cleaner-offset-checkpoint").exists()
        assert cleaner.metrics().dead_thread_count == 0
    finally:
        cleaner.shutdown()
        manager.shutdown()
