"""The CompactionJob state machine (pure: the resource's status and what was observed in, the
next step out; the handler carries the step out and records it, so every step is safe to repeat
and an operator restart resumes where the status says).

Who does what. The sidecar owns every hand-off of a backlog (logkeeper/cleaner/offload.py, with
``log.cleaner.offload.runner: external``, which the operator renders): it pauses the partition's
cleaning, fixes the round, makes a staging directory on the volume and reports the hand-off in its
/v1/status as ``waiting-for-job`` with an attempt id and the ``logkeeper spark-compact`` arguments.
The operator turns that into a CompactionJob and runs those arguments in a batch Job that mounts
the volume where the sidecar has it. The job leaves ``manifest.json`` (or ``failure.json``) in the
staging directory; the sidecar sees it, validates the output against its live segments, swaps it
in with its crash-safe steps, resumes cleaning and reports the hand-off ``done`` (or ``failed``,
with the reason). The operator never touches the data: it launches, watches and reports.

    Pending --submit--> Running --sidecar: done--> Succeeded
       ^                   |  \\--sidecar: failed, or it gave the hand-off up--> Failed
       +------retry--------+ the Job failed or ran past timeoutSeconds, while the sidecar
                           |   still waits (attempts < maxAttempts)
                           +--> Failed (attempts used up)

- ``submit``: attempt n = attempts + 1; the Job is ``<cj>-a<n>`` and that name is the submission
  id, written to the status before anything waits on it. A Job that exists already (the operator
  restarted after creating it) is adopted, never created twice.
- A Job that succeeded only means the output is staged: the CompactionJob succeeds when the
  sidecar says it swapped it in.
- Bounds: each attempt has timeoutSeconds (the Job's activeDeadlineSeconds, and the operator's own
  check SWEEP_GRACE_S later in case no controller enforces it); at most maxAttempts attempts; the
  sidecar's own log.cleaner.offload.timeout.ms (rendered as maxAttempts x timeoutSeconds plus a
  minute) bounds the whole hand-off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
PHASES = (PENDING, RUNNING, SUCCEEDED, FAILED)
TERMINAL = (SUCCEEDED, FAILED)
SWEEP_GRACE_S = 60

# The sidecar's hand-off states (offload.py) as the operator reads them.
WAITING = "waiting-for-job"


@dataclass(frozen=True)
class JobState:
    """What the operator saw of an attempt's batch/v1 Job."""

    exists: bool
    succeeded: bool = False
    failed: bool = False
    reason: str = ""

    @classmethod
    def of(cls, job: Mapping[str, Any] | None) -> JobState:
        if job is None:
            return cls(False)
        st = job.get("status") or {}
        for c in st.get("conditions") or []:
            if c.get("status") != "True":
                continue
            if c.get("type") == "Complete":
                return cls(True, succeeded=True)
            if c.get("type") == "Failed":
                return cls(True, failed=True, reason=f"{c.get('reason', 'Failed')}: {c.get('message', '')}".strip())
        if (st.get("failed") or 0) > 0 and not st.get("active"):
            return cls(True, failed=True, reason="the pod failed")
        return cls(True)


@dataclass(frozen=True)
class HandOff:
    """What the sidecar says of the hand-off a CompactionJob serves (its ``offload`` entry of the
    partition in /v1/status). ``known`` is False when the sidecar could not be asked."""

    known: bool
    state: str = ""
    reason: str = ""
    result: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, entry: Mapping[str, Any] | None, hand_off: str, reachable: bool) -> HandOff:
        if not reachable:
            return cls(False)
        if entry and entry.get("attempt") != hand_off and (entry.get("previous") or {}).get("attempt") == hand_off:
            entry = entry["previous"]  # a newer hand-off started after this one ended: its verdict stands
        if not entry or entry.get("attempt") != hand_off:
            return cls(True, "gone", "the sidecar no longer has this hand-off (it restarted, or gave it up)")
        return cls(True, str(entry.get("state") or ""), str(entry.get("reason") or ""), entry.get("result") or {})


@dataclass(frozen=True)
class Step:
    kind: str  # submit | wait | succeed | retry | fail | done
    message: str
    attempt: int = 0


def next_step(status: Mapping[str, Any], job: JobState, sidecar: HandOff, now_s: float, timeout_s: int,
              max_attempts: int) -> Step:
    phase = status.get("phase") or PENDING
    attempts = int(status.get("attempts") or 0)
    if phase in TERMINAL:
        return Step("done", f"the job is {phase}", attempts)
    # The sidecar's verdict ends the job whatever the Job's state.
    if sidecar.known and sidecar.state == "done":
        return Step("succeed", _done_message(sidecar.result or {}), attempts)
    if sidecar.known and sidecar.state in ("failed", "gone"):
        return Step("fail", f"the sidecar ended the hand-off: {sidecar.reason or sidecar.state}", attempts)
    if phase == PENDING:
        if attempts >= max_attempts:
            return Step("fail", f"{attempts} attempts used (maxAttempts {max_attempts})", attempts)
        return Step("submit", f"attempt {attempts + 1} of {max_attempts}", attempts + 1)
    # Running
    if not job.exists:
        return Step("submit", f"attempt {attempts}: its Job is missing, creating it", attempts)
    if job.succeeded:
        return Step("wait", f"attempt {attempts}: output staged; the sidecar validates and swaps it in", attempts)
    started = status.get("attemptStartedAt")
    overdue = isinstance(started, (int, float)) and now_s - started > timeout_s + SWEEP_GRACE_S
    if job.failed or overdue:
        why = job.reason if job.failed else f"ran past timeoutSeconds ({timeout_s} s)"
        if attempts >= max_attempts:
            return Step("fail", f"attempt {attempts} failed ({why}); {max_attempts} attempts used", attempts)
        return Step("retry", f"attempt {attempts} failed ({why}); retrying", attempts)
    return Step("wait", f"attempt {attempts} is running", attempts)


def _done_message(result: Mapping[str, Any]) -> str:
    figures = ", ".join(f"{k} {result[k]:,}" for k in ("bytes_read", "bytes_written", "keys") if
                        isinstance(result.get(k), int))
    return "the sidecar swapped the compacted segments in" + (f" ({figures})" if figures else "")
