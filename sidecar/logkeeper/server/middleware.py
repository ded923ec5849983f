"""aiohttp middlewares: request metrics, JSON errors, bearer-token checks (outermost first).

- ``metrics``: counts every answer by method, route (the route's pattern, ``unmatched`` for
  none) and status, and times it.
- ``errors``: every failure becomes ``{"error": CODE, "detail": MESSAGE}`` with the status of
  server/errors.py; aiohttp's own (404 unknown path, 405 method, 413 body too large) included.
  An unexpected exception is logged with its traceback and answered 500 internal_error.
- ``auth``: a request that mutates (any method but GET, HEAD and OPTIONS), or any request
  under ``/v1/`` but ``/v1/status`` when ``auth.reads`` is set, needs ``Authorization: Bearer
  <token>``: 401 without it or with a wrong one (before the body is read), 503 when the token file
  cannot be read. Unknown paths are answered 404/405 first.
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
from .metrics import Metrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_READ_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/status"})

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type"}


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, allow_nan=False, separators=(",", ":")), status=status,
                        content_type="application/json")


def error_response(err: ApiError) -> web.Response:
    resp = json_response(err.body(), err.status)
    if err.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="logkeeper"'
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
        if err is None:
            log.exception("internal error answering %s %s", request.method, request.path)
            err = ApiError(500, "internal_error", f"{type(e).__name__}: {e}")
        return error_response(err)


def auth_middleware(token: TokenFile, auth_reads: bool) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            return await handler(request)  # 404 / 405 first
        needs = request.method not in READ_METHODS or (auth_reads and request.path not in OPEN_READ_PATHS)
        if needs and not token.check(request.headers.get("Authorization")):
            if not token.usable:
                raise ApiError(503, "token_unavailable", f"no request can be authorised: {token.error}")
            raise ApiError(401, "unauthorized", "this request needs the header 'Authorization: Bearer <token>' "
                                               "with the token of the sidecar's token file")
        return await handler(request)
    return middleware
