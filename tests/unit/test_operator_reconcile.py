"""The handlers' logic (reconcile.py) against an in-memory API and a fake sidecar: safe to
repeat, CleanerPolicy lookups, live topic changes, backlogs -> CompactionJobs, the job's steps."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from logkeeper_operator import jobs, reconcile
from logkeeper_operator.k8s import ApiError
from logkeeper_operator.names import KEY_SECRET
from logkeeper_operator.spec import SpecError
from tests.operator_fakes import FakeKube, FakeSidecar


def lv_body(**spec: Any) -> dict[str, Any]:
    s = {"volumes": [{"id": "d0", "size": "1Gi", "deleteClaim": True}],
         "topics": [{"name": "t", "partitions": 1, "configs": {"cleanup.policy": ["compact"]}}]}
    s.update(spec)
    return {"apiVersion": "logkeeper.io/v1alpha1", "kind": "LogVolume", "spec": s,
            "metadata": {"name": "orders", "namespace": "ns", "uid": "u1", "generation": 2}}


def test_apply_is_repeatable_and_keeps_the_token() -> None:
    kube = FakeKube()
    reconcile.apply_logvolume(kube, lv_body())  # type: ignore[arg-type]
    token = kube.objects[("Secret", "ns", "orders-token")]["data"]["token"]
    key = kube.objects[("Secret", "ns", KEY_SECRET)]["data"]["key"]
    kinds = sorted(k for k, _, _ in kube.objects)
    assert kinds == ["ConfigMap", "NetworkPolicy", "PersistentVolumeClaim", "Secret", "Secret", "Service",
                     "StatefulSet"]
    reconcile.apply_logvolume(kube, lv_body())  # type: ignore[arg-type]
    assert kube.objects[("Secret", "ns", "orders-token")]["data"]["token"] == token
    assert kube.objects[("Secret", "ns", KEY_SECRET)]["data"]["key"] == key
    assert sorted(k for k, _, _ in kube.objects) == kinds


def test_tokens_are_derived_per_volume_from_the_namespace_key_never_read_back() -> None:
    kube = FakeKube()
    reconcile.apply_logvolume(kube, lv_body())  # type: ignore[arg-type]
    other = lv_body()
    other["metadata"] = {**other["metadata"], "name": "billing", "uid": "u2"}
    reconcile.apply_logvolume(kube, other)  # type: ignore[arg-type]
    secret = kube.objects[("Secret", "ns", "orders-token")]
    stored = base64.b64decode(secret["data"]["token"]).decode()
    assert len(stored) >= 40 and secret["metadata"]["ownerReferences"][0]["uid"] == "u1"
    # what the operator sends the sidecar is what the Secret holds, computed (FakeKube.get refuses
    # to read a token Secret, as the chart's RBAC does)
    assert reconcile.token_of(kube, "ns", "orders") == stored  # type: ignore[arg-type]
    assert base64.b64decode(kube.objects[("Secret", "ns", "billing-token")]["data"]["token"]).decode() != stored
    key = kube.objects[("Secret", "ns", KEY_SECRET)]
    assert "ownerReferences" not in key["metadata"]  # shared by the namespace's LogVolumes
    # another namespace has its own key, so its tokens differ for the same name
    assert reconcile.token_of(kube, "ns2", "orders") != stored  # type: ignore[arg-type]


def test_apply_makes_the_network_policy_owned_by_the_logvolume(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGKEEPER_OPERATOR_NAMESPACE", "logkeeper-system")
    kube = FakeKube()
    reconcile.apply_logvolume(kube, lv_body())  # type: ignore[arg-type]
    np = kube.objects[("NetworkPolicy", "ns", "orders")]
    assert np["metadata"]["ownerReferences"][0] == {**np["metadata"]["ownerReferences"][0], "kind": "LogVolume",
                                                    "uid": "u1", "controller": True}
    ss = kube.objects[("StatefulSet", "ns", "orders")]
    assert np["spec"]["podSelector"]["matchLabels"] == ss["spec"]["selector"]["matchLabels"]
    operator = np["spec"]["ingress"][0]["from"][0]
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "logkeeper-system"}


def test_cleaner_policy_is_resolved_or_missing() -> None:
    kube = FakeKube()
    with pytest.raises(reconcile.PolicyMissing, match=r"spec\.cleanerPolicyRef\.name: CleanerPolicy 'p'"):
        reconcile.apply_logvolume(kube, lv_body(cleanerPolicyRef={"name": "p"}))  # type: ignore[arg-type]
    kube.objects[("CleanerPolicy", "ns", "p")] = {"spec": {"cleaner": {"log.cleaner.threads": 3}}}
    reconcile.apply_logvolume(kube, lv_body(cleanerPolicyRef={"name": "p"}))  # type: ignore[arg-type]
    assert "log.cleaner.threads: 3" in kube.objects[("ConfigMap", "ns", "orders-config")]["data"]["config.yaml"]
    kube.objects[("CleanerPolicy", "ns", "p")] = {"spec": {"cleaner": {"log.cleaner.threads": -2}}}
    with pytest.raises(SpecError, match=r"CleanerPolicy p spec\.cleaner\.log\.cleaner\.threads"):
        reconcile.apply_logvolume(kube, lv_body(cleanerPolicyRef={"name": "p"}))  # type: ignore[arg-type]


def test_shrinking_partitions_is_refused() -> None:
    with pytest.raises(SpecError, match="cannot shrink"):
        reconcile.apply_logvolume(FakeKube(), lv_body(), old_spec=lv_body(topics=[  # type: ignore[arg-type]
            {"name": "t", "partitions": 4}])["spec"])


ARGS = ["spark-compact", "--log-dir", "/data/d0/log", "--partition", "t-0", "--staging",
        "/data/d0/log/.logkeeper-staging/t-0/0123456789ab", "--master", "local[*]"]


def hand_off(state: str = "waiting-for-job", attempt: str = "0123456789ab", reason: str = "") -> dict[str, Any]:
    return {"state": state, "attempt": attempt, "staging": ARGS[6], "job_args": ARGS, "reason": reason,
            "result": {"bytes_read": 100, "bytes_written": 10} if state == "done" else {}}


def sidecar_doc(backlog: bool, offload: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {"topic": "t", "partition": 0, "log_dir": "/data/d0/log", "size_bytes": 1, "compacted": True,
         "dirty_ratio": 0.9, "cleaning_state": "none", "backlog": backlog,
         "backlog_detail": {"first_dirty_offset": 42, "estimated_keys": 10, "passes": 2} if backlog else None,
         "offload": offload}
    return {"ready": True, "log_dirs": [{"path": "/data/d0/log", "online": True}], "partitions": [p],
            "cleaner": {"threads": 1, "alive_threads": 1}}


def running_pod(kube: FakeKube) -> None:
    kube.objects[("Pod", "ns", "orders-0")] = {"metadata": {"name": "orders-0"}, "status": {
        "phase": "Running", "podIP": "10.1.1.1", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_poll_status_topics_and_hand_off(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    body = lv_body(topics=[{"name": "t", "partitions": 2}])
    reconcile.apply_logvolume(kube, body)  # type: ignore[arg-type]
    config = kube.objects[("ConfigMap", "ns", "orders-config")]["data"]["config.yaml"]
    assert "log.cleaner.offload.runner: external" in config  # the sidecar waits for the operator's jobs
    running_pod(kube)
    fake = FakeSidecar(sidecar_doc(backlog=True), [{"name": "t", "partitions": [0], "configs": {}}])
    monkeypatch.setattr(reconcile, "SidecarClient", lambda url, token: fake)
    def poll() -> list[str]:
        result = reconcile.poll_logvolume(kube, body)  # type: ignore[arg-type]
        assert result is not None and result.spec is not None and result.sidecar is not None
        return jobs.submit_hand_offs(kube, body, result.spec, result.sidecar)  # type: ignore[arg-type]

    result = reconcile.poll_logvolume(kube, body)  # type: ignore[arg-type]
    assert result is not None
    # a backlog alone is the sidecar's business; a hand-off waiting for a job becomes a CompactionJob
    assert result.status["summary"]["backlogs"] == 1 and poll() == []
    assert ("add_partitions", "t", 2) in fake.calls
    fake.doc = sidecar_doc(backlog=True, offload=hand_off())
    assert poll() == ["orders-t-0-0123456789ab"]
    cj = kube.objects[("CompactionJob", "ns", "orders-t-0-0123456789ab")]
    assert cj["spec"]["logDir"] == "/data/d0/log" and cj["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert cj["spec"]["args"] == ARGS and cj["spec"]["handOff"] == "0123456789ab"
    assert cj["spec"]["backlogBytes"] == 1  # the partition's size_bytes: sizes the Job's scratch
    assert poll() == ["orders-t-0-0123456789ab"]
    assert len([k for k in kube.objects if k[0] == "CompactionJob"]) == 1  # made once
    blocked = {**body, "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}]}}
    assert reconcile.poll_logvolume(kube, blocked) is None  # type: ignore[arg-type]


def test_hand_off_volume_is_named_by_the_position_of_its_log_dir() -> None:
    two = [{"id": "d0", "size": "1Gi"}, {"id": "d1", "size": "1Gi"}]
    spec = reconcile.parse_logvolume(lv_body(volumes=two)["spec"])
    dirs = [{"path": "/mnt/a/log"}, {"path": "/mnt/b/log/"}]  # wherever the pod's runtime put them
    assert reconcile.volume_of(spec, dirs, "/mnt/b/log").id == "d1"  # type: ignore[union-attr]
    assert reconcile.volume_of(spec, dirs, "/elsewhere") is None
    assert reconcile.volume_of(spec, dirs[:1], "/mnt/a/log") is None  # an old config: a dir short


def compaction_setup(monkeypatch: pytest.MonkeyPatch,
                     body: dict[str, Any]) -> tuple[FakeKube, FakeSidecar, dict[str, Any]]:
    """The LogVolume ``body`` applied with its pod running, a sidecar with a hand-off, and a new
    CompactionJob of that hand-off."""
    kube = FakeKube()
    reconcile.apply_logvolume(kube, body)  # type: ignore[arg-type]
    kube.objects[("LogVolume", "ns", "orders")] = body
    running_pod(kube)
    fake = FakeSidecar(sidecar_doc(backlog=True, offload=hand_off()), [])
    monkeypatch.setattr(reconcile, "SidecarClient", lambda url, token: fake)
    cj: dict[str, Any] = {"metadata": {"name": "cj", "namespace": "ns", "uid": "c1", "generation": 1},
                          "spec": {"logVolume": "orders", "topic": "t", "partition": 0, "volumeId": "d0",
                                   "logDir": "/data/d0/log", "handOff": "0123456789ab", "args": ARGS,
                                   "staging": ARGS[6], "maxAttempts": 2, "timeoutSeconds": 60}, "status": {}}
    return kube, fake, cj


def test_compaction_job_runs_until_the_sidecar_swapped(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, fake, cj = compaction_setup(monkeypatch, lv_body())
    tick = jobs.drive_compaction(kube, cj, now_s=100.0)  # type: ignore[arg-type]
    assert tick.step.kind == "submit" and tick.status["phase"] == "Running" and tick.status["submissionId"] == "cj-a1"
    assert kube.objects[("Job", "ns", "cj-a1")]["spec"]["template"]["spec"]["containers"][0]["command"] == \
        ["/usr/bin/tini", "--", "logkeeper", *ARGS]
    cj["status"].update(tick.status)
    assert jobs.drive_compaction(kube, cj, now_s=101.0).step.kind == "wait"  # type: ignore[arg-type]
    kube.objects[("Job", "ns", "cj-a1")]["status"] = {"conditions": [{"type": "Failed", "status": "True",
                                                                      "reason": "BackoffLimitExceeded"}]}
    tick = jobs.drive_compaction(kube, cj, now_s=102.0)  # type: ignore[arg-type]
    assert tick.status["phase"] == "Pending" and "retrying" in tick.status["message"]
    cj["status"].update(tick.status)
    tick = jobs.drive_compaction(kube, cj, now_s=103.0)  # type: ignore[arg-type]
    assert tick.status["submissionId"] == "cj-a2" and tick.status["attempts"] == 2
    cj["status"].update(tick.status)
    kube.objects[("Job", "ns", "cj-a2")]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    tick = jobs.drive_compaction(kube, cj, now_s=104.0)  # type: ignore[arg-type]
    assert tick.step.kind == "wait" and "validates" in tick.status["message"]  # staged, not yet swapped
    fake.doc = sidecar_doc(backlog=False, offload=hand_off("done"))
    tick = jobs.drive_compaction(kube, cj, now_s=105.0)  # type: ignore[arg-type]
    assert tick.status["phase"] == "Succeeded" and "bytes_read 100" in tick.status["message"]
    assert fake.calls == []  # the operator never pauses, swaps or cleans: the sidecar does
    assert ("NetworkPolicy", "ns", "cj-spark") not in kube.objects  # local mode: one pod, no traffic to admit


def test_kubernetes_mode_admits_the_jobs_spark_traffic_before_the_driver_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k8s = {"mode": "kubernetes", "serviceAccountName": "spark"}
    kube, _fake, cj = compaction_setup(monkeypatch, lv_body(spark=k8s))
    assert jobs.drive_compaction(kube, cj, now_s=100.0).step.kind == "submit"  # type: ignore[arg-type]
    policy = kube.objects[("NetworkPolicy", "ns", "cj-spark")]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "c1"  # deleted with the CompactionJob
    driver = kube.objects[("Job", "ns", "cj-a1")]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= driver.items()


def test_compaction_job_fails_with_the_sidecars_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    body = lv_body()
    reconcile.apply_logvolume(kube, body)  # type: ignore[arg-type]
    kube.objects[("LogVolume", "ns", "orders")] = body
    running_pod(kube)
    fake = FakeSidecar(sidecar_doc(backlog=True, offload=hand_off("failed", reason="the job timed out")), [])
    monkeypatch.setattr(reconcile, "SidecarClient", lambda url, token: fake)
    cj: dict[str, Any] = {"metadata": {"name": "cj", "namespace": "ns", "uid": "c1", "generation": 1},
                          "spec": {"logVolume": "orders", "topic": "t", "partition": 0, "volumeId": "d0",
                                   "logDir": "/data/d0/log", "handOff": "0123456789ab", "args": ARGS,
                                   "staging": ARGS[6]}, "status": {"phase": "Running", "attempts": 1}}
    tick = jobs.drive_compaction(kube, cj, now_s=100.0)  # type: ignore[arg-type]
    assert tick.status["phase"] == "Failed" and "the job timed out" in tick.status["message"]


def test_api_errors_are_classified() -> None:
    assert ApiError(503, "x", "y").is_transient and ApiError(0, "x", "y").is_transient
    assert not ApiError(422, "Invalid", "y").is_transient and not ApiError(403, "Forbidden", "y").is_transient
