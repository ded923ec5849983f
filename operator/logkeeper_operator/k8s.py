"""The Kubernetes client of the operator: a few verbs over plain dicts.

- ``apply(obj)``: server-side apply (fieldManager logkeeper-operator, force) - create-or-patch in
  one call, safe to repeat, and it leaves fields other managers own (a user's annotations, the
  controllers' status) alone.
- ``create_if_absent(obj)``: for what must be made once and never overwritten (the namespace's
  token key); ``create(obj)``: the same without reading it first (the token Secrets, which the
  operator's RBAC lets it create but not read).
- ``get``, ``list``, ``delete``, ``patch_status`` (merge patch of the status subresource),
  ``patch_metadata`` (finalizers, guarded by a resourceVersion), ``replace`` (PUT: the leader's
  Lease, where the resourceVersion makes two candidates' writes exclusive).

Errors: ApiError carries the HTTP status and the API server's message; ``is_transient`` tells
the handlers whether to retry (kopf.TemporaryError) or to report a bad spec (a 422 from the API
server is the user's input).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client, config

from .names import FIELD_MANAGER, GROUP, PLURALS, VERSION

Obj = dict[str, Any]
REQUEST_TIMEOUT_S = 30

# kind -> (plural, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "Secret": ("secrets", True), "ConfigMap": ("configmaps", True), "Service": ("services", True),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True), "Pod": ("pods", True),
    "StatefulSet": ("statefulsets", True), "Job": ("jobs", True), "Event": ("events", True),
    "NetworkPolicy": ("networkpolicies", True), "Lease": ("leases", True),
    **{kind: (plural, True) for kind, plural in PLURALS.items()},
}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def is_transient(self) -> bool:
        return self.status in (0, 408, 409, 425, 429) or self.status >= 500


def load_client() -> client.ApiClient:
    """In-cluster config when in a pod, else the kubeconfig (KUBECONFIG)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
    plural, namespaced = RESOURCES[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = base + (f"/namespaces/{quote(namespace)}" if namespaced and namespace else "") + f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


class Kube:
    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.api = api or load_client()

    def _call(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None,
              content_type: str = "application/json") -> Obj | None:
        url_path = path + (("?" + urlencode(query)) if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # The client's REST layer JSON-encodes bodies itself for a JSON content type (a string
        # would go out double-encoded) and sends strings as they are otherwise: apply-patch+yaml
        # gets our JSON text (JSON is YAML).
        raw_body = body if body is None or "json" in content_type else json.dumps(body)
        m, url, hdrs, bdy, post = self.api.param_serialize(method, url_path, header_params=headers, body=raw_body,
                                                           auth_settings=["BearerToken"])
        try:
            resp = self.api.call_api(m, url, hdrs, bdy, post, _request_timeout=REQUEST_TIMEOUT_S)
            resp.read()  # type: ignore[no-untyped-call]
        except OSError as e:
            raise ApiError(0, "Unreachable", str(e)) from None
        except Exception as e:  # urllib3's own errors (timeouts, protocol errors)
            if type(e).__module__.startswith("urllib3"):
                raise ApiError(0, "Unreachable", str(e)) from None
            raise
        data = resp.data or b""
        doc = json.loads(data) if data else None
        if resp.status >= 400:
            msg = doc.get("message", "") if isinstance(doc, dict) else data[:500].decode(errors="replace")
            reason = doc.get("reason", "") if isinstance(doc, dict) else ""
            raise ApiError(resp.status, reason or "Error", msg)
        return doc if isinstance(doc, dict) else None

    def apply(self, obj: Mapping[str, Any], subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], subresource)
        out = self._call("PATCH", path, {"fieldManager": FIELD_MANAGER, "force": "true"}, obj,
                         "application/apply-patch+yaml")
        return out or {}

    def create_if_absent(self, obj: Mapping[str, Any]) -> tuple[Obj, bool]:
        meta = obj["metadata"]
        existing = self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if existing is not None:
            return existing, False
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            return self._call("POST", path, {"fieldManager": FIELD_MANAGER}, obj) or {}, True
        except ApiError as e:
            if e.status == 409:  # made meanwhile (a repeated handler): take it
                got = self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
                if got is not None:
                    return got, False
            raise

    def create(self, obj: Mapping[str, Any]) -> bool:
        """Create ``obj``; False when it exists already (left as it is, and not read: for the
        token Secrets, which the operator may create but not get)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            self._call("POST", path, {"fieldManager": FIELD_MANAGER}, obj)
            return True
        except ApiError as e:
            if e.status == 409:
                return False
            raise

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        try:
            return self._call("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[Obj]:
        """Objects of a namespace (None: of every namespace)."""
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        doc = self._call("GET", resource_path(api_version, kind, namespace), query or None) or {}
        items: list[Obj] = doc.get("items") or []
        return items

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self._call("DELETE", resource_path(api_version, kind, namespace, name), None,
                       {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def replace(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        return self._call("PUT", resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]),
                          None, obj) or {}

    def patch_metadata(self, api_version: str, kind: str, namespace: str | None, name: str,
                       patch: Mapping[str, Any]) -> Obj:
        return self._call("PATCH", resource_path(api_version, kind, namespace, name), None, {"metadata": patch},
                          "application/merge-patch+json") or {}

    def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        path = resource_path(f"{GROUP}/{VERSION}", kind, namespace, name, "status")
        return self._call("PATCH", path, None, {"status": status}, "application/merge-patch+json") or {}
