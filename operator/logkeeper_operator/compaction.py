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
- Conditions (API conventions): Ready (the sidecar swapped the output in), Progressing (the job
  is on its way: Pending, PodPending, Running, AwaitingSwap; False when it is stuck: Unschedulable,
  AdmissionRejected, or ended) and Failed, all three with the same reason and message
  (``conditions``); what the attempt's pod is doing comes from the pod and the events of the Job
  and the pod (``attempt_pod``): a pod Pod Security refused never exists, only the Job's
  FailedCreate event says why.
- History: finished jobs of a LogVolume beyond its CleanerPolicy's history limits, or older than
  its ttlSecondsAfterFinished, are deleted (``expired``).
- Bounds: each attempt has timeoutSeconds (the Job's activeDeadlineSeconds, and the operator's own
  check SWEEP_GRACE_S later in case no controller enforces it); at most maxAttempts attempts; the
  sidecar's own log.cleaner.offload.timeout.ms (rendered as maxAttempts x timeoutSeconds plus a
  minute) bounds the whole hand-off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .times import epoch_of, rfc3339

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
    progress: Mapping[str, Any] | None = None  # the job's progress.json while it runs (cleaner/offload_progress.py)

    @classmethod
    def of(cls, entry: Mapping[str, Any] | None, hand_off: str, reachable: bool) -> HandOff:
        if not reachable:
            return cls(False)
        if entry and entry.get("attempt") != hand_off and (entry.get("previous") or {}).get("attempt") == hand_off:
            entry = entry["previous"]  # a newer hand-off started after this one ended: its verdict stands
        if not entry or entry.get("attempt") != hand_off:
            return cls(True, "gone", "the sidecar no longer has this hand-off (it restarted, or gave it up)")
        progress = entry.get("progress")
        return cls(True, str(entry.get("state") or ""), str(entry.get("reason") or ""), entry.get("result") or {},
                   progress if isinstance(progress, Mapping) else None)


def progress_status(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A CompactionJob's ``status.progress`` from the job's progress document (as the sidecar
    relays it; cleaner/offload_progress.py): the stage, its units and bytes, the Spark UI, and ``summary``
    (the PROGRESS column: "rewrite 3/6, 41%"). None when the job has written none yet."""
    if not doc or not doc.get("stage"):
        return None

    def num(key: str) -> int:
        v = doc.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0
    done, total, read, size = num("tasks_done"), num("tasks_total"), num("bytes_done"), num("bytes_total")
    summary = str(doc["stage"]) + (f" {done}/{total}" if total else "") + (f", {100 * read // size}%" if size else "")
    out: dict[str, Any] = {"stage": str(doc["stage"]), "tasksDone": done, "tasksTotal": total, "bytesDone": read,
                           "bytesTotal": size, "bytesWritten": num("bytes_written"), "summary": summary}
    if doc.get("spark_ui"):
        out["sparkUI"] = str(doc["spark_ui"])
    if num("updated_ms"):
        out["updatedTime"] = rfc3339(num("updated_ms") / 1000)
    return out


@dataclass(frozen=True)
class AttemptPod:
    """What the current attempt's pod is doing: a condition reason and message."""

    reason: str  # PodNotCreated | AdmissionRejected | Unschedulable | PodPending | Running | Finished
    message: str = ""

    @property
    def stuck(self) -> bool:
        return self.reason in ("AdmissionRejected", "Unschedulable")


def _newest_warning(events: Sequence[Mapping[str, Any]], kind: str, name: str, reasons: tuple[str, ...] = ()) -> str:
    mine = [e for e in events if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"
            and (not reasons or e.get("reason") in reasons)]
    mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return f"{mine[-1].get('reason')}: {mine[-1].get('message', '')}" if mine else ""


def attempt_pod(job_name: str, pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]) -> AttemptPod:
    """The attempt's pod from the Job's pods and the namespace's events (pure)."""
    if not pods:
        rejected = _newest_warning(events, "Job", job_name, ("FailedCreate",))
        if rejected:  # admission (Pod Security, a quota, a webhook) refused the pod: it never exists
            return AttemptPod("AdmissionRejected", rejected)
        return AttemptPod("PodNotCreated", "the Job has not made its pod yet")
    pod = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    name = str((pod.get("metadata") or {}).get("name"))
    st = pod.get("status") or {}
    phase = st.get("phase") or "Pending"
    if phase == "Pending":
        for c in st.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                return AttemptPod("Unschedulable", f"pod {name}: {c.get('message', '')}")
        waiting = [(cs.get("state") or {}).get("waiting") or {} for cs in st.get("containerStatuses") or []]
        why = next((f"{w.get('reason')}: {w.get('message', '')}" for w in waiting if w.get("reason")), "")
        why = why or _newest_warning(events, "Pod", name) or "scheduled, starting"
        return AttemptPod("PodPending", f"pod {name}: {why}")
    if phase == "Running":
        return AttemptPod("Running", f"pod {name} is running")
    return AttemptPod("Finished", f"pod {name} is {phase}")


