"""Issue 20 against the in-memory API: nothing waits for the operator to be deleted, the periodic
reconcile repairs drift and says so, CompactionJobs report conditions, are cancelled when deleted
(also by an operator that restarted), and are pruned when finished."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from logkeeper_operator import handlers, jobs, periodic, reconcile
from logkeeper_operator.compaction import attempt_pod, conditions, expired, progress_status
from logkeeper_operator.names import FINALIZER, KOPF_FINALIZER
from tests.operator_fakes import FakeKube, FakeSidecar

ARGS = ["spark-compact", "--log-dir", "/data/d0/log", "--partition", "t-0", "--staging",
        "/data/d0/log/.logkeeper-staging/t-0/0123456789ab", "--master", "local[*]"]


def lv_body(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "logkeeper.io/v1alpha1", "kind": "LogVolume",
            "spec": {"volumes": [{"id": "d0", "size": "1Gi", "deleteClaim": True}],
                     "topics": [{"name": "t", "partitions": 1, "configs": {"cleanup.policy": ["compact"]}}]},
            "metadata": {"name": "orders", "namespace": "ns", "uid": "u1", "generation": 2, **meta},
            "status": {"observedGeneration": 2}}


def cj_body(name: str = "cj", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "logkeeper.io/v1alpha1", "kind": "CompactionJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "c1", "generation": 1, "finalizers": [FINALIZER],
                         "labels": {"logkeeper.io/logvolume": "orders"}},
            "spec": {"logVolume": "orders", "topic": "t", "partition": 0, "volumeId": "d0", "logDir": "/data/d0/log",
                     "handOff": "0123456789ab", "args": ARGS, "staging": ARGS[6], "maxAttempts": 2,
                     "timeoutSeconds": 60}, "status": status}


def test_no_handler_makes_kopf_add_its_finalizer() -> None:
    """kopf adds its finalizer for timers, daemons and non-optional deletion handlers: none left."""
    assert handlers.logvolume_changed  # registered at import
    registry = kopf.get_default_registry()
    spawning = list(registry._spawning.get_all_handlers())
    assert spawning == []  # no timers, no daemons
    for h in registry._changing.get_all_handlers():
        assert not h.requires_finalizer, h.id


def test_drift_is_repaired_and_reported() -> None:
    kube = FakeKube()
    lv = kube.put(lv_body())
    reconcile.apply_logvolume(kube, lv)
    events: list[tuple[str, str, str]] = []
    kube_events = lambda: [(e["type"], e["reason"], e["message"]) for e in kube.list("v1", "Event", "ns")]  # noqa: E731
    periodic.reconcile_pass(kube, ["ns"])
    assert kube_events() == []  # nothing drifted: no event, no write
    del kube.objects[("StatefulSet", "ns", "orders")]
    svc = kube.objects[("Service", "ns", "orders")]
    svc["spec"]["selector"] = {"app": "someone-else"}
    del kube.objects[("ConfigMap", "ns", "orders-config")]
    periodic.reconcile_pass(kube, ["ns"])
    assert ("StatefulSet", "ns", "orders") in kube.objects and ("ConfigMap", "ns", "orders-config") in kube.objects
    assert kube.objects[("Service", "ns", "orders")]["spec"]["selector"]["app.kubernetes.io/instance"] == "orders"
    events = kube_events()
    assert {e[:2] for e in events} == {("Normal", "Repaired")}
    messages = " | ".join(e[2] for e in events)
    assert "StatefulSet orders created (it was missing)" in messages
    assert "Service orders restored (it had been changed)" in messages and "ConfigMap orders-config created" in messages


def test_drift_pass_leaves_unsettled_and_refused_logvolumes_to_the_handlers() -> None:
    kube = FakeKube()
    kube.put({**lv_body(), "status": {"observedGeneration": 1}})  # a spec change not yet applied
    periodic.reconcile_pass(kube, ["ns"])
    assert ("StatefulSet", "ns", "orders") not in kube.objects
    refused = {**lv_body(), "status": {"observedGeneration": 2, "conditions": [
        {"type": "Ready", "status": "False", "reason": "InvalidSpec"}]}}
    kube.put(refused)
    periodic.reconcile_pass(kube, ["ns"])
    assert ("StatefulSet", "ns", "orders") not in kube.objects


def test_a_new_logvolume_is_no_drift() -> None:
    """Regression (issue 20, the real node): a status pass that ran before the create handler wrote
    observedGeneration, so the next reconcile pass took the new LogVolume as settled, created its
    children and reported each as "created (it was missing)"."""
    kube = FakeKube()
    body = lv_body()
    del body["status"]
    kube.put(body)
    periodic.status_pass(kube, ["ns"])  # no pod yet: PodMissing
    assert "observedGeneration" not in kube.get("logkeeper.io/v1alpha1", "LogVolume", "ns", "orders")["status"]
    periodic.reconcile_pass(kube, ["ns"])
    assert kube.get("apps/v1", "StatefulSet", "ns", "orders") is None  # the handler's to create
    assert [e for e in kube.list("v1", "Event", "ns") if e["reason"] == "Repaired"] == []


def test_pod_state_reads_whether_the_sidecar_started() -> None:
    pod = {"metadata": {"name": "orders-0"},
           "status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "False"}],
                      "containerStatuses": [{"name": "sidecar", "started": False}]}}
    assert not reconcile.pod_state(pod).started
    pod["status"]["containerStatuses"][0]["started"] = True
    assert reconcile.pod_state(pod).started


def test_kopfs_old_finalizer_is_stripped() -> None:
    kube = FakeKube()
    kube.put(lv_body(finalizers=[KOPF_FINALIZER, "someone.else/keep"]))
    periodic.reconcile_pass(kube, ["ns"])
    assert kube.objects[("LogVolume", "ns", "orders")]["metadata"]["finalizers"] == ["someone.else/keep"]
    done = cj_body(phase="Succeeded", completionTime="2030-01-01T00:00:00Z")
    kube.put({**done, "metadata": {**done["metadata"], "finalizers": [KOPF_FINALIZER]}})
    periodic.compaction_pass(kube, ["ns"], now_s=1893456000.0)
    assert not kube.objects[("CompactionJob", "ns", "cj")]["metadata"]["finalizers"]


def test_finalizer_only_while_the_job_is_unfinished() -> None:
    assert jobs.wanted_finalizers(cj_body(phase="Running")) is None
    bare = cj_body()
    bare["metadata"]["finalizers"] = []
    assert jobs.wanted_finalizers(bare) == [FINALIZER]
    assert jobs.wanted_finalizers(cj_body(phase="Succeeded")) == []
    assert jobs.wanted_finalizers(cj_body(phase="Failed")) == []


def _cluster(monkeypatch: pytest.MonkeyPatch, offload: dict[str, Any] | None) -> FakeKube:
    kube = FakeKube()
    lv = kube.put(lv_body())
    reconcile.apply_logvolume(kube, lv)
    kube.put({"kind": "Pod", "metadata": {"name": "orders-0", "namespace": "ns"}, "status": {
        "phase": "Running", "podIP": "10.1.1.1", "conditions": [{"type": "Ready", "status": "True"}]}})
    doc = {"ready": True, "log_dirs": [{"path": "/data/d0/log", "online": True}], "partitions": [
        {"topic": "t", "partition": 0, "log_dir": "/data/d0/log", "size_bytes": 1, "offload": offload}]}
    fake = FakeSidecar(doc, [])
    monkeypatch.setattr(reconcile, "SidecarClient", lambda url, token: fake)
    return kube


WAITING = {"state": "waiting-for-job", "attempt": "0123456789ab", "staging": ARGS[6], "job_args": ARGS}


def test_deleting_a_running_job_cancels_it_even_after_an_operator_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = _cluster(monkeypatch, WAITING)
    name = "orders-t-0-0123456789ab"  # the hand-off's CompactionJob
    kube.put(cj_body(name))
    periodic.compaction_pass(kube, ["ns"], now_s=100.0)
    assert ("Job", "ns", f"{name}-a1") in kube.objects
    # deleted while running: the API server only marks it (our finalizer); the operator was down
    kube.delete("logkeeper.io/v1alpha1", "CompactionJob", "ns", name)
    assert kube.objects[("CompactionJob", "ns", name)]["metadata"]["deletionTimestamp"]
    # a new operator process: nothing remembered, the pass lists and finalizes it
    periodic.compaction_pass(kube, ["ns"], now_s=200.0)
    assert ("CompactionJob", "ns", name) not in kube.objects  # gone: the finalizer was removed
    assert ("Job", "ns", f"{name}-a1") not in kube.objects  # its Spark Job stopped
    cancel = kube.objects[("Job", "ns", f"{name}-cancel")]
    assert cancel["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        ARGS[6], f"the CompactionJob {name} was deleted"]
    assert any(e["reason"] == "Cancelled" for e in kube.list("v1", "Event", "ns"))
    # the sidecar still reports the hand-off until it reads failure.json: no new CompactionJob meanwhile
    lv = kube.get("logkeeper.io/v1alpha1", "LogVolume", "ns", "orders")
    assert lv is not None
    periodic.status_pass(kube, ["ns"])
    assert not [k for k in kube.objects if k[0] == "CompactionJob"]


def test_deleting_a_job_of_a_deleted_logvolume_only_lets_it_go(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = _cluster(monkeypatch, WAITING)
    kube.put({**cj_body(phase="Running", attempts=1), "metadata": {
        **cj_body()["metadata"], "deletionTimestamp": "2030-01-01T00:00:00Z"}})
    del kube.objects[("LogVolume", "ns", "orders")]  # a namespace being deleted
    periodic.compaction_pass(kube, ["ns"], now_s=200.0)
    assert ("CompactionJob", "ns", "cj") not in kube.objects and ("Job", "ns", "cj-cancel") not in kube.objects


def test_conditions_follow_the_attempts_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = _cluster(monkeypatch, WAITING)
    kube.put(cj_body())
    periodic.compaction_pass(kube, ["ns"], now_s=100.0)
    st = kube.objects[("CompactionJob", "ns", "cj")]["status"]
    assert st["attemptStartTime"] == "1970-01-01T00:01:40Z" and st["startTime"] == "1970-01-01T00:01:40Z"
    assert {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]} == {
        "Ready": ("False", "Submitted"), "Progressing": ("True", "Submitted"), "Failed": ("False", "Submitted")}
    # Pod Security refused the pod: the Job's FailedCreate event is all there is
    kube.put({"kind": "Event", "type": "Warning", "reason": "FailedCreate",
              "metadata": {"name": "e1", "namespace": "ns"},
              "involvedObject": {"kind": "Job", "name": "cj-a1"},
              "message": 'Error creating: pods "cj-a1-x" is forbidden: violates PodSecurity "restricted:latest"'})
    periodic.compaction_pass(kube, ["ns"], now_s=101.0)
    cj = kube.objects[("CompactionJob", "ns", "cj")]
    prog = next(c for c in cj["status"]["conditions"] if c["type"] == "Progressing")
    assert prog["status"] == "False" and prog["reason"] == "AdmissionRejected" and "PodSecurity" in prog["message"]
    warnings = [e for e in kube.list("v1", "Event", "ns") if e.get("reportingComponent") and e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["AdmissionRejected"]
    periodic.compaction_pass(kube, ["ns"], now_s=102.0)  # still rejected: no second Warning
    assert len([e for e in kube.list("v1", "Event", "ns") if e.get("reason") == "AdmissionRejected"
                and e.get("reportingComponent")]) == 1


def test_the_jobs_progress_is_in_the_compactionjobs_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21: the job's progress.json, relayed by the sidecar's /v1/status, becomes
    status.progress (and the PROGRESS column's summary)."""
    running = {**WAITING, "state": "running", "progress": {
        "stage": "rewrite", "tasks_done": 3, "tasks_total": 6, "bytes_done": 410, "bytes_total": 1000,
        "bytes_written": 300, "spark_ui": "http://10.1.1.2:4040", "spark_stages": [], "updated_ms": 100_000}}
    kube = _cluster(monkeypatch, running)
    kube.put(cj_body())
    periodic.compaction_pass(kube, ["ns"], now_s=100.0)  # submits attempt 1
    periodic.compaction_pass(kube, ["ns"], now_s=101.0)  # waits: the progress shown
    st = kube.objects[("CompactionJob", "ns", "cj")]["status"]
    assert st["progress"] == {"stage": "rewrite", "tasksDone": 3, "tasksTotal": 6, "bytesDone": 410,
                              "bytesTotal": 1000, "bytesWritten": 300, "summary": "rewrite 3/6, 41%",
                              "sparkUI": "http://10.1.1.2:4040", "updatedTime": "1970-01-01T00:01:40Z"}
    # finished: the last progress seen mid-stage would be stale ("rewrite 3/6" on a Succeeded job)
    running.update(state="done", result={"bytes_read": 1000, "bytes_written": 300, "keys": 6})
    periodic.compaction_pass(kube, ["ns"], now_s=102.0)
    st = kube.objects[("CompactionJob", "ns", "cj")]["status"]
    assert st["phase"] == "Succeeded" and "progress" not in st, st
    assert progress_status({}) is None and progress_status({"stage": "planning"}) == {
        "stage": "planning", "tasksDone": 0, "tasksTotal": 0, "bytesDone": 0, "bytesTotal": 0, "bytesWritten": 0,
        "summary": "planning"}


