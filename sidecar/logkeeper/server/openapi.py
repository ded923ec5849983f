"""The OpenAPI 3.0 document of the HTTP API, served at ``/openapi.json``.

Hand-written next to the handlers (http_api.py), with three parts derived rather than repeated:
the topic config schema comes from ``TOPIC_SETTINGS`` (each key, its type and doc), the bounds
that are settings (max_bytes of a fetch) come from the sidecar's settings, and the /v1/status
document's schemas (Status, LogDirStatus, PartitionStatus, Round, BacklogDetail, Uncleanable,
OfflinePartition) from its typed contract (status_schema.py). A unit test
checks that every route of the app is described and every described operation is routed, and
the fuzz test (tests/behaviour/test_sidecar_fuzz.py) checks responses against this document.
"""

from __future__ import annotations

from typing import Any

from ..log.log_config import TOPIC_SETTINGS
from ..typed_schema import schema_of
from .config import MAX_PARTITIONS_PER_TOPIC, SidecarSettings
from .record_json import JSON_FETCH_MAX_BYTES, MAX_RECORDS
from .status_schema import STATUS_TYPES

BATCH = "application/vnd.kafka.batch"
JSON = "application/json"
INT32_MAX = (1 << 31) - 1

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Schema], required: list[str] | None = None, extra: bool = False) -> Schema:
    return {"type": "object", "properties": props, "required": required if required is not None else list(props),
            "additionalProperties": extra}


