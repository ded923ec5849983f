"""The HTTP API (aiohttp): thin handlers over the Sidecar service; openapi.py describes each one.

Each handler parses its parameters (params.py), runs the storage call in the thread pool
(``_run``: a slow disk blocks a pool thread, never the event loop) and answers JSON, or raw
batch bytes for ``application/vnd.kafka.batch``. Bodies are read whole, bounded by
max.request.bytes and in time by http.body.timeout.ms (http_limits.read_body); JSON produce
bodies are parsed in the pool too. Every path but /healthz, /readyz and /openapi.json needs the
bearer token unless the config opens reads on purpose (middleware.py).

    GET    /healthz                                                   the process answers
    GET    /readyz                                                    recovery done, not stopping
    GET    /openapi.json                                              this API's OpenAPI 3.0 document
    GET    /metrics                                                   Prometheus text (metrics.py)
    GET    /v1/status                                                 status.py
    GET    /v1/topics                                                 topics with partitions and configs
    POST   /v1/topics                                                 create {name, partitions, configs}
    GET    /v1/topics/{topic}                                         one topic
    DELETE /v1/topics/{topic}                                         delete it and its partitions
    PUT    /v1/topics/{topic}/configs                                 replace its overrides {configs}
    GET    /v1/topics/{topic}/partitions                              its partitions: sizes, offsets
    POST   /v1/topics/{topic}/partitions                              grow to {count} partitions
    DELETE /v1/topics/{topic}/partitions/{partition}                  delete one partition
    GET    /v1/topics/{topic}/partitions/{partition}/offsets          start, end, stable offsets
    POST   /v1/topics/{topic}/partitions/{partition}/records          produce (JSON or batch bytes)
    GET    /v1/topics/{topic}/partitions/{partition}/records          fetch (JSON or batch bytes)
    POST   /v1/topics/{topic}/partitions/{partition}/cleaning/pause   abort and pause cleaning
    POST   /v1/topics/{topic}/partitions/{partition}/cleaning/resume  undo one pause
    POST   /v1/topics/{topic}/partitions/{partition}/cleaning/clean   one cleaning round now
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from .auth import TokenFile
from .config import SidecarSettings
from .errors import ApiError
from .http_limits import BodyBudget, budget_middleware, read_body
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import Metrics
from .middleware import auth_middleware, errors_middleware, json_response, metrics_middleware
from .openapi import build_spec
from .params import (
    BATCH_CONTENT_TYPE,
    INT32_MAX,
    JSON_CONTENT_TYPE,
    MAX_SMALL_BODY_BYTES,
    configs_field,
    int_field,
    json_object,
    media_type,
    parse_bool,
    parse_choice,
    parse_int,
    topic_name,
    topic_partition,
)
from .record_json import ENCODINGS, JSON_FETCH_MAX_BYTES, parse_produce_body, records_to_json
from .service import Sidecar
from .status import build_status
from .status_schema import Status

T = TypeVar("T")
DEFAULT_FETCH_BYTES = 1024 * 1024
FORMATS = ("json", "batch")
API_KEY: web.AppKey[Api] = web.AppKey("api")


class Api:
    def __init__(self, sidecar: Sidecar, settings: SidecarSettings, token: TokenFile, pool: ThreadPoolExecutor) -> None:
        self.sidecar = sidecar
        self.settings = settings
        self.token = token
        self.pool = pool
        self.metrics = Metrics(self._status_or_none)
        self.body_budget = BodyBudget(settings.http_queued_max_request_bytes)
        self.spec = build_spec(settings)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def _status_or_none(self) -> Status | None:
        return build_status(self.sidecar) if self.sidecar.ready else None

    async def _small_body(self, request: web.Request) -> bytes:
        """The body of a topic or config change (JSON of a few fields)."""
        return await read_body(request, MAX_SMALL_BODY_BYTES, self.settings.http_body_timeout_ms / 1000.0,
                               "this endpoint's limit", self.body_budget)

    # ------------------------------------------------------------------ health, spec, metrics, status
    async def healthz(self, _request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, _request: web.Request) -> web.Response:
        if self.sidecar.ready:
            return json_response({"ready": True})
        why = self.sidecar.start_error or ("shutting down" if self.sidecar.stopping else "recovering the logs")
        raise ApiError(503, "not_ready", f"not ready: {why}")

    async def openapi(self, _request: web.Request) -> web.Response:
        return json_response(self.spec)

    async def prometheus(self, _request: web.Request) -> web.Response:
        body = await self._run(self.metrics.exposition)
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def status(self, _request: web.Request) -> web.Response:
        return json_response(await self._run(build_status, self.sidecar))

    # ------------------------------------------------------------------ topics
    async def list_topics(self, _request: web.Request) -> web.Response:
        return json_response({"topics": await self._run(self.sidecar.list_topics)})

    async def create_topic(self, request: web.Request) -> web.Response:
        doc = json_object(await self._small_body(request), ("name", "partitions", "configs"), ("name",))
        name = doc["name"]
        if not isinstance(name, str):
            raise ApiError(400, "bad_request", "field 'name' must be a string")
        topic = await self._run(self.sidecar.create_topic, name, int_field(doc, "partitions", 1), configs_field(doc))
        return json_response(topic, 201)

    async def get_topic(self, request: web.Request) -> web.Response:
        return json_response(await self._run(self.sidecar.describe_topic, topic_name(request.match_info)))

    async def delete_topic(self, request: web.Request) -> web.Response:
        await self._run(self.sidecar.delete_topic, topic_name(request.match_info))
        return web.Response(status=204)

    async def put_configs(self, request: web.Request) -> web.Response:
        topic = topic_name(request.match_info)
        doc = json_object(await self._small_body(request), ("configs",), ("configs",))
        return json_response(await self._run(self.sidecar.update_topic_configs, topic, configs_field(doc)))

    async def list_partitions(self, request: web.Request) -> web.Response:
        return json_response({"partitions": await self._run(self.sidecar.partitions, topic_name(request.match_info))})

    async def add_partitions(self, request: web.Request) -> web.Response:
        topic = topic_name(request.match_info)
        doc = json_object(await self._small_body(request), ("count",), ("count",))
        return json_response(await self._run(self.sidecar.add_partitions, topic, int_field(doc, "count")))

    async def delete_partition(self, request: web.Request) -> web.Response:
        await self._run(self.sidecar.delete_partition, topic_partition(request.match_info))
        return web.Response(status=204)

    async def offsets(self, request: web.Request) -> web.Response:
        return json_response(await self._run(self.sidecar.offsets, topic_partition(request.match_info)))

    # ------------------------------------------------------------------ records
    async def produce(self, request: web.Request) -> web.Response:
        tp = topic_partition(request.match_info)
        flush = parse_bool(request.query.get("flush"), "flush")
        kind = media_type(request.content_type)
        if kind not in (JSON_CONTENT_TYPE, BATCH_CONTENT_TYPE):
            raise ApiError(415, "unsupported_media_type", f"Content-Type must be {JSON_CONTENT_TYPE} or "
                                                          f"{BATCH_CONTENT_TYPE}, got {request.content_type!r}")
        raw = await read_body(request, self.settings.max_request_bytes, self.settings.http_body_timeout_ms / 1000.0,
                              "max.request.bytes", self.body_budget)
        if not raw:
            raise ApiError(400, "bad_request", "the body is empty: send records")
        if kind == JSON_CONTENT_TYPE:
            body = await self._run(parse_produce_body, raw, self.sidecar.clock_ms())
            data = await self._run(body.batch)
        else:
            data = raw
        result = await self._run(self.sidecar.produce, tp, data, flush=flush)
        return json_response({"topic": tp.topic, "partition": tp.partition, **result.to_dict()})

    async def fetch(self, request: web.Request) -> web.Response:
        tp = topic_partition(request.match_info)
        q = request.query
        offset = parse_int(q.get("offset"), "offset")
        max_bytes = parse_int(q.get("max_bytes"), "max_bytes", default=min(DEFAULT_FETCH_BYTES,
                              self.settings.fetch_max_bytes), minimum=1,
                              maximum=min(self.settings.fetch_max_bytes, INT32_MAX))
        accept_batch = BATCH_CONTENT_TYPE in request.headers.get("Accept", "")
        fmt = parse_choice(q.get("format"), "format", FORMATS, "batch" if accept_batch else "json")
        encoding = parse_choice(q.get("encoding"), "encoding", ENCODINGS, "base64")
        if fmt == "json":
            max_bytes = min(max_bytes, JSON_FETCH_MAX_BYTES)  # Python objects per record: bound the memory
        result = await self._run(self.sidecar.fetch, tp, offset, max_bytes)
        headers = {"Logkeeper-Next-Offset": str(result.next_offset),
                   "Logkeeper-Log-Start-Offset": str(result.log_start_offset),
                   "Logkeeper-Log-End-Offset": str(result.log_end_offset),
                   "Logkeeper-Last-Stable-Offset": str(result.last_stable_offset)}
        if fmt == "batch":
            return web.Response(body=result.data, headers={**headers, "Content-Type": BATCH_CONTENT_TYPE})
        records = await self._run(records_to_json, result.data, offset, encoding)
        resp = json_response({"topic": tp.topic, "partition": tp.partition, "offset": offset,
                              "next_offset": result.next_offset, "log_start_offset": result.log_start_offset,
                              "log_end_offset": result.log_end_offset,
                              "last_stable_offset": result.last_stable_offset, "encoding": encoding,
                              "records": records})
        resp.headers.update(headers)
        return resp

    # ------------------------------------------------------------------ cleaning
    async def pause(self, request: web.Request) -> web.Response:
        tp = topic_partition(request.match_info)
        await self._run(self.sidecar.partition_log, tp)
        state = await self._run(self.sidecar.cleaning.pause, tp)
        return json_response({"topic": tp.topic, "partition": tp.partition, "cleaning_state": state})

    async def resume(self, request: web.Request) -> web.Response:
        tp = topic_partition(request.match_info)
        await self._run(self.sidecar.partition_log, tp)
        state = await self._run(self.sidecar.cleaning.resume, tp)
        return json_response({"topic": tp.topic, "partition": tp.partition, "cleaning_state": state})

    async def clean(self, request: web.Request) -> web.Response:
        tp = topic_partition(request.match_info)
        await self._run(self.sidecar.partition_log, tp)
        started = time.monotonic()
        report = await self._run(self.sidecar.cleaning.clean_now, tp)
        return json_response({"topic": tp.topic, "partition": tp.partition, "cleaned": report is not None,
                              "round": report,
                              "elapsed_secs": round(time.monotonic() - started, 6)})


def build_app(api: Api) -> web.Application:
    app = web.Application(
        client_max_size=api.settings.max_request_bytes,
        middlewares=[metrics_middleware(api.metrics), errors_middleware(api.settings.max_request_bytes),
                     auth_middleware(api.token, api.settings.http_read_auth, api.settings.http_metrics_auth),
                     budget_middleware(api.body_budget)])
    app[API_KEY] = api
    partition = "/v1/topics/{topic}/partitions/{partition}"
    r = app.router
    r.add_get("/healthz", api.healthz, allow_head=False)
    r.add_get("/readyz", api.readyz, allow_head=False)
    r.add_get("/openapi.json", api.openapi, allow_head=False)
    r.add_get("/metrics", api.prometheus, allow_head=False)
    r.add_get("/v1/status", api.status, allow_head=False)
    r.add_get("/v1/topics", api.list_topics, allow_head=False)
    r.add_post("/v1/topics", api.create_topic)
    r.add_get("/v1/topics/{topic}", api.get_topic, allow_head=False)
    r.add_delete("/v1/topics/{topic}", api.delete_topic)
    r.add_put("/v1/topics/{topic}/configs", api.put_configs)
    r.add_get("/v1/topics/{topic}/partitions", api.list_partitions, allow_head=False)
    r.add_post("/v1/topics/{topic}/partitions", api.add_partitions)
    r.add_delete(partition, api.delete_partition)
    r.add_get(partition + "/offsets", api.offsets, allow_head=False)
    r.add_post(partition + "/records", api.produce)
    r.add_get(partition + "/records", api.fetch, allow_head=False)
    r.add_post(partition + "/cleaning/pause", api.pause)
    r.add_post(partition + "/cleaning/resume", api.resume)
    r.add_post(partition + "/cleaning/clean", api.clean)
    return app