def test_attempt_pod_reasons() -> None:
    pending = {"metadata": {"name": "p", "labels": {}}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes: pod affinity"}]}}
    seen = attempt_pod("j", [pending], [])
    assert seen.reason == "Unschedulable" and "pod affinity" in seen.message and seen.stuck
    pulling = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [
        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}
    assert attempt_pod("j", [pulling], []).reason == "PodPending"
    assert "ImagePullBackOff" in attempt_pod("j", [pulling], []).message
    assert attempt_pod("j", [], []).reason == "PodNotCreated"
    running = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert attempt_pod("j", [running], []).reason == "Running"
    assert [c["status"] for c in conditions("Succeeded", "Succeeded", "ok")] == ["True", "False", "False"]
    assert [c["status"] for c in conditions("Failed", "AttemptsExhausted", "x")] == ["False", "False", "True"]
    assert [c["status"] for c in conditions("Running", "Unschedulable", "x")] == ["False", "False", "False"]


def test_finished_jobs_are_pruned_by_ttl_and_history() -> None:
    def job(name: str, phase: str, ended: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"phase": phase, "completionTime": ended}}
    day = "2030-01-0{}T00:00:00Z"
    js = [job("s1", "Succeeded", day.format(1)), job("s2", "Succeeded", day.format(2)),
          job("s3", "Succeeded", day.format(3)), job("f1", "Failed", day.format(1)), job("f2", "Failed", day.format(2)),
          job("r", "Running", "")]
    now = 1893456000.0 + 3 * 86400  # 2030-01-04
    assert expired(js, 10 * 86400, 2, 5, now) == ["s1"]  # history: the newest 2 successes kept
    assert expired(js, 10 * 86400, 5, 1, now) == ["f1"]  # and the newest failure, each phase on its own
    assert expired(js, 2 * 86400 + 1, 5, 5, now) == ["f1", "s1"]  # TTL after finish
    assert "r" not in expired(js, 0, 0, 0, now)  # an unfinished job is never pruned


