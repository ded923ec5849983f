"""The operator's periodic passes, outside kopf: kopf puts its finalizer on every object that has a
timer (so a LogVolume and its namespace would wait for the operator to be deleted); these loops
need none. Each pass lists the objects afresh (one call per watched namespace), so nothing is kept
between passes and a new leader picks up where the last one stopped.

    status     (status.interval.seconds)      each LogVolume: /v1/status -> status, live topic
                                              changes, CompactionJobs for the hand-offs waiting
    reconcile  (reconcile.interval.seconds)   each LogVolume: children re-applied; each one that was
                                              missing or changed is an event (Normal, Repaired) and
                                              logkeeper_operator_repairs_total; kopf's old finalizer
                                              stripped
    compaction (compaction.interval.seconds)  each CompactionJob: a deleted one finalized (jobs.py),
                                              the finalizer kept on unfinished ones only, one step;
                                              finished ones pruned (the CleanerPolicy's history)

One object's failure is logged and counted (metrics.ERRORS) and never stops the pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from . import events, jobs, metrics, reconcile
from .compaction import PENDING
from .k8s import Kube
from .names import API_VERSION, COMPACTIONJOB, KOPF_FINALIZER, LABEL_LOGVOLUME, LOGVOLUME
from .status import Event

log = logging.getLogger(__name__)
Namespaces = list[str] | None  # None: every namespace


def _each(kube: Kube, namespaces: Namespaces, kind: str) -> list[dict[str, Any]]:
    scopes: list[str | None] = list(namespaces) if namespaces else [None]
    return [o for ns in scopes for o in kube.list(API_VERSION, kind, ns)]


def _guarded(kind: str, trigger: str, body: Mapping[str, Any], fn: Callable[[], None]) -> None:
    try:
        with metrics.observe(kind, trigger):
            fn()
    except Exception as e:  # one object's trouble must not stop the others'
        log.warning("%s %s/%s (%s): %s", kind, body["metadata"].get("namespace"), body["metadata"].get("name"),
                    trigger, e)


def status_pass(kube: Kube, namespaces: Namespaces) -> None:
    phases: Counter[str] = Counter()
    for lv in _each(kube, namespaces, LOGVOLUME):
        def one(lv: dict[str, Any] = lv) -> None:
            result = reconcile.poll_logvolume(kube, lv)
            if result is None:
                return
            kube.patch_status(LOGVOLUME, lv["metadata"]["namespace"], lv["metadata"]["name"], result.status)
            events.post(kube, lv, result.events)
            if result.spec is not None and result.sidecar is not None:
                jobs.submit_hand_offs(kube, lv, result.spec, result.sidecar)
        _guarded(LOGVOLUME, "status", lv, one)
        ready: dict[str, Any] = next((c for c in (lv.get("status") or {}).get("conditions") or []
                                      if c.get("type") == "Ready"), {})
        phases[str(ready.get("reason") or "New")] += 1
    metrics.set_objects(LOGVOLUME, phases)


def _settled(lv: Mapping[str, Any]) -> bool:
    """Whether the handlers have applied the LogVolume's current spec (else a pass could apply a
    new spec first and report the change as drift) and not refused it."""
    st = lv.get("status") or {}
    return (st.get("observedGeneration") == lv["metadata"].get("generation") and not reconcile.is_blocked(lv)
            and not lv["metadata"].get("deletionTimestamp"))


def reconcile_pass(kube: Kube, namespaces: Namespaces) -> None:
    for lv in _each(kube, namespaces, LOGVOLUME):
        def one(lv: dict[str, Any] = lv) -> None:
            if KOPF_FINALIZER in (lv["metadata"].get("finalizers") or []):
                jobs.set_finalizers(kube, LOGVOLUME, lv, [f for f in lv["metadata"]["finalizers"]
                                                         if f != KOPF_FINALIZER])
            if not _settled(lv):
                return
            repairs = reconcile.apply_logvolume(kube, lv)
            for r in repairs:
                metrics.REPAIRS.labels(r.kind).inc()
                log.info("LogVolume %s: %s %s %s", lv["metadata"]["name"], r.kind, r.name, r.what)
            events.post(kube, lv, [Event("Normal", "Repaired", f"{r.kind} {r.name} {r.what} "
                                         f"({'it was missing' if r.what == 'created' else 'it had been changed'})")
                                   for r in repairs])
        _guarded(LOGVOLUME, "reconcile", lv, one)


def compaction_pass(kube: Kube, namespaces: Namespaces, now_s: float | None = None) -> None:
    now_s = time.time() if now_s is None else now_s
    phases: Counter[str] = Counter()
    by_lv: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cj in _each(kube, namespaces, COMPACTIONJOB):
        phase = str((cj.get("status") or {}).get("phase") or PENDING)
        phases[phase] += 1
        lv_name = str((cj.get("spec") or {}).get("logVolume") or cj["metadata"].get("labels", {}).get(LABEL_LOGVOLUME))
        by_lv.setdefault((cj["metadata"]["namespace"], lv_name), []).append(cj)

        def one(cj: dict[str, Any] = cj) -> None:
            if cj["metadata"].get("deletionTimestamp"):
                events.post(kube, cj, jobs.finalize(kube, cj))
                return
            want = jobs.wanted_finalizers(cj)
            if want is not None:
                jobs.set_finalizers(kube, COMPACTIONJOB, cj, want)
            tick = jobs.drive_compaction(kube, cj, now_s)
            if tick.status:
                kube.patch_status(COMPACTIONJOB, cj["metadata"]["namespace"], cj["metadata"]["name"], tick.status)
            events.post(kube, cj, tick.events)
        _guarded(COMPACTIONJOB, "tick", cj, one)
    metrics.set_objects(COMPACTIONJOB, phases)
    for (ns, lv_name), cjs in by_lv.items():
        lv = kube.get(API_VERSION, LOGVOLUME, ns, lv_name)
        if lv is None:
            continue

        def prune(lv: dict[str, Any] = lv, cjs: list[dict[str, Any]] = cjs) -> None:
            jobs.prune(kube, lv, cjs, now_s)
        _guarded(COMPACTIONJOB, "prune", lv, prune)


async def every(interval_s: float, stop: asyncio.Event, fn: Callable[[], None]) -> None:
    """``fn`` in a worker thread every ``interval_s`` (from start to start) until ``stop``."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            await asyncio.to_thread(fn)
        except Exception:
            log.exception("periodic pass %s failed", getattr(fn, "__name__", fn))
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, interval_s - (time.monotonic() - started)))
        except TimeoutError:
            pass


async def run(kube: Kube, namespaces: Namespaces, settings: Mapping[str, Any], stop: asyncio.Event) -> None:
    await asyncio.gather(
        every(float(settings["status.interval.seconds"]), stop, lambda: status_pass(kube, namespaces)),
        every(float(settings["reconcile.interval.seconds"]), stop, lambda: reconcile_pass(kube, namespaces)),
        every(float(settings["compaction.interval.seconds"]), stop, lambda: compaction_pass(kube, namespaces)),
    )
