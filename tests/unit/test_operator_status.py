"""The status model: a sidecar's /v1/status + the pod -> conditions, summary, events."""

from __future__ import annotations

from typing import Any

from logkeeper_operator.status import PodState, build_status, invalid_status, is_ready, merge_conditions

RUNNING = PodState(True, "Running", True, "10.0.0.1")


def part(topic: str, p: int, **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"topic": topic, "partition": p, "log_dir": "/data/d0/log", "size_bytes": 100,
                         "log_start_offset": 0, "log_end_offset": 10, "compacted": True, "dirty_ratio": 0.25,
                         "cleaning_state": "none", "last_round": None, "uncleanable": None, "backlog": False,
                         "backlog_detail": None}
    d.update(over)
    return d


def sidecar(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"ready": True,
                         "log_dirs": [{"path": "/data/d0/log", "online": True, "error": None}],
                         "partitions": [part("a", 0), part("a", 1, cleaning_state="in-progress", dirty_ratio=0.7,
                                                           last_round={"finished_ms": 5}),
                                        part("b", 0, compacted=False, dirty_ratio=None)],
                         "cleaner": {"threads": 1, "alive_threads": 1}}
    d.update(over)
    return d


def cond(status: dict[str, Any], t: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == t)


def test_healthy_cleaning() -> None:
    st, events = build_status(sidecar(), RUNNING, None, "T1")
    # the handlers' (once they applied the spec): a status pass before them must not make the
    # periodic reconcile take the LogVolume as settled
    assert "observedGeneration" not in st
    assert st["summary"] == {"partitions": 3, "compacted": 2, "cleaning": 1, "maxDirtyRatio": "0.70", "backlogs": 0,
                             "offlineDirs": 0, "offlinePartitions": 0, "uncleanable": 0,
                             "sizeBytes": 300}
    assert st["cleaningState"] == "cleaning 1/2"
    assert cond(st, "Ready")["status"] == "True" and cond(st, "Cleaning")["status"] == "True"
    assert cond(st, "Degraded")["status"] == "False"
    a1 = next(p for p in st["partitions"] if p["partition"] == "a-1")
    assert a1["lastCleanedTime"] == "1970-01-01T00:00:00Z"  # finished_ms 5, as RFC 3339
    assert a1["cleaningState"] == "in-progress" and a1["dirtyRatio"] == 0.7
    assert {(e.type, e.reason) for e in events} == {("Normal", "SidecarReady"), ("Normal", "CleaningInProgress")}
    # no nulls in the merge patch: a null deletes the key, and the stored status never equals the patch
    b0 = next(p for p in st["partitions"] if p["partition"] == "b-0")
    assert "dirtyRatio" not in b0 and "uncleanable" not in b0 and "lastCleanedTime" not in b0
    assert st["lastSeenTime"] == "T1"
    assert cond(st, "Cleaning")["message"] == "cleaning a-1" and "cleaningProgress" not in a1


def test_a_running_round_shows_how_far_it_has_come() -> None:
    running = {"phase": "cleaning", "done_bytes": 30, "total_bytes": 40, "percent": 75, "elapsed_ms": 9000}
    doc = sidecar(partitions=[part("a", 0), part("a", 1, cleaning_state="in-progress", round_progress=running)])
    st, events = build_status(doc, RUNNING, None, "T1")
    a1 = next(p for p in st["partitions"] if p["partition"] == "a-1")
    assert a1["cleaningProgress"] == "cleaning 75%"
    assert cond(st, "Cleaning")["message"] == "cleaning a-1 (cleaning 75%)"
    assert st["summary"]["cleaning"] == 1 and st["cleaningState"] == "cleaning 1/2"
    # the next poll, further on: the same condition (no new event), its message moved
    doc["partitions"][1]["round_progress"] = {**running, "percent": 90}
    again, events = build_status(doc, RUNNING, st["conditions"], "T2")
    assert cond(again, "Cleaning")["message"] == "cleaning a-1 (cleaning 90%)" and events == []


def test_degraded_offline_uncleanable_backlog() -> None:
    doc = sidecar(log_dirs=[{"path": "/data/d1/log", "online": False, "error": "EIO"}],
                  offline_partitions=[{"topic": "a", "partition": 2, "state": "offline", "log_dir": "/data/d1/log",
                                       "paths": ["/data/d1/log/a-2"], "error": "EIO"}],
                  partitions=[part("a", 0, uncleanable={"reason": "corrupt", "failures": 2, "retry_at_ms": 9}),
                              part("a", 1, backlog=True, backlog_detail={"first_dirty_offset": 7, "estimated_keys": 9,
                                                                         "passes": 3, "dirty_bytes": 1,
                                                                         "recopied_bytes": 2})],
                  cleaner={"threads": 2, "alive_threads": 1})
    st, events = build_status(doc, RUNNING, None, "T1")
    deg = cond(st, "Degraded")
    assert deg["status"] == "True" and deg["reason"] == "OfflineDirectories"
    assert "uncleanable: a-0 (corrupt)" in deg["message"] and "1 of 2 cleaner threads" in deg["message"]
    assert st["offlineDirs"] == [{"path": "/data/d1/log", "error": "EIO"}]
    assert st["offlinePartitions"] == [{"partition": "a-2", "logDir": "/data/d1/log", "error": "EIO"}]
    assert st["summary"]["offlinePartitions"] == 1 and "offline partitions: a-2" in deg["message"]
    assert st["uncleanablePartitions"] == [{"partition": "a-0", "reason": "corrupt", "failures": 2}]
    assert st["backlogs"][0]["partition"] == "a-1" and st["backlogs"][0]["firstDirtyOffset"] == 7
    assert st["cleaningState"] == "idle"
    assert ("Warning", "OfflineDirectories") in {(e.type, e.reason) for e in events}