INT = {"type": "integer", "format": "int64"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
NUM = {"type": "number"}

_ERRORS = {
    400: "Malformed request: bad parameter, body, config value or record batch (detail says which)",
    401: "Missing or wrong bearer token",
    404: "Unknown topic or partition",
    408: "The body did not arrive within http.body.timeout.ms (the connection is closed)",
    409: "Conflict: the topic exists, or the cleaning state does not allow this",
    413: "Body larger than max.request.bytes, or a batch larger than max.message.bytes",
    415: f"Content-Type neither {JSON} nor {BATCH}",
    416: "Offset outside [log start offset, log end offset]",
    422: "Fetched bytes are not valid UTF-8 where encoding=utf-8 was asked",
    503: "Not ready (recovering or stopping), the log directory is offline, or the token file is unreadable",
}


def _topic_config_schema() -> Schema:
    props: dict[str, Schema] = {}
    for s in TOPIC_SETTINGS.settings:
        if s.type is int:
            schema: Schema = {"type": "integer", "format": "int64"}
        elif s.type is float:
            schema = {"type": "number"}
        elif s.type is bool:
            schema = {"type": "boolean"}
        elif s.type is list:
            schema = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
        else:
            schema = {"type": "string"}
        default = s.default if not isinstance(s.default, list) else ",".join(s.default)
        schema["description"] = f"{s.doc} Kafka's default: {default}{' ' + s.unit if s.unit else ''}."
        props[s.key] = schema
    return {"type": "object", "properties": props, "additionalProperties": False,
            "description": "Topic-level overrides, by Kafka's dotted keys (values as their type or as strings)."}


def _schemas() -> dict[str, Schema]:
    offsets = {"log_start_offset": INT, "log_end_offset": INT, "last_stable_offset": INT, "recovery_point": INT}
    state: dict[str, Schema] = {"state": {**STR, "enum": ["online", "offline"],
                       "description": "offline: the log directory failed, or the partition has a copy in two; "
                                      "requests for it answer 503 storage_error"}}
    offline_why: dict[str, Schema] = {
        "paths": {"type": "array", "items": STR, "description": "Its directories on disk"},
        "error": {**STR, "description": "Why it is offline, and how to repair it"}}
    record_bytes = {"type": "string", "nullable": True,
                    "description": "UTF-8 text or base64, as the body's (or the request's) encoding says; null: none"}
    header = _obj({"key": STR, "value": record_bytes}, ["key"])
    return {
        "Error": _obj({"error": {**STR, "description": "Short code (server/errors.py)"},
                       "detail": {**STR, "description": "What was wrong, naming the field or value"},
                       "log_dir": {**STR, "description": "storage_error: the log directory at fault"},
                       "partition": {**STR, "description": "storage_error: the partition asked for"}},
                      ["error", "detail"]),
        "TopicConfigs": _topic_config_schema(),
        "TopicCreate": _obj({
            "name": {"type": "string", "pattern": TOPIC_PATTERN, "description": "Topic name"},
            "partitions": {"type": "integer", "minimum": 1, "maximum": MAX_PARTITIONS_PER_TOPIC, "default": 1},
            "configs": _ref("TopicConfigs")}, ["name"]),
        "TopicConfigsUpdate": _obj({"configs": _ref("TopicConfigs")}),
        "PartitionsGrow": _obj({"count": {"type": "integer", "minimum": 1, "maximum": MAX_PARTITIONS_PER_TOPIC,
                                          "description": "The new partition count (missing numbers below it are "
                                                         "created)"}}),
        "Topic": _obj({
            "name": STR,
            "partitions": {"type": "array", "items": {"type": "integer"}},
            "offline_partitions": {"type": "array", "items": {"type": "integer"},
                                   "description": "Partitions that exist but are offline (their log directory "
                                                  "failed, or they have a copy in two): never created again"},
            "declared": {**BOOL, "description": "Declared in the config file (its configs win at every start)"},
            "configs": {"type": "object", "description": "The topic's overrides"},
            "effective_configs": {"type": "object", "description": "Every topic key with its value in force"}}),
        "TopicList": _obj({"topics": {"type": "array", "items": _ref("Topic")}}),
        "Partition": _obj({"topic": STR, "partition": {"type": "integer"}, **state, "log_dir": STR,
                           "size_bytes": INT, "segments": {"type": "integer"}, **offsets, **offline_why},
                          ["topic", "partition", "state", "log_dir"]),
        "PartitionList": _obj({"partitions": {"type": "array", "items": _ref("Partition")}}),
        "Offsets": _obj({"topic": STR, "partition": {"type": "integer"}, **offsets}),
        "ProduceRecord": _obj({
            "key": record_bytes, "value": {**record_bytes, "description": "null: a tombstone"},
            "headers": {"type": "array", "items": header},
            "timestamp": {"type": "integer", "format": "int64", "minimum": 0, "description": "ms; default: now"}},
            []),
        "ProduceRequest": _obj({
            "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8"},
            "compression": {"type": "string", "enum": ["none", "gzip", "snappy", "lz4", "zstd"], "default": "none"},
            "records": {"type": "array", "minItems": 1, "maxItems": MAX_RECORDS, "items": _ref("ProduceRecord")}},
            ["records"]),
        "ProduceResponse": _obj({
            "topic": STR, "partition": {"type": "integer"}, "base_offset": INT, "last_offset": INT,
            "record_count": {"type": "integer"}, "batch_count": {"type": "integer"}, "log_end_offset": INT,
            "flushed": {**BOOL, "description": "True when flush=true: fsynced before this answer"},
            "recovery_point": {**INT, "description": "Offsets below it are on disk (fsynced)"}}),
        "FetchedRecord": _obj({"offset": INT, "timestamp": INT, "key": record_bytes, "value": record_bytes,
                               "headers": {"type": "array", "items": _obj({"key": STR, "value": record_bytes})}}),
        "FetchResponse": _obj({
            "topic": STR, "partition": {"type": "integer"}, "offset": INT,
            "next_offset": {**INT, "description": "The offset to fetch next"},
            "log_start_offset": INT, "log_end_offset": INT, "last_stable_offset": INT,
            "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
            "records": {"type": "array", "items": _ref("FetchedRecord")}}),
        "CleaningState": _obj({"topic": STR, "partition": {"type": "integer"},
                               "cleaning_state": {**STR, "description": "none, in-progress, aborted or paused(n)"}}),
        "CleanResult": _obj({"topic": STR, "partition": {"type": "integer"},
                             "cleaned": {**BOOL, "description": "False when the dirty section was empty"},
                             "round": {"allOf": [_ref("Round")], "nullable": True},
                             "elapsed_secs": NUM}),
        **{cls.__name__: schema_of(cls, refs=True) for cls in STATUS_TYPES},  # the contract (status_schema.py)
    }


