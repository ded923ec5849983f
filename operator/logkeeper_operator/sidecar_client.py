"""HTTP calls from the operator to a sidecar (API: logkeeper/server/http_api.py).

Every call carries the LogVolume's bearer token (tokens.py): the sidecar answers reads too
(``/v1/status``, ``/v1/topics``) only with it, unless its config opened them. Every call is
bounded by TIMEOUT_S; a failure raises SidecarError with the HTTP status (0 when the sidecar did
not answer); a 401 says how to repair a token Secret that holds another token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, cast
from urllib.parse import quote

from logkeeper.server.status_schema import Status

TIMEOUT_S = 10.0


class SidecarError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status or 'no answer'}: {message}")
        self.status = status  # 0: no answer


class SidecarClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            text = e.read()[:1000].decode(errors="replace")
            try:
                doc = json.loads(text)
                detail = str(doc.get("detail") or doc.get("error") or text)
            except (ValueError, AttributeError):
                detail = text
            if e.code == 401:
                # the token Secret holds another token than the operator's (made by an earlier
                # operator, or by hand, or before the key was rotated): the operator cannot read
                # or overwrite it (RBAC), so say how to have it made again
                detail += (" (the LogVolume's token Secret <name>-token does not hold the operator's token: delete "
                           "it and the operator makes it again; the sidecar reloads it without a restart)")
            raise SidecarError(e.code, detail) from None
        except (OSError, TimeoutError) as e:
            raise SidecarError(0, str(getattr(e, "reason", e))) from None
        return json.loads(raw) if raw else None

    def status(self) -> Status:
        """The sidecar's /v1/status, of its contract's shape (a sidecar of another version may
        lack keys: the readers use .get)."""
        doc = self._call("GET", "/v1/status")
        if not isinstance(doc, dict):
            raise SidecarError(200, "/v1/status did not answer an object")
        return cast(Status, doc)

    def topics(self) -> list[dict[str, Any]]:
        doc = self._call("GET", "/v1/topics")
        items = doc.get("topics", []) if isinstance(doc, dict) else doc
        return [t for t in items or [] if isinstance(t, dict)]

    def create_topic(self, name: str, partitions: int, configs: dict[str, Any]) -> None:
        self._call("POST", "/v1/topics", {"name": name, "partitions": partitions, "configs": configs})

    def add_partitions(self, topic: str, count: int) -> None:
        self._call("POST", f"/v1/topics/{quote(topic)}/partitions", {"count": count})

    def put_configs(self, topic: str, configs: dict[str, Any]) -> None:
        self._call("PUT", f"/v1/topics/{quote(topic)}/configs", {"configs": configs})
