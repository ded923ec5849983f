"""The CompactionJob state machine and the rule of one job a partition."""

from __future__ import annotations

from logkeeper_operator.compaction import SWEEP_GRACE_S, HandOff, JobState, next_step
from logkeeper_operator.jobs import may_submit

NO_JOB = JobState(False)
WAITING = HandOff(True, "waiting-for-job")


def step(status: dict[str, object], job: JobState = NO_JOB, now: float = 1000.0,
         timeout: int = 100, attempts: int = 2, sidecar: HandOff = WAITING) -> tuple[str, int]:
    s = next_step(status, job, sidecar, now, timeout, attempts)
    return s.kind, s.attempt


def test_walk() -> None:
    assert step({}) == ("submit", 1)
    running = {"phase": "Running", "attempts": 1, "attemptStartedAt": 990.0}
    assert step(running, JobState(True)) == ("wait", 1)
    assert step(running, JobState(False)) == ("submit", 1)  # resumed before its Job was made: same name
    assert step(running, JobState(True, succeeded=True)) == ("wait", 1)  # staged: the sidecar swaps it in
    assert step(running, JobState(True, succeeded=True), sidecar=HandOff(True, "swapping")) == ("wait", 1)
    assert step(running, JobState(True, succeeded=True), sidecar=HandOff(True, "done")) == ("succeed", 1)
    assert step(running, JobState(True), sidecar=HandOff(False)) == ("wait", 1)  # sidecar unreachable: wait
    assert step(running, JobState(True, failed=True, reason="x")) == ("retry", 1)
    assert step({"phase": "Pending", "attempts": 1}) == ("submit", 2)
    last = {"phase": "Running", "attempts": 2, "attemptStartedAt": 990.0}
    assert step(last, JobState(True, failed=True)) == ("fail", 2)
    assert step({"phase": "Pending", "attempts": 2}) == ("fail", 2)
    for terminal in ("Succeeded", "Failed"):
        assert step({"phase": terminal, "attempts": 1})[0] == "done"


def test_timeout_is_enforced_by_the_operator_too() -> None:
    running = {"phase": "Running", "attempts": 1, "attemptStartedAt": 0.0}
    assert step(running, JobState(True), now=100 + SWEEP_GRACE_S - 1) == ("wait", 1)
    assert step(running, JobState(True), now=100 + SWEEP_GRACE_S + 1) == ("retry", 1)


def test_job_state_of() -> None:
    assert JobState.of(None) == JobState(False)
    assert JobState.of({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}).succeeded
    failed = JobState.of({"status": {"conditions": [{"type": "Failed", "status": "True",
                                                     "reason": "DeadlineExceeded", "message": "too slow"}]}})
    assert failed.failed and "DeadlineExceeded" in failed.reason
    assert JobState.of({"status": {"failed": 1, "active": 0}}).failed
    assert not JobState.of({"status": {"active": 1}}).failed


def test_one_job_a_partition_and_cooldown() -> None:
    def job(phase: str | None, done: str | None = None, partition: int = 0) -> dict[str, object]:
        return {"spec": {"topic": "t", "partition": partition}, "status": {"phase": phase, "completionTime": done}}

    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert may_submit([], "t", 0, 600, now)
    assert not may_submit([job("Running")], "t", 0, 600, now)
    assert may_submit([job("Running", partition=1)], "t", 0, 600, now)
    assert not may_submit([job("Succeeded", "2023-11-14T22:10:00Z")], "t", 0, 600, now)
    assert may_submit([job("Succeeded", "2023-11-14T21:00:00Z")], "t", 0, 600, now)


def test_the_sidecars_verdict_ends_the_job() -> None:
    running = {"phase": "Running", "attempts": 1, "attemptStartedAt": 990.0}
    failed = HandOff(True, "failed", "the manifest's inputs are not the log's segments")
    assert step(running, JobState(True, succeeded=True), sidecar=failed) == ("fail", 1)
    assert step(running, JobState(True), sidecar=HandOff(True, "gone")) == ("fail", 1)
    # a Job that failed while the sidecar still waits is retried, not given up on
    assert step(running, JobState(True, failed=True), sidecar=WAITING) == ("retry", 1)


def test_hand_off_of_the_sidecars_entry() -> None:
    entry = {"state": "done", "attempt": "a1", "result": {"bytes_read": 10}}
    assert HandOff.of(entry, "a1", True).state == "done"
    assert HandOff.of(entry, "a2", True).state == "gone"  # another attempt: this one is over
    # a newer hand-off already started when the operator looks: the one it serves ended done
    newer = {"state": "waiting-for-job", "attempt": "a3", "previous": entry}
    assert HandOff.of(newer, "a1", True) == HandOff(True, "done", "", {"bytes_read": 10})
    assert HandOff.of(newer, "a2", True).state == "gone"
    assert HandOff.of(None, "a1", True).state == "gone"
    assert not HandOff.of(entry, "a1", False).known