def test_prune_reads_the_cleaner_policys_limits() -> None:
    kube = FakeKube()
    kube.put({"kind": "CleanerPolicy", "metadata": {"name": "p", "namespace": "ns"},
              "spec": {"cleaner": {}, "compactionJobs": {"successfulJobsHistoryLimit": 0}}})
    lv = kube.put({**lv_body(), "spec": {**lv_body()["spec"], "cleanerPolicyRef": {"name": "p"}}})
    done = {**cj_body(phase="Succeeded", completionTime="2030-01-01T00:00:00Z")}
    done["metadata"]["finalizers"] = []
    kube.put(done)
    assert jobs.prune(kube, lv, [done], 1893456000.0 + 60) == ["cj"]
    assert ("CompactionJob", "ns", "cj") not in kube.objects


def test_prune_reads_the_failed_limit_apart_from_the_successful_one() -> None:
    kube = FakeKube()
    kube.put({"kind": "CleanerPolicy", "metadata": {"name": "p", "namespace": "ns"},
              "spec": {"cleaner": {}, "compactionJobs": {"failedJobsHistoryLimit": 0}}})
    lv = kube.put({**lv_body(), "spec": {**lv_body()["spec"], "cleanerPolicyRef": {"name": "p"}}})
    ended = "2030-01-01T00:00:00Z"
    failed = kube.put(cj_body("f", phase="Failed", completionTime=ended))
    succeeded = kube.put(cj_body("s", phase="Succeeded", completionTime=ended))
    # the failed one goes; the succeeded one stays under the default successfulJobsHistoryLimit (3)
    assert jobs.prune(kube, lv, [failed, succeeded], 1893456000.0 + 60) == ["f"]
    assert ("CompactionJob", "ns", "s") in kube.objects
