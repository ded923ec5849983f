"""Handing a big compaction backlog to the Spark job, and taking its output back (the sidecar's side).

Which logs (``wants``): with ``log.cleaner.offload.enable``, a compacted log that the cleaner
marked as a backlog (a round's offset map filled before the end of its dirty section, and the
distinct keys of that section exceed what one map holds: backlog.py) of at least
``log.cleaner.offload.backlog.min.passes`` estimated passes, or whose cleanable bytes
exceed ``log.cleaner.offload.dirty.bytes.threshold`` while it is eligible for cleaning (dirty
ratio or max.compaction.lag.ms), unless a failed hand-off of it waits for its retry. The cleaner
threads skip such logs (``CleanerManager.offload_filter``); ``run_once`` (the offload thread,
every log.cleaner.backoff.ms while nothing is wanted) hands the largest one off.

A hand-off of partition tp, numbered steps (``crash_hook(step)`` runs after each; the crash tests
kill a sidecar process at each one with LOGKEEPER_OFFLOAD_CRASH_AT=<step>):

1. ``paused``: tp's cleaning aborted if running, then paused (the status shows paused(n) and the
   offload entry ``running``); the round fixed from the live log: [first dirty, first
   uncleanable) as a cleaner thread would take it, with the log start offset, the topic's
   settings and now; a fresh staging directory ``<staging root>/<tp>/<attempt>``.
2. ``job-finished``: the job ran (offload_job.py: ``logkeeper spark-compact`` in a subprocess
   in a session of its own, bounded by log.cleaner.offload.timeout.ms) and exited 0, and its
   manifest (cleaner/offload_manifest.py) reads.
3. ``validated``: the manifest is for tp and the round asked (offsets, now, settings); its end
   offset is not beyond the log's first uncleanable offset now; its inputs are exactly the log's
   segments below its end offset, each with the size and whole-file CRC-32C the job read; its
   outputs replace its inputs one group at a time; every staged file has its size and CRC.
   Appends meanwhile went to the active segment, which no round includes.
4. ``placed``: the staged files renamed (copied and fsynced when the staging directory is on
   another file system) into the partition directory as ``<name>.cleaned``; directory fsynced.
5. the swap, log/replace.py's steps under the log's lock, after checking once more that the
   inputs are the log's segments with their sizes: ``written``, ``swapped``, ``old-deleted``,
   ``renamed``;
6. ``checkpointed``: the cleaner checkpoint of tp is the manifest's (its end offset);
7. ``resumed``: the staging directory removed, the backlog mark dropped, cleaning resumed, the
   status ``done`` with the job's figures.

A crash (or kill) of the sidecar at any step: the job dies with it (offload_job.py); at the next
start the staging root is removed before any hand-off (no staged output is ever used by a later
attempt: each attempt has its own directory, and nothing in it is read unless the job that
attempt started succeeded); the loader rolls an interrupted swap back (``.cleaned`` files left:
before step 5's ``swapped``) or forward (only ``.swap`` files); a crash between ``renamed`` and
``checkpointed`` leaves a cleaned log with the old checkpoint, which the next round cleans
again, as after the same crash in Kafka.

A failure or a timeout in steps 1-4 aborts cleanly: every process of the job killed, placed
``.cleaned`` files and the staging directory removed, cleaning resumed; the partition's offload
entry says ``failed`` with the reason, and the next attempt waits for a backoff that starts at
log.cleaner.uncleanable.retry.initial.ms and doubles per consecutive failure up to
log.cleaner.uncleanable.retry.max.ms. Meanwhile the cleaner threads clean the log as before
(several rounds). An I/O error writing into the partition directory (step 4's placing, the swap:
ENOSPC, EIO) takes the log directory offline (``log_dir_failure``), as the in-process cleaner's
does; the loader removes placed ``.cleaned`` files or finishes the swap at the next start. An
error reading the staged files (another file system) only fails the hand-off (install.py).

Status (``status()``; /v1/status shows it per partition as ``offload``): state (``running``,
``swapping``, ``done``, ``failed``), attempt, staging directory, the job's arguments, started and
finished times, reason, consecutive failures, next retry, the last result's figures, and while
the job runs its ``progress`` (cleaner/offload_progress.py: stage, tasks_done/tasks_total, bytes_done/
bytes_total, bytes_written, spark_ui, spark_stages, updated_ms; {} otherwise).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from ..fileio import CrashHook, fsync_dir, no_crash
from ..log.log import Log
from ..log.names import CLEANED_SUFFIX, TopicPartition
from ..log.segment import LogSegment
from ..records.batch import file_crc32c
from ..typed_schema import Doc
from .config import CleanerConfig
from .install import install_staged
from .manager import CleanerManager, LogsProvider
from .offload_job import JobRequest, JobRunner, OffloadError, runner_from_config
from .offload_manifest import SEGMENTS_DIR, Manifest, ManifestError, read_manifest
from .offload_progress import OffloadProgress, read_progress
from .selection import LogToClean, cleanable_offsets, max_compaction_delay
from .staging import remove_leftovers, staging_root
from .states import Paused

_LOG = logging.getLogger("logkeeper.cleaner.offload")

PAUSE_TIMEOUT_S = 60.0
CRASH_ENV = "LOGKEEPER_OFFLOAD_CRASH_AT"

LogDirFailure = Callable[[Path, str, BaseException], None]


def env_crash_hook() -> CrashHook | None:
    """With LOGKEEPER_OFFLOAD_CRASH_AT=<step> set, a hook that SIGKILLs this process right after
    that step (crash tests of a real sidecar process); None otherwise."""
    step = os.environ.get(CRASH_ENV)
    if not step:
        return None

    def hook(reached: str) -> None:
        if reached == step:
            _LOG.warning("killed after hand-off step %s (%s)", reached, CRASH_ENV)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


OffloadState = Literal["idle", "running", "waiting-for-job", "swapping", "done", "failed"]


class OffloadVerdict(TypedDict, total=False):
    """How an attempt ended ({} while none has): kept as the next attempt's ``previous``."""

    attempt: str
    state: OffloadState
    reason: str
    finished_ms: int
    result: dict[str, Any]


