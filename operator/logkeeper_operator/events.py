"""Events on our resources (core/v1 Event), posted through the operator's own client so that the
kopf handlers and the periodic loops (which run outside kopf's handler context) post them alike.
Best effort: an event the API server refuses is logged, never an error of the reconcile."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .k8s import ApiError, Kube
from .names import COMPONENT
from .status import Event
from .times import rfc3339

log = logging.getLogger(__name__)
MAX_MESSAGE = 1000


def event_object(body: Mapping[str, Any], e: Event, now_s: float) -> dict[str, Any]:
    meta = body["metadata"]
    stamp = rfc3339(now_s)
    return {"apiVersion": "v1", "kind": "Event", "type": e.type, "reason": e.reason,
            "message": e.message[:MAX_MESSAGE],
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


def post(kube: Kube, body: Mapping[str, Any], events: Iterable[Event]) -> None:
    for e in events:
        try:
            kube.create(event_object(body, e, time.time()))
        except ApiError as err:
            log.warning("event %s on %s not posted: %s", e.reason, body["metadata"].get("name"), err)