def test_pod_and_sidecar_not_there() -> None:
    st, _ = build_status(None, PodState(False), None, "T")
    assert cond(st, "Ready")["reason"] == "PodMissing" and st["cleaningState"] == "unknown"
    st, _ = build_status(None, PodState(True, "Pending"), None, "T")
    assert cond(st, "Ready")["reason"] == "PodPending"
    st, _ = build_status(None, PodState(True, "Failed"), None, "T")
    assert cond(st, "Ready")["reason"] == "PodNotRunning"
    st, _ = build_status(None, RUNNING, None, "T", error="connection refused")
    assert cond(st, "Ready")["reason"] == "SidecarUnreachable" and "refused" in cond(st, "Ready")["message"]
    st, _ = build_status(sidecar(ready=False), RUNNING, None, "T")
    assert cond(st, "Ready")["reason"] == "SidecarStarting"


def test_transition_times_and_events() -> None:
    first, _ev1 = build_status(sidecar(), RUNNING, None, "T1")
    again, ev2 = build_status(sidecar(), RUNNING, first["conditions"], "T2")
    assert ev2 == [] and cond(again, "Ready")["lastTransitionTime"] == "T1"
    down, ev3 = build_status(None, RUNNING, again["conditions"], "T3", error="x")
    assert cond(down, "Ready")["lastTransitionTime"] == "T3"
    assert [(e.type, e.reason) for e in ev3 if e.reason == "SidecarUnreachable"] == [("Warning", "SidecarUnreachable")]
    assert cond(down, "Ready")["status"] == "Unknown"
    assert is_ready(again["conditions"]) and not is_ready(down["conditions"])


def test_invalid_status_keeps_other_conditions() -> None:
    ok, _ = build_status(sidecar(), RUNNING, None, "T1")
    bad, events = invalid_status("spec.x: nope", 2, ok["conditions"], "T2")
    assert cond(bad, "Ready") == {"type": "Ready", "status": "False", "reason": "InvalidSpec",
                                  "message": "spec.x: nope", "lastTransitionTime": "T2"}
    assert cond(bad, "Cleaning")["status"] == "True"  # kept
    assert events[0].type == "Warning" and events[0].reason == "InvalidSpec"
    merged, ev = merge_conditions(bad["conditions"], [cond(bad, "Ready")], "T3")
    assert ev == [] and cond({"conditions": merged}, "Ready")["lastTransitionTime"] == "T2"


def test_a_normal_start_raises_no_warning() -> None:
    """Reconciling, the pod missing then pending, the sidecar starting, then ready: Normal events only."""
    conds: Any = None
    seen: list[tuple[str, str]] = []
    booting = PodState(True, "Running", False, "10.0.0.1")  # its startup probe not passed yet
    for doc, pod in ((None, PodState(False)), (None, PodState(True, "Pending")), (None, booting),
                     (sidecar(ready=False), RUNNING), (sidecar(), RUNNING)):
        st, events = build_status(doc, pod, conds, "T", error="connection refused")
        conds = st["conditions"]
        seen += [(e.type, e.reason) for e in events]
    assert {t for t, _ in seen} == {"Normal"}, seen
    _, events = invalid_status("children applied", 1, None, "T", reason="Reconciling")
    assert [e.type for e in events] == ["Normal"]
    # trouble is a Warning: a failed pod, a refused spec
    _, events = build_status(None, PodState(True, "Failed"), conds, "T")
    assert ("Warning", "PodNotRunning") in {(e.type, e.reason) for e in events}


def test_an_unreachable_sidecar_marks_the_status_stale_with_the_last_seen_time() -> None:
    seen, _ = build_status(sidecar(), RUNNING, None, "2030-01-01T00:00:00Z")
    assert seen["lastSeenTime"] == "2030-01-01T00:00:00Z"
    stale, _ = build_status(None, RUNNING, seen["conditions"], "2030-01-01T00:05:00Z", error="timed out",
                            last_seen=seen["lastSeenTime"])
    ready = cond(stale, "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "SidecarUnreachable"
    assert "2030-01-01T00:00:00Z" in ready["message"]
    # the last seen figures are left as they were (the merge patch names none of them)
    assert "summary" not in stale and "lastSeenTime" not in stale and "partitions" not in stale


def test_a_sidecar_not_answering_before_its_startup_probe_passed_is_starting() -> None:
    """Regression (issue 20, a fresh-clone make e2e): a status pass that found the new pod Running
    before its sidecar listened warned SidecarUnreachable "never seen"."""
    booting = PodState(True, "Running", False, "10.0.0.1", started=False)
    st, events = build_status(None, booting, None, "T1", error="connection refused")
    ready = cond(st, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SidecarStarting") and "refused" in ready["message"]
    assert [e.type for e in events if e.reason == "SidecarStarting"] == ["Normal"]
    # started (its /healthz answered) and silent now: trouble, even when it was never seen
    up = PodState(True, "Running", False, "10.0.0.1", started=True)
    st, events = build_status(None, up, st["conditions"], "T2", error="timed out")
    assert cond(st, "Ready")["reason"] == "SidecarUnreachable"
    assert ("Warning", "SidecarUnreachable") in {(e.type, e.reason) for e in events}