class Offload(TypedDict):
    """A partition's hand-off as /v1/status shows it (``offload``; server/status_schema.py)."""

    state: Annotated[OffloadState, Doc("The hand-off's step (cleaner/offload.py)")]
    attempt: str
    staging: str
    job_args: list[str]
    started_ms: int
    finished_ms: int
    reason: str
    failures: Annotated[int, Doc("Consecutive failed attempts")]
    retry_at_ms: int
    result: Annotated[dict[str, Any], Doc("The job's figures (manifest.json's stats) once it succeeded")]
    previous: Annotated[OffloadVerdict, Doc("The verdict of the partition's attempt before this one, if any")]
    progress: Annotated[OffloadProgress, Doc("The job's progress.json while it runs (cleaner/offload_progress.py)")]


@dataclass
class OffloadStatus:
    state: OffloadState = "idle"
    attempt: str = ""
    staging: str = ""
    job_args: list[str] = field(default_factory=list)
    started_ms: int = 0
    finished_ms: int = 0
    reason: str = ""
    failures: int = 0
    retry_at_ms: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    # The verdict of the attempt before this one ({attempt, state, reason, finished_ms, result}):
    # a new hand-off of the same partition may start before the operator has read that one's.
    previous: OffloadVerdict = field(default_factory=lambda: OffloadVerdict())

    def to_dict(self) -> Offload:
        return {"state": self.state, "attempt": self.attempt, "staging": self.staging, "job_args": list(self.job_args),
                "started_ms": self.started_ms, "finished_ms": self.finished_ms, "reason": self.reason,
                "failures": self.failures, "retry_at_ms": self.retry_at_ms, "result": dict(self.result),
                "previous": OffloadVerdict(**self.previous),
                # the job's own progress document while it runs (cleaner/offload_progress.py), read from the
                # staging directory at each status request: any runner's job writes it there
                "progress": read_progress(self.staging) if self.state in ("running", "waiting-for-job") else {}}

    def verdict(self) -> OffloadVerdict:
        """This attempt's outcome, kept as the next attempt's ``previous`` (empty while it runs)."""
        if not self.attempt or self.state not in ("done", "failed"):
            return {}
        return {"attempt": self.attempt, "state": self.state, "reason": self.reason,
                "finished_ms": self.finished_ms, "result": dict(self.result)}


