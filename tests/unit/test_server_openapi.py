"""server/openapi.py: the served document describes exactly the routes of the app, and is valid OpenAPI."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import schemathesis
from schemathesis.core.result import Ok

from logkeeper.log.log_config import TOPIC_SETTINGS
from logkeeper.server.auth import TokenFile
from logkeeper.server.config import config_from_document
from logkeeper.server.http_api import Api, build_app
from logkeeper.server.openapi import build_spec
from logkeeper.server.service import Sidecar


def app_and_spec(tmp_path: Path, **sidecar: Any) -> tuple[set[tuple[str, str]], dict[str, Any]]:
    (tmp_path / "token").write_text("t")
    config = config_from_document({"sidecar": {"token.file": str(tmp_path / "token"), **sidecar},
                                   "node": {"log.dirs": [str(tmp_path / "d")]}}, "test", {})
    with ThreadPoolExecutor(1) as pool:
        api = Api(Sidecar(config), config.sidecar, TokenFile(config.sidecar.token_file), pool)
        app = build_app(api)
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    return routes, api.spec


def test_every_route_is_described_and_every_operation_routed(tmp_path: Path) -> None:
    routes, spec = app_and_spec(tmp_path)
    described = {(method, path) for path, ops in spec["paths"].items() for method in ops}
    assert routes == described


def test_path_parameters_and_security(tmp_path: Path) -> None:
    _routes, spec = app_and_spec(tmp_path)
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), (method, path)
            # secure defaults: everything needs the token but what the probes read, and this document
            secured = path not in ("/healthz", "/readyz", "/openapi.json")
            assert ("security" in op) == secured, (method, path)
            assert ("401" in op["responses"]) == secured, (method, path)
            for code, resp in op["responses"].items():
                if int(code) >= 400:
                    assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_reads_opened_on_purpose_are_documented_open(tmp_path: Path) -> None:
    _routes, spec = app_and_spec(tmp_path, **{"http.read.auth": "none", "fetch.max.bytes": 1000})
    fetch = spec["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]["get"]
    assert "security" not in fetch and "security" not in spec["paths"]["/v1/status"]["get"]
    assert spec["paths"]["/metrics"]["get"]["security"] == [{"bearerAuth": []}]  # its own setting
    assert spec["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]["post"]["security"]
    max_bytes = next(p for p in fetch["parameters"] if p["name"] == "max_bytes")
    assert max_bytes["schema"]["maximum"] == 1000


def test_topic_config_schema_comes_from_the_settings(tmp_path: Path) -> None:
    _routes, spec = app_and_spec(tmp_path)
    props = spec["components"]["schemas"]["TopicConfigs"]["properties"]
    assert set(props) == set(TOPIC_SETTINGS.by_key)
    assert props["segment.bytes"]["type"] == "integer"
    assert props["min.cleanable.dirty.ratio"]["type"] == "number"


def test_the_document_loads_as_openapi(tmp_path: Path) -> None:
    _routes, spec = app_and_spec(tmp_path)
    schema = schemathesis.openapi.from_dict(spec)
    operations = list(schema.get_all_operations())
    assert all(isinstance(op, Ok) for op in operations), [op for op in operations if not isinstance(op, Ok)]
    assert len(operations) == sum(len(ops) for ops in spec["paths"].values())
    assert build_spec(_settings(tmp_path)) == json.loads(json.dumps(spec))  # what /openapi.json serves


def _settings(tmp_path: Path) -> Any:
    return config_from_document({"sidecar": {"token.file": str(tmp_path / "token")},
                                 "node": {"log.dirs": [str(tmp_path / "d")]}}, "test", {}).sidecar
