"""Closing one log directory at shutdown (Kafka's LogManager.shutdown, per directory): the mirror
of dir_loader.py. The manager runs it for every online directory at once, then releases the
locks (its step 4, ``shutdown:unlocked``).

Numbered crash steps (``crash_hook(step)`` is called after each; a test per step):

1. ``shutdown:closed``: every log of the directory flushed and closed, on ``threads`` threads. A
   log that fails to close ends the directory's shutdown here: no checkpoint and no marker, so
   the next start recovers this directory.
2. ``shutdown:checkpointed``: its recovery points and log start offsets written (only if the
   directory was loaded completely: a partial list would drop the partitions not loaded).
3. ``shutdown:marked``: its clean-shutdown marker written (only if that directory was loaded
   completely or was clean at startup). A crash before this step leaves no marker: the next
   start recovers from the checkpoints; nothing flushed is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from ..fileio import CrashHook
from .log import Log
from .log_dir import LogDir
from .manager_tasks import log_start_offsets, recovery_points
from .names import TopicPartition

log = logging.getLogger(__name__)


def _close(lg: Log) -> None:
    try:
        lg.flush()
        lg.close(clean_shutdown=True)
    except BaseException:
        lg.close_handlers()
        raise


def shutdown_dir(d: LogDir, logs: Mapping[TopicPartition, Log], *, threads: int, broker_epoch: int,
                 crash_hook: CrashHook) -> None:
    """Close ``logs`` (the directory's), then write its checkpoints and clean-shutdown marker."""
    failed = False
    with ThreadPoolExecutor(threads) as pool:
        futures = [(lg, pool.submit(_close, lg)) for lg in logs.values()]
        for lg, fut in futures:
            try:
                fut.result()
            except Exception as e:
                failed = True
                log.error("error closing %s in %s during shutdown: %s", lg.name, d.path, e)
    if failed:
        return
    crash_hook("shutdown:closed")
    try:
        if d.load_completed:  # else the checkpoints on disk still hold the partitions not loaded
            d.recovery_point_checkpoint.write(recovery_points(logs, d))
            d.log_start_offset_checkpoint.write(log_start_offsets(logs, d))
        crash_hook("shutdown:checkpointed")
        if d.had_clean_shutdown or d.load_completed:
            d.write_clean_shutdown_marker(broker_epoch)
            crash_hook("shutdown:marked")
    except OSError as e:
        log.error("error writing checkpoints or the clean shutdown marker of %s: %s", d.path, e)
