"""``/v1/status``: what the operator copies into the resource's status, as one JSON document of
the typed shape ``Status`` (status_schema.py: the contract, from which the OpenAPI document's
schemas and the operator's parser come):

    {"ready", "log_dirs": [LogDirStatus], "partitions": [PartitionStatus],
     "offline_partitions": [OfflinePartition],
     "cleaner": {Kafka's cleaner metrics by their names (cleaner/metrics.py), "threads", "alive_threads"}}

Per partition: ``dirty_ratio`` is the cleaner's cleanable ratio (cleanable bytes / (clean +
cleanable bytes), selection.py), computed now from its checkpoint, for compacted logs only (null
otherwise, or when nothing is outside the active segment: the ratio is 0/0 then);
``cleaning_state`` is none, in-progress, aborted or paused(n); ``round_progress`` while a round
runs, its phase and bytes read (cleaner/round_progress.py); ``last_round`` the last finished
round's figures and Kafka's stats line (cleaning.py);
``uncleanable`` {reason, failures, retry_at_ms} while the partition is marked uncleanable;
``backlog`` whether the cleaner marked it as more keys than one offset map holds (backlog.py),
with the estimate in ``backlog_detail``; ``offload`` its hand-off to the Spark job when it had one
(cleaner/offload.py: state, attempt, staging, job_args, reason, failures, retry_at_ms, result,
the previous attempt's verdict, and while the job runs its progress: cleaner/offload_progress.py).
Every partition entry has ``state`` "online". The partitions the manager knows but cannot serve
(their directory is offline, or they have a copy in two directories) are listed apart in
``offline_partitions``: {topic, partition, state "offline", log_dir, paths, error}.
"""

from __future__ import annotations

import math
from typing import Any

from ..cleaner.backlog import Backlog
from ..cleaner.selection import LogToClean, cleanable_offsets
from ..cleaner.states import state_name
from .service import Sidecar, offsets_of
from .status_schema import BacklogDetail, CleanerStatus, LogDirStatus, PartitionStatus, Status


def _dirty(entry: PartitionStatus, log: Any, checkpoint: int | None, now_ms: int) -> None:
    offsets = cleanable_offsets(log, checkpoint, now_ms)
    ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    ratio = ltc.cleanable_ratio
    entry["dirty_ratio"] = None if math.isnan(ratio) else round(ratio, 6)
    entry["cleanable_bytes"] = ltc.cleanable_bytes


def _backlog_detail(b: Backlog) -> BacklogDetail:
    return BacklogDetail(
        topic_partition=str(b.topic_partition), first_dirty_offset=b.first_dirty_offset,
        first_uncleanable_offset=b.first_uncleanable_offset, estimated_keys=b.estimated_keys, map_keys=b.map_keys,
        passes=b.passes, dirty_bytes=b.dirty_bytes, clean_bytes=b.clean_bytes, recopied_bytes=b.recopied_bytes,
        marked_ms=b.marked_ms)


def build_status(sidecar: Sidecar) -> Status:
    manager, cleaner = sidecar.manager, sidecar.cleaner
    cm = cleaner.manager
    now = sidecar.clock_ms()
    # The rounds before the checkpoints: a round is reported after its checkpoint is written, so
    # every round listed here has its checkpoint in what is read next.
    reports = sidecar.rounds.snapshot()
    checkpoints = cm.all_cleaner_checkpoints()
    states = cm.cleaning_states()
    backlogs = cm.backlogs()
    offloads = cleaner.offload_status()
    uncleanable = {tp: u for d in cm.log_dirs for tp, u in cm.uncleanable_partitions(d).items()}
    workers = [t.worker for t in cleaner.threads] + sidecar.cleaning.manual_workers()
    running = {p.topic_partition: p for w in workers if (p := w.cleaner.progress()) is not None}
    partitions = []
    for tp, lg, d in sorted(manager.logs_with_dirs(), key=lambda x: (x[0].topic, x[0].partition)):
        u = uncleanable.get(tp)
        backlog = backlogs.get(tp)
        offsets = offsets_of(lg)
        entry = PartitionStatus(
            topic=tp.topic, partition=tp.partition, state="online", log_dir=str(d.path),
            size_bytes=lg.size_in_bytes, segments=len(lg.segments),
            log_start_offset=offsets["log_start_offset"], log_end_offset=offsets["log_end_offset"],
            last_stable_offset=offsets["last_stable_offset"], recovery_point=offsets["recovery_point"],
            compacted=lg.config.compact, cleaner_checkpoint=checkpoints.get(tp), dirty_ratio=None,
            cleanable_bytes=None, cleaning_state=state_name(states.get(tp)),
            round_progress=running[tp].to_dict() if tp in running else None, last_round=reports.get(tp),
            uncleanable={"reason": u.reason, "failures": u.failures, "retry_at_ms": u.retry_at_ms} if u else None,
            backlog=backlog is not None,
            backlog_detail=_backlog_detail(backlog) if backlog is not None else None,
            offload=offloads.get(str(tp)))
        if lg.config.compact:
            try:
                _dirty(entry, lg, checkpoints.get(tp), now)
            except (ValueError, RuntimeError, OSError) as e:  # the log closed or deleted meanwhile
                entry["error"] = f"{type(e).__name__}: {e}"
        partitions.append(entry)
    metrics: CleanerStatus = {**cleaner.metrics(workers).to_dict(), "threads": len(cleaner.threads),
                              "alive_threads": sum(1 for t in cleaner.threads if t.is_alive())}
    return Status(
        ready=sidecar.ready,
        log_dirs=[LogDirStatus(path=s.path, online=s.online, error=s.error, partitions=s.partitions,
                               size_bytes=s.size_bytes, total_bytes=s.total_bytes, usable_bytes=s.usable_bytes,
                               stray=list(s.stray)) for s in manager.dir_status()],
        partitions=partitions,
        offline_partitions=sidecar.offline_partitions(),
        cleaner=metrics,
    )