def conditions(phase: str, reason: str, message: str) -> list[dict[str, Any]]:
    """Ready, Progressing and Failed of a CompactionJob in ``phase``; one reason and message."""
    def cond(ctype: str, ok: bool) -> dict[str, Any]:
        return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}
    moving = phase not in TERMINAL and reason not in ("AdmissionRejected", "Unschedulable")
    return [cond("Ready", phase == SUCCEEDED), cond("Progressing", moving), cond("Failed", phase == FAILED)]


def expired(jobs: Sequence[Mapping[str, Any]], ttl_s: int, keep_succeeded: int, keep_failed: int,
            now_s: float) -> list[str]:
    """Names of finished CompactionJobs (of one LogVolume) to delete: those ended more than ttl_s
    ago, and those beyond the newest keep_succeeded (keep_failed) of their phase."""
    out: list[str] = []
    for phase, keep in ((SUCCEEDED, keep_succeeded), (FAILED, keep_failed)):
        done = [(epoch_of((j.get("status") or {}).get("completionTime")) or 0.0, str(j["metadata"]["name"]))
                for j in jobs if (j.get("status") or {}).get("phase") == phase
                and not j["metadata"].get("deletionTimestamp")]
        done.sort(reverse=True)
        out += [name for i, (ended, name) in enumerate(done) if i >= keep or now_s - ended > ttl_s]
    return sorted(out)


@dataclass(frozen=True)
class Step:
    kind: str  # submit | wait | succeed | retry | fail | done
    message: str
    attempt: int = 0
    reason: str = ""  # the conditions' reason of a succeed or fail


def next_step(status: Mapping[str, Any], job: JobState, sidecar: HandOff, now_s: float, timeout_s: int,
              max_attempts: int) -> Step:
    phase = status.get("phase") or PENDING
    attempts = int(status.get("attempts") or 0)
    if phase in TERMINAL:
        return Step("done", f"the job is {phase}", attempts)
    # The sidecar's verdict ends the job whatever the Job's state.
    if sidecar.known and sidecar.state == "done":
        return Step("succeed", _done_message(sidecar.result or {}), attempts, "Succeeded")
    if sidecar.known and sidecar.state in ("failed", "gone"):
        return Step("fail", f"the sidecar ended the hand-off: {sidecar.reason or sidecar.state}", attempts,
                    "HandOffEnded")
    if phase == PENDING:
        if attempts >= max_attempts:
            return Step("fail", f"{attempts} attempts used (maxAttempts {max_attempts})", attempts,
                        "AttemptsExhausted")
        return Step("submit", f"attempt {attempts + 1} of {max_attempts}", attempts + 1)
    # Running
    if not job.exists:
        return Step("submit", f"attempt {attempts}: its Job is missing, creating it", attempts)
    if job.succeeded:
        return Step("wait", f"attempt {attempts}: output staged; the sidecar validates and swaps it in", attempts)
    # attemptStartTime (RFC 3339); attemptStartedAt: Unix seconds, as older operators wrote it
    started = epoch_of(status.get("attemptStartTime") or status.get("attemptStartedAt"))
    overdue = started is not None and now_s - started > timeout_s + SWEEP_GRACE_S
    if job.failed or overdue:
        why = job.reason if job.failed else f"ran past timeoutSeconds ({timeout_s} s)"
        if attempts >= max_attempts:
            return Step("fail", f"attempt {attempts} failed ({why}); {max_attempts} attempts used", attempts,
                        "AttemptsExhausted")
        return Step("retry", f"attempt {attempts} failed ({why}); retrying", attempts)
    return Step("wait", f"attempt {attempts} is running", attempts)


def _done_message(result: Mapping[str, Any]) -> str:
    figures = ", ".join(f"{k} {result[k]:,}" for k in ("bytes_read", "bytes_written", "keys") if
                        isinstance(result.get(k), int))
    return "the sidecar swapped the compacted segments in" + (f" ({figures})" if figures else "")