def _response(description: str, schema: Schema | None = None, content_type: str = JSON,
              headers: dict[str, Any] | None = None) -> Schema:
    out: Schema = {"description": description}
    if schema is not None:
        out["content"] = {content_type: {"schema": schema}}
    if headers:
        out["headers"] = headers
    return out


def _op(summary: str, ok: dict[int, Schema], errors: list[int], *, params: list[Schema] | None = None,
        body: Schema | None = None, secured: bool = False, description: str = "") -> Schema:
    responses: dict[str, Schema] = {str(code): resp for code, resp in ok.items()}
    for code in sorted(set(errors) | ({401, 503} if secured else set())):
        responses[str(code)] = _response(_ERRORS[code], _ref("Error"))
    op: Schema = {"summary": summary, "responses": responses}
    if description:
        op["description"] = description
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = body
    if secured:
        op["security"] = [{"bearerAuth": []}]
    return op


def _json_body(schema: Schema) -> Schema:
    return {"required": True, "content": {JSON: {"schema": schema}}}


TOPIC_PATTERN = "^[a-zA-Z0-9._-]{1,249}$"
TOPIC = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "pattern": TOPIC_PATTERN},
         "description": "Topic name (1-249 of ASCII letters, digits, '.', '_', '-'; 400 otherwise)"}
