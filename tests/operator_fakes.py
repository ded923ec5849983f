"""Test doubles of the operator's Kubernetes client and of a sidecar: an in-memory API that keeps
resourceVersions (server-side apply bumps one only when the object changes, as the API server
does), label and field selectors, finalizers and deletion as the API server handles them."""

from __future__ import annotations

import base64
import copy
from typing import Any

from logkeeper_operator.k8s import ApiError
from logkeeper_operator.names import KEY_SECRET


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.applies = 0
        self.version = 0
        self.deleted: list[tuple[str, str, str]] = []

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def _key(self, kind: str, ns: str | None, name: str) -> tuple[str, str, str]:
        return kind, ns or "", name

    def apply(self, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        self.applies += 1
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        old = self.objects.get(key)
        new = copy.deepcopy(obj)
        if old is not None:
            kept = {k: v for k, v in old.items() if k not in new}  # fields of other managers (status ...)
            new = {**kept, **new}
            new["metadata"] = {**old["metadata"], **new["metadata"]}
            if _strip(new) == _strip(old):
                return copy.deepcopy(old)  # a no-op apply writes nothing
        self.objects[key] = self._stamp(new)
        return copy.deepcopy(new)

    def create_if_absent(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in self.objects:
            return self.get(obj["apiVersion"], obj["kind"], key[1], key[2]), False  # type: ignore[return-value]
        stored = copy.deepcopy(obj)
        if obj["kind"] == "Secret" and "stringData" in obj:
            stored["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in stored.pop("stringData").items()}
        self.objects[key] = self._stamp(stored)
        return stored, True

    def create(self, obj: dict[str, Any]) -> bool:  # a POST: an existing object is a 409, not read
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        return key not in self.objects and self.create_if_absent(obj)[1]

    def get(self, api_version: str, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        # the chart's RBAC: the one Secret the operator may read is the namespace's token key
        assert kind != "Secret" or name == KEY_SECRET, f"the operator read Secret {name}"
        obj = self.objects.get(self._key(kind, ns, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str, kind: str, ns: str | None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[Any]:
        def match(o: dict[str, Any]) -> bool:
            labels = o.get("metadata", {}).get("labels") or {}
            for term in (label_selector or "").split(","):
                if term and labels.get(term.partition("=")[0]) != term.partition("=")[2]:
                    return False
            for term in (field_selector or "").split(","):
                if term:
                    path, _, want = term.partition("=")
                    value: Any = o
                    for part in path.split("."):
                        value = (value or {}).get(part)
                    if value != want:
                        return False
            return True
        return [copy.deepcopy(o) for (k, n, _), o in self.objects.items()
                if k == kind and (ns is None or n == ns) and match(o)]

    def delete(self, api_version: str, kind: str, ns: str | None, name: str) -> bool:
        key = self._key(kind, ns, name)
        obj = self.objects.get(key)
        if obj is None:
            return False
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        else:
            del self.objects[key]
            self.deleted.append(key)
        return True

    def patch_metadata(self, api_version: str, kind: str, ns: str | None, name: str,
                       patch: dict[str, Any]) -> dict[str, Any]:
        obj = self.objects[self._key(kind, ns, name)]
        rv = patch.get("resourceVersion")
        if rv is not None and rv != obj["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict", "the object has been modified")
        obj["metadata"].update({k: v for k, v in patch.items() if k != "resourceVersion"})
        self._stamp(obj)
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            self.delete(api_version, kind, ns, name)
        return obj

    def patch_status(self, kind: str, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        obj = self.objects[self._key(kind, ns, name)]
        st = obj.setdefault("status", {})
        for k, v in status.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = v
        return obj

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key not in self.objects:
            raise ApiError(404, "NotFound", "gone")
        if obj["metadata"].get("resourceVersion") != self.objects[key]["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict", "the object has been modified")
        self.objects[key] = self._stamp(copy.deepcopy(obj))
        return copy.deepcopy(self.objects[key])

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as another client would (a user, a controller)."""
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        self.objects[key] = self._stamp(copy.deepcopy(obj))
        return self.objects[key]


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}


class FakeSidecar:
    def __init__(self, doc: dict[str, Any], topics: list[dict[str, Any]]) -> None:
        self.doc, self._topics, self.calls = doc, topics, []  # type: list[tuple[Any, ...]]

    def status(self) -> dict[str, Any]:
        return self.doc

    def topics(self) -> list[dict[str, Any]]:
        return self._topics

    def __getattr__(self, verb: str) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append((verb, *args))
            return {}
        return call
