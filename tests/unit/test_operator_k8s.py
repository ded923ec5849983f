"""logkeeper_operator.k8s against a recording HTTP server: what goes on the wire.

Regression: bodies were JSON-encoded twice for JSON content types (the client's REST layer
encodes again), so the API server got a JSON string where an object belongs and refused every
create with 400 ("cannot unmarshal string into Go value").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client

from logkeeper_operator.k8s import ApiError, Kube


class Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"method": self.command, "path": self.path, "type": self.headers.get("Content-Type"),
                          "body": body})
        if self.path.startswith("/api/v1/namespaces/ns/secrets/missing"):
            status, doc = 404, {"kind": "Status", "reason": "NotFound", "message": "secrets \"missing\" not found"}
        elif self.command == "GET" and "/secrets/" in self.path:
            status, doc = 404, {"kind": "Status", "reason": "NotFound", "message": "not found"}
        else:
            status, doc = 200, {"kind": "Echo", "metadata": {"name": "x"}}
        out = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def kube() -> Iterator[Kube]:
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield Kube(client.ApiClient(cfg))
    server.shutdown()


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "ns"},
          "stringData": {"token": "abc"}}


def test_create_sends_the_object_once_encoded(kube: Kube) -> None:
    kube.create_if_absent(SECRET)
    post = next(r for r in Recorder.seen if r["method"] == "POST")
    assert post["path"].startswith("/api/v1/namespaces/ns/secrets?")
    assert post["type"] == "application/json"
    assert json.loads(post["body"]) == SECRET  # an object, not a string holding one


def test_apply_merge_patch_and_delete_bodies_are_objects(kube: Kube) -> None:
    kube.apply(SECRET)
    kube.patch_status("LogVolume", "ns", "lv", {"phase": "Ready"})
    kube.delete("v1", "Secret", "ns", "t")
    apply, status, delete = Recorder.seen
    assert apply["type"] == "application/apply-patch+yaml" and "fieldManager=" in apply["path"]
    assert json.loads(apply["body"]) == SECRET
    assert status["path"] == "/apis/logkeeper.io/v1alpha1/namespaces/ns/logvolumes/lv/status"
    assert json.loads(status["body"]) == {"status": {"phase": "Ready"}}
    assert json.loads(delete["body"])["propagationPolicy"] == "Background"


def test_not_found_is_none_and_errors_carry_the_status(kube: Kube) -> None:
    assert kube.get("v1", "Secret", "ns", "missing") is None
    with pytest.raises(ApiError) as err:
        kube._call("GET", "/api/v1/namespaces/ns/secrets/missing")
    assert err.value.status == 404 and "not found" in err.value.message