PARTITION = {"name": "partition", "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 0, "maximum": INT32_MAX}}


def build_spec(settings: SidecarSettings) -> Schema:
    # reads need the token unless the config opened them on purpose (middleware.needs_token)
    read_secured = settings.http_read_auth != "none"
    metrics_secured = settings.http_metrics_auth != "none"
    fetch_max = min(settings.fetch_max_bytes, INT32_MAX)
    offset_headers = {name: {"schema": {"type": "integer"}, "description": desc} for name, desc in (
        ("Logkeeper-Next-Offset", "The offset to fetch next"), ("Logkeeper-Log-Start-Offset", "Log start offset"),
        ("Logkeeper-Log-End-Offset", "Log end offset"), ("Logkeeper-Last-Stable-Offset", "Last stable offset"))}
    tp = [TOPIC, PARTITION]
    paths: dict[str, Schema] = {
        "/healthz": {"get": _op("The process answers", {200: _response("Alive", _obj({"status": STR}))}, [])},
        "/readyz": {"get": _op("Recovery is done and the sidecar is not stopping",
                               {200: _response("Ready", _obj({"ready": BOOL}))}, [503])},
        "/openapi.json": {"get": _op("This document", {200: _response("OpenAPI 3.0 document", {"type": "object"})},
                                     [])},
        "/metrics": {"get": _op("Prometheus metrics with Kafka's names (server/metrics.py)",
                                {200: _response("Text exposition format 0.0.4", {"type": "string"}, "text/plain")},
                                [], secured=metrics_secured)},
        "/v1/status": {"get": _op("Log directories, partitions (sizes, offsets, dirty ratio, cleaning state, last "
                                  "round, uncleanable reason, backlog) and the cleaner's metrics",
                                  {200: _response("Status", _ref("Status"))}, [503], secured=read_secured)},
        "/v1/topics": {
            "get": _op("Topics with their partitions and configs", {200: _response("Topics", _ref("TopicList"))},
                       [503], secured=read_secured),
            "post": _op("Create a topic with partitions 0..partitions-1 and config overrides",
                        {201: _response("Created", _ref("Topic"))}, [400, 408, 409, 413],
                        body=_json_body(_ref("TopicCreate")), secured=True),
        },
        "/v1/topics/{topic}": {
            "get": _op("One topic", {200: _response("Topic", _ref("Topic"))}, [400, 404, 503], params=[TOPIC],
                       secured=read_secured),
            "delete": _op("Delete a topic and its partitions (a declared topic comes back at the next start)",
                          {204: _response("Deleted")}, [400, 404], params=[TOPIC], secured=True),
        },
        "/v1/topics/{topic}/configs": {
            "put": _op("Replace the topic's config overrides", {200: _response("Topic", _ref("Topic"))},
                       [400, 404, 408, 413], params=[TOPIC], body=_json_body(_ref("TopicConfigsUpdate")),
                       secured=True),
        },
        "/v1/topics/{topic}/partitions": {
            "get": _op("The topic's partitions: sizes and offsets", {200: _response("Partitions",
                                                                                    _ref("PartitionList"))},
                       [400, 404, 503], params=[TOPIC], secured=read_secured),
            "post": _op("Grow the topic to count partitions", {200: _response("Topic", _ref("Topic"))},
                        [400, 404, 408, 413], params=[TOPIC], body=_json_body(_ref("PartitionsGrow")),
                        secured=True),
        },
        "/v1/topics/{topic}/partitions/{partition}": {
            "delete": _op("Delete one partition", {204: _response("Deleted")}, [400, 404], params=tp, secured=True),
        },
        "/v1/topics/{topic}/partitions/{partition}/offsets": {
            "get": _op("Log start, end and last stable offsets, recovery point", {200: _response("Offsets",
                                                                                                 _ref("Offsets"))},
                       [400, 404, 503], params=tp, secured=read_secured),
        },
        "/v1/topics/{topic}/partitions/{partition}/records": {
            "post": _op(
                "Produce records: a JSON body, or record batch bytes (magic 2, base offset 0) as a Kafka producer "
                "sends them; they are validated whole and appended at once, or not at all",
                {200: _response("Appended: the offsets the records got", _ref("ProduceResponse"))},
                [400, 404, 408, 413, 415],
                params=[*tp, {"name": "flush", "in": "query", "required": False,
                              "schema": {"type": "boolean", "default": False},
                              "description": "fsync the partition before answering (the records survive a crash)"}],
                body={"required": True, "content": {
                    JSON: {"schema": _ref("ProduceRequest")},
                    BATCH: {"schema": {"type": "string", "format": "binary"}}}},
                secured=True),
            "get": _op(
                "Fetch whole batches from offset, up to max_bytes (at least one batch; JSON responses read at "
                f"most {JSON_FETCH_MAX_BYTES // (1024 * 1024)} MiB): JSON records, or the batch bytes with Accept: "
                f"{BATCH} or format=batch",
                {200: {"description": "Records", "headers": offset_headers, "content": {
                    JSON: {"schema": _ref("FetchResponse")},
                    BATCH: {"schema": {"type": "string", "format": "binary"}}}}},
                [400, 404, 416, 422, 503],
                params=[*tp,
                        {"name": "offset", "in": "query", "required": True,
                         "schema": {"type": "integer", "format": "int64", "minimum": 0}},
                        {"name": "max_bytes", "in": "query", "required": False,
                         "schema": {"type": "integer", "minimum": 1, "maximum": fetch_max,
                                    "default": min(1024 * 1024, fetch_max)}},
                        {"name": "encoding", "in": "query", "required": False,
                         "schema": {"type": "string", "enum": ["base64", "utf-8"], "default": "base64"}},
                        {"name": "format", "in": "query", "required": False,
                         "schema": {"type": "string", "enum": ["json", "batch"]},
                         "description": f"Default: batch when Accept names {BATCH}, else json"}],
                secured=read_secured),
        },
    }
    for action, summary in (("pause", "Abort the partition's cleaning in progress and pause it (paused(n) counts)"),
                            ("resume", "Undo one pause")):
        paths[f"/v1/topics/{{topic}}/partitions/{{partition}}/cleaning/{action}"] = {
            "post": _op(summary, {200: _response("The cleaning state now", _ref("CleaningState"))},
                        [400, 404, 409], params=tp, secured=True)}
    paths["/v1/topics/{topic}/partitions/{partition}/cleaning/clean"] = {
        "post": _op("Clean the partition now, one round, whatever its dirty ratio (not the active segment)",
                    {200: _response("The round", _ref("CleanResult"))}, [400, 404, 409], params=tp, secured=True)}
    return {
        "openapi": "3.0.3",
        "info": {"title": "logkeeper sidecar", "version": "1",
                 "description": "Kafka's log layer as a sidecar: topics, records, cleaning, status. Errors are "
                                "{error, detail} JSON bodies."},
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                               "description": "The token of the sidecar's token file"}},
        },
    }
