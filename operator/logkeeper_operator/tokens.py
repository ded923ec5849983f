"""The LogVolumes' bearer tokens, derived so that the operator never reads their Secrets.

The sidecar needs its token for every request but the probes (reads too: server/middleware.py),
so the operator needs each LogVolume's token at every status tick. Reading the ``<lv>-token``
Secrets would take ``get`` on every Secret of the namespace: their names are not known when the
chart is installed, and RBAC's resourceNames cannot hold patterns. Instead, one random key per
namespace, in the Secret ``KEY_SECRET`` (a fixed name, so the chart's Role can name it), and

    token(lv) = base64url(HMAC-SHA256(key, "<namespace>/<lv name>"))

The operator writes that token into ``<lv>-token`` (create only, never read back) and computes it
again when it calls the sidecar. Its RBAC on secrets is then: ``get`` of ``KEY_SECRET`` only,
and ``create`` (which Kubernetes cannot restrict by name) for the key and the token Secrets.

The name, not the uid, goes into the message: a LogVolume deleted and made again under the same
name gets the same token, so a token Secret that the garbage collector has not removed yet still
holds the right one. Rotation: delete ``KEY_SECRET`` (a new key is made at the next reconcile)
and the ``<lv>-token`` Secrets (each is made again with its new token; a mounted Secret is
updated in the pod and the sidecar re-reads its token file, no restart).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from .names import FIELD_MANAGER, KEY_SECRET, TOKEN_KEY_FIELD

KEY_BYTES = 32


def derive_token(key: bytes, namespace: str, lv: str) -> str:
    mac = hmac.new(key, f"{namespace}/{lv}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def key_secret(namespace: str) -> dict[str, Any]:
    """The namespace's key, made once (random) and never overwritten. Owned by no LogVolume:
    the others of the namespace still use it when one is deleted."""
    key = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": KEY_SECRET, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "logkeeper", "app.kubernetes.io/component": "token-key",
                                    "app.kubernetes.io/managed-by": FIELD_MANAGER}},
            "data": {TOKEN_KEY_FIELD: key}}


def key_of(secret: dict[str, Any]) -> bytes:
    raw = (secret.get("data") or {}).get(TOKEN_KEY_FIELD)
    if not raw:
        raise ValueError(f"Secret {KEY_SECRET} has no {TOKEN_KEY_FIELD!r}: delete it to have a new key made")
    key = base64.b64decode(raw)
    if len(key) < 16:
        raise ValueError(f"Secret {KEY_SECRET}: the key is shorter than 16 bytes: delete it to have a new key made")
    return key