class Offloader:
    def __init__(self, config: CleanerConfig, manager: CleanerManager, logs_provider: LogsProvider, *,
                 clock_ms: Callable[[], int], runner: JobRunner | None = None,
                 crash_hook: CrashHook | None = None, log_dir_failure: LogDirFailure | None = None) -> None:
        self.config = config
        self.manager = manager
        self.logs_provider = logs_provider
        self.clock_ms = clock_ms
        self.runner: JobRunner = runner if runner is not None else runner_from_config(
            config.log_cleaner_offload_runner, config.log_cleaner_offload_command)
        self.crash_hook: CrashHook = crash_hook or env_crash_hook() or no_crash
        self.log_dir_failure = log_dir_failure
        self._statuses: dict[TopicPartition, OffloadStatus] = {}
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.config.log_cleaner_offload_enable

    # ------------------------------------------------------------------ staging
    def staging_root(self, log_dir: Path) -> Path:
        return staging_root(self.config.log_cleaner_offload_staging_dir, log_dir)

    def remove_leftovers(self) -> None:
        remove_leftovers(self.config.log_cleaner_offload_staging_dir, self.manager.log_dirs)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Offload]:
        with self._lock:
            return {str(tp): s.to_dict() for tp, s in self._statuses.items()}

    def _update(self, tp: TopicPartition, **changes: Any) -> OffloadStatus:
        with self._lock:
            status = replace(self._statuses.get(tp, OffloadStatus()), **changes)
            self._statuses[tp] = status
            return status

    def in_backoff(self, tp: TopicPartition) -> bool:
        with self._lock:
            s = self._statuses.get(tp)
            return s is not None and s.state == "failed" and self.clock_ms() < s.retry_at_ms

    # ------------------------------------------------------------------ which logs
    def wants(self, ltc: LogToClean) -> bool:
        """Whether ``ltc``'s log should go to Spark rather than to a cleaner thread."""
        if not self.enabled or ltc.cleanable_bytes <= 0:
            return False
        tp = ltc.topic_partition
        if self.in_backoff(tp):
            return False
        mark = self.manager.backlogs().get(tp)
        if mark is not None and mark.passes >= self.config.log_cleaner_offload_backlog_min_passes:
            return True  # past the crossover: Spark's one pass beats that many rounds
        threshold = self.config.log_cleaner_offload_dirty_bytes_threshold
        return 0 <= threshold < ltc.cleanable_bytes and (
            ltc.need_compaction_now or ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio)

    def candidates(self) -> list[LogToClean]:
        """The logs ``wants``, largest cleanable section first (paused ones are left alone)."""
        now = self.clock_ms()
        checkpoints = self.manager.all_cleaner_checkpoints()
        states = self.manager.cleaning_states()
        out = []
        for tp, log in self.logs_provider().items():
            if not log.config.compact or isinstance(states.get(tp), Paused):
                continue
            try:
                offsets = cleanable_offsets(log, checkpoints.get(tp), now)
                ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset,
                                 max_compaction_delay(log, offsets.first_dirty_offset, now) > 0)
            except (OSError, ValueError, RuntimeError):  # closed or deleted meanwhile
                continue
            if self.wants(ltc):
                out.append(ltc)
        return sorted(out, key=lambda c: -c.cleanable_bytes)

    def run_once(self) -> bool:
        """Hand off the largest wanted log; True when one was handed off successfully."""
        for ltc in self.candidates():
            return self.hand_off(ltc.log)
        return False

    # ------------------------------------------------------------------ the hand-off
    def hand_off(self, log: Log) -> bool:
        """The numbered steps of the module docstring; False when aborted (see the status)."""
        tp = log.topic_partition
        data_dir = self.manager.log_dir_of(log)
        attempt = uuid.uuid4().hex[:12]
        staging = self.staging_root(data_dir) / str(tp) / attempt
        placed: list[Path] = []
        paused = False
        installing = False  # writing into the partition directory: an OSError there is the directory's
        swapping = False
        try:
            try:
                self.manager.abort_and_pause_cleaning(tp, timeout_s=PAUSE_TIMEOUT_S)
            except (RuntimeError, TimeoutError) as e:
                raise OffloadError(f"cannot pause the cleaning: {e}") from None
            paused = True
            request = self._request(log, data_dir, staging)
            staging.mkdir(parents=True)
            state = "waiting-for-job" if self.runner.waits_for_job else "running"
            with self._lock:
                previous = self._statuses.get(tp, OffloadStatus()).verdict()
            self._update(tp, state=state, attempt=attempt, staging=str(staging), job_args=request.args(),
                         started_ms=self.clock_ms(), finished_ms=0, reason="", result={}, previous=previous)
            _LOG.info("handing %s [%d, %d) to the Spark job (attempt %s, staging %s)", tp,
                      request.first_dirty_offset, request.end_offset, attempt, staging)
            self.crash_hook("paused")
            self.runner.run(request, self.config.log_cleaner_offload_timeout_ms / 1000.0, self._cancelled)
            try:
                manifest = read_manifest(staging)
            except ManifestError as e:
                raise OffloadError(f"the job left no usable manifest: {e}") from None
            self.crash_hook("job-finished")
            self._update(tp, state="swapping")
            old = self._validate(log, request, manifest, staging)
            self.crash_hook("validated")
            installing = True
            new = self._place(log, manifest, staging, placed)
            installing = False
            self.crash_hook("placed")
            with log.lock:
                self._ensure_inputs(log, manifest)
                swapping = True  # from here a failure is a crash between replace.py's steps
                log.replace_segments(new, old, crash_hook=self.crash_hook)
            self.manager.update_checkpoints(data_dir, update=(tp, manifest.checkpoint))
            self.crash_hook("checkpointed")
            self._remove_staging(staging, data_dir)
            self.manager.set_backlog(tp, None)
            self.manager.clear_uncleanable(data_dir, tp)
            self._resume(tp)
            paused = False
            self._update(tp, state="done", finished_ms=self.clock_ms(), failures=0, retry_at_ms=0,
                         result=dict(manifest.stats))
            self.crash_hook("resumed")
            _LOG.info("%s cleaned by the Spark job: %d segments -> %d, checkpoint %d", tp, len(manifest.inputs),
                      len(manifest.outputs), manifest.checkpoint)
            return True
        except Exception as e:
            reason = str(e) if isinstance(e, OffloadError) else f"{type(e).__name__}: {e}"
            if (installing or swapping) and isinstance(e, OSError) and self.log_dir_failure is not None:
                # as the in-process cleaner: an I/O error writing the log's files (placing the
                # staged output, the swap) takes the log directory offline
                step = "place" if installing else "swap in"
                self.log_dir_failure(data_dir, f"failed to {step} the Spark job's segments of {tp}", e)
            if not swapping:
                for path in placed:
                    try:
                        path.unlink(missing_ok=True)
                    except OSError:  # a failed disk: the loader removes .cleaned files at the next start
                        _LOG.warning("cannot remove %s after the failed hand-off of %s", path, tp)
            self._remove_staging(staging, data_dir)
            if paused:
                self._resume(tp)
            self._fail(tp, reason)
            return False

    def _fail(self, tp: TopicPartition, reason: str) -> None:
        with self._lock:
            previous = self._statuses.get(tp, OffloadStatus())
        failures = previous.failures + 1
        initial = self.config.log_cleaner_uncleanable_retry_initial_ms
        delay = min(self.config.log_cleaner_uncleanable_retry_max_ms, initial * (1 << min(failures - 1, 40)))
        now = self.clock_ms()
        self._update(tp, state="failed", finished_ms=now, reason=reason, failures=failures, retry_at_ms=now + delay)
        _LOG.warning("hand-off of %s to the Spark job aborted: %s; retry #%d in %d ms", tp, reason, failures, delay)

    def _resume(self, tp: TopicPartition) -> None:
        try:
            self.manager.resume_cleaning([tp])
        except RuntimeError as e:  # resumed by someone else meanwhile
            _LOG.warning("resuming the cleaning of %s: %s", tp, e)

    def _remove_staging(self, staging: Path, data_dir: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)
        for parent in (staging.parent, self.staging_root(data_dir)):
            try:
                parent.rmdir()
            except OSError:  # not empty (another partition's attempt) or gone
                return

    def _request(self, log: Log, data_dir: Path, staging: Path) -> JobRequest:
        now = self.clock_ms()
        offsets = cleanable_offsets(log, self.manager.all_cleaner_checkpoints().get(log.topic_partition), now)
        ltc = LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
        if ltc.cleanable_bytes <= 0:
            raise OffloadError("nothing to clean")
        c = log.config
        config = {"segment.bytes": c.segment_bytes, "segment.index.bytes": c.max_index_size,
                  "index.interval.bytes": c.index_interval_bytes, "delete.retention.ms": c.delete_retention_ms,
                  "producer.id.expiration.ms": self.config.producer_id_expiration_ms}
        return JobRequest(data_dir, log.topic_partition, staging, now, log.log_start_offset, ltc.first_dirty_offset,
                          ltc.first_uncleanable_offset, config, self.config.log_cleaner_offload_spark_master)

    # ------------------------------------------------------------------ checks
    def _ensure_inputs(self, log: Log, manifest: Manifest) -> list[LogSegment]:
        """The log's segments below the end offset are the manifest's inputs, with their sizes."""
        if log.closed or self.logs_provider().get(log.topic_partition) is not log:
            raise OffloadError("the log was closed or replaced meanwhile")
        live = log.segments.values(0, manifest.end_offset)
        expected = [(i.base_offset, i.size) for i in manifest.inputs]
        actual = [(s.base_offset, s.size_in_bytes) for s in live]
        if actual != expected:
            raise OffloadError(f"the segments below {manifest.end_offset} changed meanwhile: the job read "
                               f"{_brief(expected)}, the log has {_brief(actual)}")
        if log.active_segment.base_offset < manifest.end_offset:
            raise OffloadError(f"the active segment (base {log.active_segment.base_offset}) is below the job's "
                               f"end offset {manifest.end_offset}")
        return live

    def _validate(self, log: Log, request: JobRequest, manifest: Manifest, staging: Path) -> list[LogSegment]:
        asked = (str(request.topic_partition), request.now_ms, request.log_start_offset, request.first_dirty_offset,
                 request.end_offset, request.end_offset, request.config)
        got = (manifest.partition, manifest.now_ms, manifest.log_start_offset, manifest.first_dirty_offset,
               manifest.end_offset, manifest.checkpoint, manifest.config)
        if got != asked:
            fields = ("partition", "now_ms", "log_start_offset", "first_dirty_offset", "end_offset", "checkpoint",
                      "config")
            wrong = [f"{f}={g!r} (asked {a!r})" for f, g, a in zip(fields, got, asked) if g != a]
            raise OffloadError(f"the manifest is not for the round asked: {', '.join(wrong)}")
        offsets = cleanable_offsets(log, self.manager.all_cleaner_checkpoints().get(log.topic_partition),
                                    self.clock_ms())
        now_uncleanable = LogToClean(log, offsets.first_dirty_offset,
                                     offsets.first_uncleanable_dirty_offset).first_uncleanable_offset
        if manifest.end_offset > now_uncleanable:
            raise OffloadError(f"the job's end offset {manifest.end_offset} is beyond the log's first uncleanable "
                               f"offset now ({now_uncleanable})")
        live = self._ensure_inputs(log, manifest)
        for seg, spec in zip(live, manifest.inputs):
            size, crc = file_crc32c(seg.log.path)
            if (seg.log.path.name, size, crc) != (spec.name, spec.size, spec.crc32c):
                raise OffloadError(f"{seg.log.path} is not the file the job read (size {size}, crc32c {crc:#010x}; "
                                   f"the job read {spec.name}: {spec.size}, {spec.crc32c:#010x})")
        covered = [b for o in manifest.outputs for b in o.replaces]
        if covered != [i.base_offset for i in manifest.inputs] or \
                any(not o.replaces or o.base_offset != o.replaces[0] for o in manifest.outputs):
            raise OffloadError("the manifest's outputs do not replace its inputs one group at a time")
        for out in manifest.outputs:
            names = {f.name for f in out.files}
            if f"{out.base_offset:020d}.log" not in names:
                raise OffloadError(f"the manifest's output at {out.base_offset} has no .log file")
            for f in out.files:
                path = staging / SEGMENTS_DIR / f.name
                try:
                    size, crc = file_crc32c(path)
                except OSError as e:
                    raise OffloadError(f"staged file {path}: {e}") from None
                if (size, crc) != (f.size, f.crc32c):
                    raise OffloadError(f"staged file {path} is {size} bytes, crc32c {crc:#010x}: the manifest says "
                                       f"{f.size}, {f.crc32c:#010x}")
        return live

    # ------------------------------------------------------------------ moving the output in
    def _place(self, log: Log, manifest: Manifest, staging: Path, placed: list[Path]) -> list[LogSegment]:
        for out in manifest.outputs:
            for f in out.files:
                source = staging / SEGMENTS_DIR / f.name
                target = log.dir / (f.name + CLEANED_SUFFIX)
                target.unlink(missing_ok=True)
                placed.append(target)
                install_staged(source, target)
        fsync_dir(log.dir)
        return [LogSegment.for_config(log.dir, out.base_offset, log.config, clock_ms=log.now_ms,
                                      temp_suffix=CLEANED_SUFFIX)
                for out in manifest.outputs]

    # ------------------------------------------------------------------ thread
    def startup(self, backoff_ms: int) -> None:
        """Remove earlier staging directories; with offload enabled, start the offload thread: a
        hand-off whenever a log is wanted, else a sleep of ``backoff_ms``."""
        self.remove_leftovers()
        if not self.enabled:
            return
        self._cancelled.clear()

        def loop() -> None:
            while not self._cancelled.is_set():
                try:
                    handed = self.run_once()
                except Exception:
                    _LOG.exception("the offload thread failed a round")
                    handed = False
                if not handed:
                    self._cancelled.wait(backoff_ms / 1000.0)

        self._thread = threading.Thread(target=loop, name="logkeeper-offload", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float | None = 60.0) -> None:
        """Cancel a running hand-off (its job is killed, the hand-off aborted) and stop the thread."""
        self._cancelled.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None


def _brief(items: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"{b}:{s}" for b, s in items[:4])
    return f"[{shown}{', ...' if len(items) > 4 else ''}] ({len(items)} segments)"
