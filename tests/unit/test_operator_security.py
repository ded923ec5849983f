"""The operator's share of the secure defaults: its RBAC on secrets is limited to the one Secret it
reads (the chart's rbac.yaml, read as text: helm is not needed for make test), it may manage the
NetworkPolicies, its deployment tells it its namespace, and it sends the token with every call
to a sidecar, reads included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from logkeeper_operator import sidecar_client, tokens
from logkeeper_operator.names import KEY_SECRET
from logkeeper_operator.sidecar_client import SidecarClient, SidecarError

TEMPLATES = Path(__file__).resolve().parents[2] / "charts" / "logkeeper" / "templates"
RULE = re.compile(r'^\s*\(dict "apiGroups" \(list ([^)]*)\) "resources" \(list ([^)]*)\) "verbs" \(list ([^)]*)\)'
                  r'(?: "resourceNames" \(list ([^)]*)\))?\)\s*$')


def rules() -> list[dict[str, list[str]]]:
    out = []
    for line in (TEMPLATES / "rbac.yaml").read_text().splitlines():
        if line.strip().startswith("(dict"):
            m = RULE.match(line)
            assert m, f"a rule this test cannot read: {line}"
            groups, resources, verbs, names = (re.findall(r'"([^"]*)"', g or "") for g in m.groups())
            out.append({"apiGroups": groups, "resources": resources, "verbs": verbs, "resourceNames": names})
    return out


def test_rbac_reads_only_the_key_secret() -> None:
    on_secrets = [r for r in rules() if "secrets" in r["resources"]]
    assert all(r["resources"] == ["secrets"] for r in on_secrets)  # no rule shares secrets with another kind
    readers = [r for r in on_secrets if set(r["verbs"]) & {"get", "list", "watch"}]
    assert readers == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [KEY_SECRET]}]
    # create cannot be limited by name in Kubernetes; nothing else is granted on secrets
    assert {v for r in on_secrets for v in r["verbs"]} == {"get", "create"}
    creators = [r for r in on_secrets if "create" in r["verbs"]]
    assert creators == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"], "resourceNames": []}]
    text = (TEMPLATES / "rbac.yaml").read_text()
    assert "resourceNames" in text and "cannot restrict `create` by resourceNames" in text  # the why, written


def test_rbac_lets_the_operator_apply_network_policies() -> None:
    (np,) = [r for r in rules() if "networkpolicies" in r["resources"]]
    assert np["apiGroups"] == ["networking.k8s.io"] and set(np["verbs"]) == {"get", "create", "patch"}
    for r in rules():
        assert "*" not in r["verbs"] and "*" not in r["resources"], r


def test_the_deployment_tells_the_operator_its_namespace() -> None:
    text = (TEMPLATES / "deployment.yaml").read_text()
    assert re.search(r"- name: LOGKEEPER_OPERATOR_NAMESPACE\s+valueFrom:\s+fieldRef:\s+fieldPath: metadata.namespace",
                     text)


def test_derived_tokens() -> None:
    key = b"k" * 32
    assert tokens.derive_token(key, "ns", "orders") == tokens.derive_token(key, "ns", "orders")
    assert tokens.derive_token(key, "ns", "orders") != tokens.derive_token(key, "ns", "billing")
    assert tokens.derive_token(key, "ns", "orders") != tokens.derive_token(b"x" * 32, "ns", "orders")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", tokens.derive_token(key, "ns", "orders"))  # 256 bits, header-safe
    made = tokens.key_secret("ns")
    assert made["metadata"]["name"] == KEY_SECRET and len(tokens.key_of(made)) == tokens.KEY_BYTES
    with pytest.raises(ValueError, match="delete it"):
        tokens.key_of({"data": {}})


class _Answer:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def read(self) -> bytes:
        return self.body


def test_the_client_sends_the_token_with_reads_too(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def urlopen(req: Any, timeout: float) -> _Answer:
        sent.append(req)
        return _Answer(b'{"ready": true, "topics": []}')

    monkeypatch.setattr(sidecar_client.urllib.request, "urlopen", urlopen)
    client = SidecarClient("http://10.0.0.1:8080", "tok")
    client.status()
    client.topics()
    client.create_topic("t", 1, {})
    assert [(r.get_method(), r.get_header("Authorization")) for r in sent] == [
        ("GET", "Bearer tok"), ("GET", "Bearer tok"), ("POST", "Bearer tok")]


def test_a_401_says_how_to_repair_the_token_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import urllib.error

    def urlopen(req: Any, timeout: float) -> _Answer:
        raise urllib.error.HTTPError(req.full_url, 401, "Unauthorized", {},  # type: ignore[arg-type]
                                     io.BytesIO(b'{"error":"unauthorized","detail":"this request needs the token"}'))

    monkeypatch.setattr(sidecar_client.urllib.request, "urlopen", urlopen)
    with pytest.raises(SidecarError) as e:
        SidecarClient("http://10.0.0.1:8080", "tok").status()
    assert e.value.status == 401 and "this request needs the token" in str(e.value)
    assert "-token" in str(e.value) and "delete it" in str(e.value)
