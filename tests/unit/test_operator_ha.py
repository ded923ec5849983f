"""Issue 20: leader election over a Lease, the operator's metrics endpoint, its settings, and the
cancel Job's entry point."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from logkeeper.errors import InvalidConfigError
from logkeeper_operator import cancel, config, leader, metrics
from logkeeper_operator.names import LEASE_NAME
from tests.operator_fakes import FakeKube


def test_one_leader_at_a_time_and_take_over_after_expiry() -> None:
    kube = FakeKube()
    a = leader.Elector(kube, "sys", "a", duration_s=15)  # type: ignore[arg-type]
    b = leader.Elector(kube, "sys", "b", duration_s=15)  # type: ignore[arg-type]
    assert a.try_lead(1000.0) and not b.try_lead(1001.0)
    assert a.try_lead(1005.0)  # renewed
    lease = kube.objects[("Lease", "sys", LEASE_NAME)]
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15
    assert not b.try_lead(1019.9)  # 14.9 s after the last renewal: still a's
    assert b.try_lead(1020.1)  # expired: b takes over
    lease = kube.objects[("Lease", "sys", LEASE_NAME)]
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.try_lead(1021.0)  # the old leader does not get it back while b renews


def test_a_stale_write_loses() -> None:
    """Two candidates read the same expired Lease: the resourceVersion lets one write win."""
    kube = FakeKube()
    assert leader.Elector(kube, "sys", "a").try_lead(0.0)  # type: ignore[arg-type]
    stale = kube.get(leader.API, "Lease", "sys", LEASE_NAME)
    assert leader.Elector(kube, "sys", "b").try_lead(100.0)  # type: ignore[arg-type]
    c = leader.claimed(stale, "sys", "c", 100.0, 15)
    with pytest.raises(Exception, match="409"):
        kube.replace(c)


def test_release_hands_over_at_once() -> None:
    kube = FakeKube()
    a = leader.Elector(kube, "sys", "a")  # type: ignore[arg-type]
    b = leader.Elector(kube, "sys", "b")  # type: ignore[arg-type]
    assert a.try_lead()
    a.release()
    assert b.try_lead()


def test_the_leader_stops_when_it_cannot_renew() -> None:
    kube = FakeKube()
    e = leader.Elector(kube, "sys", "a", duration_s=1.5, renew_s=0.05, retry_s=0.05)  # type: ignore[arg-type]
    assert e.try_lead()
    kube.objects[("Lease", "sys", LEASE_NAME)]["spec"]["holderIdentity"] = "thief"  # taken from under it
    stop = asyncio.Event()
    assert asyncio.run(asyncio.wait_for(e.keep(stop), 5)) is False and stop.is_set()


def test_metrics_endpoint_serves_prometheus_text() -> None:
    with metrics.observe("LogVolume", "create"):
        pass
    with pytest.raises(ValueError), metrics.observe("LogVolume", "create"):
        raise ValueError("boom")
    metrics.set_objects("CompactionJob", {"Running": 2, "Failed": 1})
    metrics.set_objects("CompactionJob", {"Running": 1})
    server = metrics.serve("127.0.0.1", 0)
    try:
        port = server.server_address[1]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200
    finally:
        server.shutdown()
    assert 'logkeeper_operator_reconciles_total{kind="LogVolume",result="ok",trigger="create"} 1.0' in text
    assert 'logkeeper_operator_errors_total{error="ValueError",kind="LogVolume",trigger="create"} 1.0' in text
    assert 'logkeeper_operator_reconcile_duration_seconds_count{kind="LogVolume",trigger="create"} 2.0' in text
    assert 'logkeeper_operator_objects{kind="CompactionJob",phase="Running"} 1.0' in text
    assert 'phase="Failed"' not in text  # a phase no longer seen drops out
    assert "logkeeper_operator_repairs_total" in text.replace("# HELP logkeeper_operator_repairs_total", "")


def test_settings_default_to_a_reconcile_within_two_minutes() -> None:
    values = config.load({})
    assert values["reconcile.interval.seconds"] <= 120
    assert config.load({"LOGKEEPER_OPERATOR_RECONCILE_INTERVAL_SECONDS": "30"})["reconcile.interval.seconds"] == 30
    with pytest.raises(InvalidConfigError, match="LEASE_RENEW_SECONDS"):
        config.load({"LOGKEEPER_OPERATOR_LEASE_RENEW_SECONDS": "12"})


def test_cancel_leaves_the_failure_for_the_sidecar(tmp_path: Path) -> None:
    staging = tmp_path / "t-0" / "0123456789ab"
    staging.mkdir(parents=True)
    assert cancel.main([str(staging), "the CompactionJob x was deleted"]) == 0
    assert json.loads((staging / "failure.json").read_text()) == {"reason": "the CompactionJob x was deleted"}
    gone = tmp_path / "gone"
    assert cancel.main([str(gone), "x"]) == 0 and not gone.exists()  # a finished hand-off: nothing made
    assert cancel.main([]) == 2
