"""kopf handlers: thin (parse -> build -> apply -> status, in reconcile.py) and safe to repeat.

    LogVolume      create/update/resume -> apply its children; timer (STATUS_INTERVAL_S) -> status,
                   live topic changes, CompactionJobs for backlogs; events on condition changes
    CleanerPolicy  create/update/resume -> re-apply the LogVolumes naming it (their pods roll)
    CompactionJob  timer (COMPACTION_INTERVAL_S) -> one step of its state machine; a timer only,
                   so no two handlers of one job run at once, and a restart resumes from status

Errors (house rule 6): a bad spec -> Ready=False (reason, message naming the field) and
kopf.PermanentError; transient API or sidecar failures -> kopf.TemporaryError(delay=RETRY_DELAY_S),
retried by kopf with no bound of its own for a missing CleanerPolicy (it may come later) and at
most MAX_RETRIES times otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from . import config, reconcile
from .compaction import FAILED
from .k8s import ApiError, Kube
from .names import ANNOTATION_PREFIX, GROUP, VERSION
from .sidecar_client import SidecarError
from .spec import SpecError, parse_cleaner
from .status import Event

SETTINGS = config.load()  # the operator's settings (config.py), read once at import
STATUS_INTERVAL_S = float(SETTINGS["status.interval.seconds"])
COMPACTION_INTERVAL_S = float(SETTINGS["compaction.interval.seconds"])
RETRY_DELAY_S = int(SETTINGS["retry.delay.seconds"])
MAX_RETRIES = int(SETTINGS["max.retries"])  # with RETRY_DELAY_S: the bound on one change's retries

_kube: Kube | None = None


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube()
    return _kube


def _post(body: kopf.Body, events: Iterable[Event]) -> None:
    for e in events:
        kopf.event(body, type=e.type, reason=e.reason, message=e.message[:1000])


def _set_status(patch: kopf.Patch, status: dict[str, Any]) -> None:
    for key, value in status.items():
        patch.status[key] = value


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.posting.reporting_component = "logkeeper-operator"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.execution.max_workers = 8
    # The watched namespaces are exact names and the CRDs are installed before the operator (the
    # chart's crds/): no need to list and watch namespaces and CRDs, which least-privilege RBAC
    # does not grant (kopf would retry those 403s and then give up on the whole operator).
    settings.scanning.disabled = True


def _fail(body: kopf.Body, patch: kopf.Patch, message: str, reason: str) -> None:
    status, events = reconcile.failure_status(body, message, reason, reconcile.now_iso())
    _set_status(patch, status)
    _post(body, events)


@kopf.on.create(GROUP, VERSION, "logvolumes", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.update(GROUP, VERSION, "logvolumes", field="spec", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.resume(GROUP, VERSION, "logvolumes", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
def logvolume_changed(body: kopf.Body, patch: kopf.Patch, old: Any, reason: str, **_: Any) -> None:
    old_spec = old if reason == "update" and isinstance(old, dict) else None
    try:
        reconcile.apply_logvolume(kube(), body, old_spec)
    except SpecError as e:
        _fail(body, patch, str(e), "InvalidSpec")
        raise kopf.PermanentError(str(e)) from None
    except reconcile.PolicyMissing as e:
        _fail(body, patch, str(e), "PolicyNotFound")
        raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S * 2) from None
    except ApiError as e:
        if e.is_transient:
            raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from None
        _fail(body, patch, f"the API server refused a child object: {e}", "ApplyRejected")
        raise kopf.PermanentError(str(e)) from None
    status, events = reconcile.reconciling_status(body, reconcile.now_iso())
    _set_status(patch, status)
    _post(body, events)


@kopf.timer(GROUP, VERSION, "logvolumes", interval=STATUS_INTERVAL_S, initial_delay=1)
def logvolume_status(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    try:
        result = reconcile.poll_logvolume(kube(), body)
    except ApiError as e:
        raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from None
    if result is None:
        return
    _set_status(patch, result.status)
    _post(body, result.events)


@kopf.on.create(GROUP, VERSION, "cleanerpolicies", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.update(GROUP, VERSION, "cleanerpolicies", field="spec", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.resume(GROUP, VERSION, "cleanerpolicies", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
def cleanerpolicy_changed(body: kopf.Body, patch: kopf.Patch, name: str, namespace: str | None, logger: Any,
                          **_: Any) -> None:
    try:
        parse_cleaner((body.get("spec") or {}).get("cleaner"), "spec.cleaner")
    except SpecError as e:
        _fail(body, patch, str(e), "InvalidSpec")
        raise kopf.PermanentError(str(e)) from None
    try:
        users = reconcile.policy_users(kube(), namespace or "", name)
        for lv in users:
            try:
                reconcile.apply_logvolume(kube(), lv)
            except (SpecError, reconcile.PolicyMissing) as e:
                logger.warning("LogVolume %s not re-applied: %s", lv["metadata"]["name"], e)
                continue
            if lv.get("status", {}).get("conditions"):
                st, ev = reconcile.reconciling_status(lv, reconcile.now_iso())
                if len(st) > 1:
                    kube().patch_status("LogVolume", namespace or "", lv["metadata"]["name"], st)
                    _post(kopf.Body(lv), ev)  # type: ignore[arg-type]
    except ApiError as e:
        raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from None
    status, events = reconcile.invalid_status_ok(body, len(users))
    _set_status(patch, status)
    _post(body, events)


@kopf.timer(GROUP, VERSION, "compactionjobs", interval=COMPACTION_INTERVAL_S, initial_delay=0,
            when=lambda status, **_: (status or {}).get("phase") not in ("Succeeded", FAILED))
def compactionjob_tick(body: kopf.Body, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    try:
        tick = reconcile.drive_compaction(kube(), body)
    except SpecError as e:
        patch.status["phase"] = FAILED
        patch.status["message"] = str(e)
        _post(body, [Event("Warning", "InvalidSpec", str(e))])
        raise kopf.PermanentError(str(e)) from None
    except (ApiError, SidecarError) as e:
        if isinstance(e, ApiError) and not e.is_transient:
            logger.warning("API server refused: %s", e)
        raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from None
    _set_status(patch, tick.status)
    _post(body, tick.events)
