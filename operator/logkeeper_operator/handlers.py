"""kopf handlers: thin (parse -> build -> apply -> status, in reconcile.py) and safe to repeat.

    LogVolume      create/update/resume -> apply its children
    CleanerPolicy  create/update/resume -> re-apply the LogVolumes naming it (their pods roll)

Everything periodic (status, drift repair, CompactionJobs) runs in periodic.py, not in kopf
timers: kopf adds its finalizer to every object a timer watches, and then deleting a LogVolume
(or its namespace) waits for the operator. No handler here needs a finalizer (a unit test checks
the registry): deletion never waits for the operator; the garbage collector removes the children
through their owner references.

Errors: a bad spec -> Ready=False (reason, message naming the field) and
kopf.PermanentError; transient API or sidecar failures -> kopf.TemporaryError(delay=RETRY_DELAY_S),
retried by kopf with no bound of its own for a missing CleanerPolicy (it may come later) and at
most MAX_RETRIES times otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from . import config, events, metrics, reconcile
from .jobspec import parse_job_history
from .k8s import ApiError, Kube
from .names import ANNOTATION_PREFIX, CLEANERPOLICY, COMPONENT, GROUP, LOGVOLUME, VERSION
from .spec import SpecError, parse_cleaner
from .status import Event
from .times import now_iso

SETTINGS = config.load()  # the operator's settings (config.py), read once at import
RETRY_DELAY_S = int(SETTINGS["retry.delay.seconds"])
MAX_RETRIES = int(SETTINGS["max.retries"])  # with RETRY_DELAY_S: the bound on one change's retries

_kube: Kube | None = None


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube()
    return _kube


def _post(body: Any, evs: list[Event]) -> None:
    events.post(kube(), body, evs)


def _set_status(patch: kopf.Patch, status: Mapping[str, Any]) -> None:
    for key, value in status.items():
        patch.status[key] = value


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.posting.reporting_component = COMPONENT
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
    status, evs = reconcile.failure_status(body, message, reason, now_iso())
    _set_status(patch, status)
    _post(body, evs)


@kopf.on.create(GROUP, VERSION, "logvolumes", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.update(GROUP, VERSION, "logvolumes", field="spec", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.resume(GROUP, VERSION, "logvolumes", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
def logvolume_changed(body: kopf.Body, patch: kopf.Patch, old: Any, reason: str, **_: Any) -> None:
    old_spec = old if reason == "update" and isinstance(old, dict) else None
    with metrics.observe(LOGVOLUME, str(reason)):
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
    status, evs = reconcile.reconciling_status(body, now_iso())
    _set_status(patch, status)
    _post(body, evs)


@kopf.on.create(GROUP, VERSION, "cleanerpolicies", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.update(GROUP, VERSION, "cleanerpolicies", field="spec", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
@kopf.on.resume(GROUP, VERSION, "cleanerpolicies", retries=MAX_RETRIES, backoff=RETRY_DELAY_S)
def cleanerpolicy_changed(body: kopf.Body, patch: kopf.Patch, name: str, namespace: str | None, logger: Any,
                          reason: str, **_: Any) -> None:
    with metrics.observe(CLEANERPOLICY, str(reason)):
        try:
            parse_cleaner((body.get("spec") or {}).get("cleaner"), "spec.cleaner")
            parse_job_history((body.get("spec") or {}).get("compactionJobs"))
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
                    st, evs = reconcile.reconciling_status(lv, now_iso())
                    if len(st) > 1:
                        kube().patch_status(LOGVOLUME, namespace or "", lv["metadata"]["name"], st)
                        _post(lv, evs)
        except ApiError as e:
            raise kopf.TemporaryError(str(e), delay=RETRY_DELAY_S) from None
    status, evs = reconcile.invalid_status_ok(body, len(users))
    _set_status(patch, status)
    _post(body, evs)
