"""aiohttp middlewares: request metrics, JSON errors, bearer-token checks (outermost first).

- ``metrics``: counts every answer by method, route (the route's pattern, ``unmatched`` for
  none) and status, and times it.
- ``errors``: every failure becomes ``{"error": CODE, "detail": MESSAGE}`` with the status of
  server/errors.py; aiohttp's own (404 unknown path, 405 method, 413 body too large) included.
  An unexpected exception is logged with its traceback and answered 500 internal_error.
  A request whose body was not read to its end (408 request_timeout, 400 client_disconnected)
  has its connection closed after the answer.
- ``auth``: every request needs ``Authorization: Bearer <token>`` but reads (GET, HEAD, OPTIONS)
  of ``OPEN_PATHS``, of ``/metrics`` when ``http.metrics.auth`` is none, and of anything when
  ``http.read.auth`` is none: 401 without it or with a wrong one (before the body is read), 503
  when the token file cannot be read. Unknown paths are answered 404/405 first.

Why these paths stay open: /healthz and /readyz are the kubelet's liveness, startup and
readiness probes (an httpGet probe cannot carry a Secret's token) and say nothing but up/ready;
/openapi.json describes the API, not its data. /v1/status (topics, sizes, directories) and
/metrics (the same, per partition) need the token like the records: the operator reads status
with the LogVolume's token, and nothing in the chart scrapes /metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from .auth import TokenFile
from .errors import ApiError, api_error_of
from .http_limits import CLOSING_CODES
from .metrics import Metrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
METRICS_PATH = "/metrics"

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type"}


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, allow_nan=False, separators=(",", ":")), status=status,
                        content_type="application/json")


def error_response(err: ApiError) -> web.Response:
    resp = json_response(err.body(), err.status)
    if err.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="logkeeper"'
    if err.code in CLOSING_CODES:
        resp.force_close()  # the rest of its body may still come: the connection cannot carry another request
    return resp


def route_of(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    return info.route.resource.canonical if info.route.resource is not None else "unmatched"


def metrics_middleware(metrics: Metrics) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        finally:
            metrics.observe(request.method, route_of(request), status, time.perf_counter() - started)
    return middleware


def errors_middleware(max_request_bytes: int) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await _answer_errors(request, handler, max_request_bytes)
    return middleware


async def _answer_errors(request: web.Request, handler: Handler, max_request_bytes: int) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "bad_request" if e.status < 500 else "internal_error")
        detail = e.text if e.text and not e.text.startswith(f"{e.status}:") else e.reason
        if e.status == 413:
            detail = f"the request body is larger than max.request.bytes ({max_request_bytes} bytes)"
        elif e.status == 404:
            detail = f"no endpoint at {request.path} (see /openapi.json)"
        elif e.status == 405:
            detail = f"{request.method} is not allowed on {request.path} (see /openapi.json)"
        return error_response(ApiError(e.status, code, detail))
    except Exception as e:
        err = api_error_of(e)
        if err is None and isinstance(e, ConnectionError) and (request.transport is None
                                                               or request.transport.is_closing()):
            # the client went away (http_limits.read_body reports hang-ups mid-body itself): a
            # 4xx in the metrics and one line in the log, no traceback
            log.warning("%s %s: the client closed the connection: answered 400 (%s)", request.method,
                        request.path, e)
            err = ApiError(400, "client_disconnected", "the connection was closed before the answer")
        if err is None:
            log.exception("internal error answering %s %s", request.method, request.path)
            err = ApiError(500, "internal_error", f"{type(e).__name__}: {e}")
        return error_response(err)


def needs_token(method: str, path: str, read_auth: str, metrics_auth: str) -> bool:
    """Whether a request must carry the token (``read_auth``/``metrics_auth``: "token" or "none")."""
    if method not in READ_METHODS:
        return True
    if path in OPEN_PATHS:
        return False
    if path == METRICS_PATH:
        return metrics_auth != "none"
    return read_auth != "none"


def auth_middleware(token: TokenFile, read_auth: str, metrics_auth: str) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            return await handler(request)  # 404 / 405 first
        needs = needs_token(request.method, request.path, read_auth, metrics_auth)
        if needs and not token.check(request.headers.get("Authorization")):
            if not token.usable:
                raise ApiError(503, "token_unavailable", f"no request can be authorised: {token.error}")
            raise ApiError(401, "unauthorized", "this request needs the header 'Authorization: Bearer <token>' "
                                               "with the token of the sidecar's token file")
        return await handler(request)
    return middleware
