"""cleaner/offload.py and offload_job.py in process, without Spark: the hand-off's result equals the
in-process cleaner's byte for byte; every check aborts cleanly (log untouched, staging removed,
cleaning resumed, the reason in the status, retries with a doubling backoff); appends meanwhile
survive; which logs are wanted; an external runner. The job's process: test_offload_runner.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from logkeeper.cleaner.backlog import Backlog
from logkeeper.cleaner.config import CleanerConfig
from logkeeper.cleaner.manager import CleanerManager
from logkeeper.cleaner.offload import CRASH_ENV, Offloader, OffloadStatus, env_crash_hook
from logkeeper.cleaner.offload_job import JobRequest, OffloadError
from logkeeper.cleaner.offload_manifest import MANIFEST, SEGMENTS_DIR, read_manifest, write_manifest
from logkeeper.cleaner.selection import LogToClean, cleanable_offsets
from logkeeper.cleaner.staging import STAGING_DIR_NAME
from logkeeper.cleaner.states import Paused
from logkeeper.cli import build_parser
from logkeeper.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.spark.command import plan_from_args
from tests.cleaner_logs import append_kvs, read_log
from tests.spark_helpers import (
    NOW_MS,
    TP,
    build_log,
    clean_log_dir,
    config,
    copy_log_dir,
    open_log,
    run_local_job,
    segment_files,
    workload_copies,
)

INITIAL_MS = 1000
Hook = Callable[[JobRequest], None]


def _nothing(_request: JobRequest) -> None:
    return None


@dataclass
class InProcessJob:
    """The test-double job (spark_helpers.run_local_job) run in this process from the request's
    own arguments; ``before`` and ``after`` let a test act while the job 'runs'."""

    before: Hook = _nothing
    after: Hook = _nothing
    requests: list[JobRequest] = field(default_factory=list)
    waits_for_job: bool = False

    def run(self, request: JobRequest, timeout_s: float, cancelled: threading.Event) -> None:
        self.requests.append(request)
        self.before(request)
        plan = plan_from_args(build_parser().parse_args(request.args()))
        run_local_job(plan, request.staging)
        self.after(request)


class Clock:
    def __init__(self) -> None:
        self.now = NOW_MS

    def __call__(self) -> int:
        return self.now


def compact(seed: int) -> LogConfig:
    return config(seed, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})


@dataclass
class Setup:
    log_dir: Path
    log: Log
    manager: CleanerManager
    offloader: Offloader
    clock: Clock
    job: InProcessJob

    def close(self) -> None:
        if not self.log.closed:
            self.log.close()


def make_setup(log_dir: Path, seed: int, job: InProcessJob | None = None, **cleaner: object) -> Setup:
    clock = Clock()
    log = open_log(log_dir, compact(seed), clock)
    logs = {TP: log}
    cfg = CleanerConfig.from_props({"log.cleaner.offload.enable": True,
                                    "log.cleaner.uncleanable.retry.initial.ms": INITIAL_MS,
                                    "log.cleaner.uncleanable.retry.max.ms": 3 * INITIAL_MS, **cleaner})
    manager = CleanerManager([log_dir], lambda: logs, clock_ms=clock)
    job = job or InProcessJob()
    offloader = Offloader(cfg, manager, lambda: logs, clock_ms=clock, runner=job)
    manager.offload_filter = offloader.wants  # as LogCleaner wires them
    return Setup(log_dir, log, manager, offloader, clock, job)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    return build_log(tmp_path / "src", 11)


@pytest.fixture
def setup(built: Path, tmp_path: Path) -> Iterator[Setup]:
    s = make_setup(copy_log_dir(built, tmp_path / "a"), 11)
    yield s
    s.close()


def files_of(log_dir: Path) -> dict[str, bytes]:
    return segment_files(log_dir / TP.dir_name)


def checkpoint_of(log_dir: Path) -> int | None:
    path = log_dir / CLEANER_OFFSET_CHECKPOINT
    return OffsetCheckpointFile(path).read().get(TP) if path.exists() else None


def assert_aborted(s: Setup, before: dict[str, bytes], reason: str) -> None:
    status = s.offloader.status()[str(TP)]
    assert status["state"] == "failed" and reason in status["reason"], status
    assert s.manager.cleaning_state(TP) is None  # resumed
    assert not (s.log_dir / STAGING_DIR_NAME).exists()
    s.log.close()
    assert files_of(s.log_dir) == before
    assert checkpoint_of(s.log_dir) is None


# ---------------------------------------------------------------------------------------------- success
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_hand_off_leaves_the_log_byte_identical_to_the_in_process_cleaner(tmp_path: Path, seed: int) -> None:
    ref, copy = workload_copies(tmp_path, seed, "ref", "a")
    end = clean_log_dir(ref, compact(seed), None)
    s = make_setup(copy, seed)
    assert s.offloader.hand_off(s.log)
    status = s.offloader.status()[str(TP)]
    assert status["state"] == "done" and status["failures"] == 0 and status["reason"] == ""
    assert status["result"]["messages_read"] > status["result"]["messages_written"] > 0
    assert s.manager.cleaning_state(TP) is None
    assert s.manager.all_cleaner_checkpoints() == {TP: end}
    assert not (s.log_dir / STAGING_DIR_NAME).exists()
    s.log.close()
    assert files_of(s.log_dir) == files_of(ref)


def test_appends_and_rolls_during_the_job_survive(setup: Setup, tmp_path: Path) -> None:
    def append_meanwhile(_r: JobRequest) -> None:
        for i in range(5):
            append_kvs(setup.log, [(b"late-%d" % i, b"v")])
            if i == 2:
                setup.log.roll()

    setup.job.before = append_meanwhile
    end_before = setup.log.log_end_offset
    assert setup.offloader.hand_off(setup.log)
    late = [(r.key, r.offset) for r in read_log(setup.log) if r.key and r.key.startswith(b"late-")]
    assert late == [(b"late-%d" % i, end_before + i) for i in range(5)]
    assert setup.log.log_end_offset == end_before + 5


def test_the_job_request_is_the_round_a_cleaner_thread_would_take(setup: Setup) -> None:
    setup.offloader.hand_off(setup.log)
    (request,) = setup.job.requests
    offsets = cleanable_offsets(setup.log, None, NOW_MS)
    assert request.first_dirty_offset == offsets.first_dirty_offset == 0
    assert request.end_offset == setup.log.active_segment.base_offset
    assert request.now_ms == NOW_MS and request.master == "local[*]"
    assert request.staging.parent == setup.log_dir / STAGING_DIR_NAME / str(TP)
    args = request.args()
    assert args[:3] == ["spark-compact", "--log-dir", str(setup.log_dir.resolve())]
    assert f"segment.bytes={setup.log.config.segment_bytes}" in args


# ---------------------------------------------------------------------------------------------- aborts
def tamper_manifest(change: Callable[[dict[str, object]], None]) -> Hook:
    def after(request: JobRequest) -> None:
        path = request.staging / MANIFEST
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(json.dumps(doc))

    return after


def _input_crc(doc: dict[str, object]) -> None:
    doc["inputs"][1]["crc32c"] ^= 1  # type: ignore[index]


def _end_offset(doc: dict[str, object]) -> None:
    doc["end_offset"] = int(doc["end_offset"]) - 1  # type: ignore[call-overload]


def _now(doc: dict[str, object]) -> None:
    doc["now_ms"] = 5


def _partition(doc: dict[str, object]) -> None:
    doc["partition"] = "other-0"


def _drop_output(doc: dict[str, object]) -> None:
    doc["outputs"] = doc["outputs"][:-1]  # type: ignore[index]


def _corrupt_staged(request: JobRequest) -> None:
    manifest = read_manifest(request.staging)
    path = request.staging / SEGMENTS_DIR / manifest.outputs[0].files[0].name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _remove_manifest(request: JobRequest) -> None:
    (request.staging / MANIFEST).unlink()


def _fail(_request: JobRequest) -> None:
    raise OffloadError("the job exited with status 1: ValueError: boom")


@pytest.mark.parametrize(("hook", "reason"), [
    (tamper_manifest(_input_crc), "is not the file the job read"),
    (tamper_manifest(_end_offset), "not for the round asked: end_offset="),
    (tamper_manifest(_now), "not for the round asked: now_ms=5"),
    (tamper_manifest(_partition), "partition='other-0'"),
    (tamper_manifest(_drop_output), "do not replace its inputs"),
    (_corrupt_staged, "crc32c"),
    (_remove_manifest, "left no usable manifest"),
    (_fail, "ValueError: boom"),
], ids=["input-crc", "end-offset", "now", "partition", "outputs", "staged-file", "no-manifest", "job-failed"])
def test_a_failed_check_aborts_cleanly(setup: Setup, built: Path, hook: Hook, reason: str) -> None:
    before = files_of(built)  # closed, as the log will be when compared
    setup.job.after = hook
    assert not setup.offloader.hand_off(setup.log)
    assert_aborted(setup, before, reason)


def test_segments_changed_below_the_end_offset_abort(setup: Setup) -> None:
    def delete_first(_r: JobRequest) -> None:  # a log start offset moved past the first segment
        second = setup.log.segments.values()[1].base_offset
        setup.log.maybe_increment_log_start_offset(second)
        setup.log.delete_segments_below_start()

    setup.job.after = delete_first
    assert not setup.offloader.hand_off(setup.log)
    status = setup.offloader.status()[str(TP)]
    assert "changed meanwhile" in status["reason"] and status["state"] == "failed"
    assert not list((setup.log_dir / TP.dir_name).glob("*.cleaned"))


def test_failures_back_off_doubling_and_the_cleaner_threads_take_over(setup: Setup) -> None:
    setup.job.after = _fail
    ltc = LogToClean(setup.log, 0, setup.log.active_segment.base_offset)
    setup.manager.set_backlog(TP, Backlog(TP, 0, 1, 40, 5, 8, 1, 0, 1, NOW_MS))
    assert setup.offloader.wants(ltc)
    delays = []
    for _ in range(4):
        assert not setup.offloader.hand_off(setup.log)
        status = setup.offloader.status()[str(TP)]
        delays.append(status["retry_at_ms"] - setup.clock.now)
        assert not setup.offloader.wants(ltc)  # in backoff: a cleaner thread may take it
        assert setup.manager.grab_filthiest_compacted_log() is not None
        setup.manager.done_cleaning(TP, setup.log_dir, 0)
        setup.clock.now = status["retry_at_ms"]
        assert setup.offloader.wants(ltc)
    assert delays == [INITIAL_MS, 2 * INITIAL_MS, 3 * INITIAL_MS, 3 * INITIAL_MS]
    assert setup.offloader.status()[str(TP)]["failures"] == 4
    setup.job.after = _nothing
    assert setup.offloader.hand_off(setup.log)
    assert setup.offloader.status()[str(TP)]["failures"] == 0
    assert TP not in setup.manager.backlogs()


def test_a_paused_partition_is_resumed_to_its_own_pause_count(setup: Setup) -> None:
    seen: list[object] = []
    setup.manager.abort_and_pause_cleaning(TP)  # paused by someone else (the API)
    setup.job.before = lambda _r: seen.append(setup.manager.cleaning_state(TP))
    assert setup.offloader.hand_off(setup.log)
    assert seen == [Paused(2)] and setup.manager.cleaning_state(TP) == Paused(1)
    assert setup.offloader.candidates() == []  # paused: not handed off by the thread


# ---------------------------------------------------------------------------------------------- which logs
def test_wants_backlogs_past_the_crossover_and_the_dirty_bytes_threshold(setup: Setup, tmp_path: Path) -> None:
    log = setup.log
    ltc = LogToClean(log, 0, log.active_segment.base_offset)
    assert not setup.offloader.wants(ltc)
    setup.manager.set_backlog(TP, Backlog(TP, 0, 1, 40, 5, 8, 1, 0, 1, NOW_MS))
    assert setup.offloader.wants(ltc)
    assert setup.manager.grab_filthiest_compacted_log() is None  # the threads leave it to the offloader
    assert [c.log for c in setup.offloader.candidates()] == [log]
    logs = {TP: log}
    for passes, min_passes, wanted in ((5, 6, False), (6, 6, True), (2, 2, True)):  # the crossover (config.py)
        setup.manager.set_backlog(TP, Backlog(TP, 0, 1, 5 * passes, 5, passes, 1, 0, 1, NOW_MS))
        cfg = CleanerConfig.from_props({"log.cleaner.offload.enable": True,
                                        "log.cleaner.offload.backlog.min.passes": min_passes})
        assert Offloader(cfg, setup.manager, lambda: logs, clock_ms=setup.clock).wants(ltc) is wanted
    setup.manager.set_backlog(TP, None)
    for threshold, wanted in ((ltc.cleanable_bytes - 1, True), (ltc.cleanable_bytes, False)):
        cfg = CleanerConfig.from_props({"log.cleaner.offload.enable": True,
                                        "log.cleaner.offload.dirty.bytes.threshold": threshold})
        assert Offloader(cfg, setup.manager, lambda: logs, clock_ms=setup.clock).wants(ltc) is wanted
    disabled = Offloader(CleanerConfig.from_props({"log.cleaner.offload.dirty.bytes.threshold": 0}),
                         setup.manager, lambda: logs, clock_ms=setup.clock)
    assert not disabled.wants(ltc)


def test_staging_roots_and_leftovers(tmp_path: Path) -> None:
    a, b = tmp_path / "x" / "data", tmp_path / "y" / "data"
    for d in (a, b):
        d.mkdir(parents=True)
    manager = CleanerManager([a, b], dict)
    shared = CleanerConfig.from_props({"log.cleaner.offload.staging.dir": str(tmp_path / "staging")})
    off = Offloader(shared, manager, dict, clock_ms=Clock())
    ra, rb = off.staging_root(a), off.staging_root(b)
    assert ra != rb and ra.parent == rb.parent == tmp_path / "staging" and ra.name.startswith("data-")
    local = Offloader(CleanerConfig.from_props({}), manager, dict, clock_ms=Clock())
    assert local.staging_root(a) == a / STAGING_DIR_NAME
    for root in (ra, local.staging_root(b)):
        (root / "t-0" / "attempt" / SEGMENTS_DIR).mkdir(parents=True)
        write_manifest(root / "t-0" / "attempt", run_manifest_stub(tmp_path))
    off.remove_leftovers()
    local.remove_leftovers()
    assert not ra.exists() and not local.staging_root(b).exists()


def run_manifest_stub(tmp_path: Path) -> object:
    src = tmp_path / "stub-src"
    if not src.exists():
        build_log(src, 3, steps=30)
    plan = plan_from_args(build_parser().parse_args(
        ["spark-compact", "--log-dir", str(src / "data"), "--partition", str(TP), "--staging", str(tmp_path / "s"),
         "--now-ms", str(NOW_MS)]))
    return run_local_job(plan, tmp_path / "stub-staging")


def test_env_crash_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert env_crash_hook() is None
    monkeypatch.setenv(CRASH_ENV, "placed")
    hook = env_crash_hook()
    assert hook is not None
    hook("paused")  # another step: nothing happens


# ---------------------------------------------------------------------------------------------- external runner
def _external_job(s: Setup, write: Callable[[JobRequest], None]) -> threading.Thread:
    """Play the operator's CompactionJob: once the hand-off shows waiting-for-job, run its
    arguments (as the Job's pod would) and leave the result in the staging directory."""
    def play() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            entry = s.offloader.status().get(str(TP))
            if entry and entry["state"] == "waiting-for-job":
                args = build_parser().parse_args(entry["job_args"])
                request = JobRequest(args.log_dir, TP, args.staging, 0, 0, 0, 0, {}, "")
                assert str(args.staging) == entry["staging"]
                write(request)
                return
            time.sleep(0.02)

    t = threading.Thread(target=play)
    t.start()
    return t


def test_external_runner_waits_for_the_job_someone_else_runs(built: Path, tmp_path: Path) -> None:
    from logkeeper.cleaner.offload_job import ExternalRunner, runner_from_config

    assert isinstance(runner_from_config("external", ""), ExternalRunner)
    s = make_setup(copy_log_dir(built, tmp_path / "a"), 11)
    s.offloader.runner = ExternalRunner()
    clean_log_dir(copy_log_dir(built, tmp_path / "ref"), compact(11), None)

    def job(request: JobRequest) -> None:
        args = build_parser().parse_args(s.offloader.status()[str(TP)]["job_args"])
        run_local_job(plan_from_args(args), request.staging)

    player = _external_job(s, job)
    assert s.offloader.hand_off(s.log)
    player.join()
    assert s.offloader.status()[str(TP)]["state"] == "done"
    s.log.close()
    assert files_of(s.log_dir) == files_of(tmp_path / "ref")


def test_external_runner_takes_the_jobs_failure_and_times_out(built: Path, tmp_path: Path) -> None:
    from logkeeper.cleaner.offload_job import ExternalRunner
    from logkeeper.cleaner.offload_manifest import write_failure

    before = files_of(built)  # closed, as the log will be when compared
    s = make_setup(copy_log_dir(built, tmp_path / "a"), 11)
    s.offloader.runner = ExternalRunner()
    player = _external_job(s, lambda r: write_failure(r.staging, "ValueError: the executor ran out of memory"))
    assert not s.offloader.hand_off(s.log)
    player.join()
    assert_aborted(s, before, "the job failed: ValueError: the executor ran out of memory")

    t = make_setup(copy_log_dir(built, tmp_path / "b"), 11, **{"log.cleaner.offload.timeout.ms": 1000})
    t.offloader.runner = ExternalRunner()
    assert not t.offloader.hand_off(t.log)  # nobody runs the job
    assert_aborted(t, before, "within 1 s")


def test_a_new_attempt_keeps_the_verdict_of_the_one_before() -> None:
    """The operator may read the status only after a newer hand-off of the partition started: the
    ended attempt's verdict stays readable as ``previous`` (compaction.HandOff.of uses it)."""
    done = OffloadStatus(state="done", attempt="a1", finished_ms=5, result={"keys": 3})
    assert done.verdict() == {"attempt": "a1", "state": "done", "reason": "", "finished_ms": 5, "result": {"keys": 3}}
    assert OffloadStatus(state="waiting-for-job", attempt="a2").verdict() == {}  # still running: no verdict
    assert OffloadStatus().verdict() == {}
    newer = replace(done, state="waiting-for-job", attempt="a2", previous=done.verdict())
    assert newer.to_dict()["previous"]["attempt"] == "a1" and newer.to_dict()["previous"]["state"] == "done"
