"""Handlers of CreateTopics, DeleteTopics, DescribeConfigs and IncrementalAlterConfigs (topic
configs), thin over the Sidecar's topic calls.

- CreateTopics: num_partitions -1 means 1 (Kafka's num.partitions); the replication factor must
  be 1 or -1 (one node); manual assignments may only name this node. ``validate_only`` checks the
  name, count and configs without creating. Created topics are saved as the HTTP API's are.
- DeleteTopics: by name (v6 by topic id: UNKNOWN_TOPIC_OR_PARTITION, there are no ids here);
  ``__consumer_offsets`` cannot be deleted; the committed offsets of a deleted topic are removed.
- DescribeConfigs: topic resources (type 2) list every topic key with its effective value,
  source DYNAMIC_TOPIC_CONFIG (1) when the topic overrides it, else DEFAULT_CONFIG (5); a broker
  resource (type 4) answers an empty list (broker keys live in the config file).
- IncrementalAlterConfigs: SET (0), DELETE (1), APPEND (2), SUBTRACT (3) on topic keys (the list
  operations on list keys such as cleanup.policy); other resource types get INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidConfigError
from ..log import names
from ..log.log_config import JAVA_INT_TOPIC_KEYS, TOPIC_SETTINGS, validate_topic_configs
from ..server.errors import BadRequestError
from . import error_codes as ec
from .context import BrokerContext, Connection
from .offsets_store import OFFSETS_TOPIC

TOPIC, BROKER = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_DEFAULT = 1, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
CONFIG_TYPES = {bool: 1, str: 2, int: 5, float: 6, list: 7}  # BOOLEAN, STRING, LONG, DOUBLE, LIST
CONFIG_TYPE_INT = 3


def config_text(value: Any) -> str:
    """A config value as Kafka prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _error(e: Exception) -> tuple[int, str]:
    if isinstance(e, ValueError) and not isinstance(e, InvalidConfigError):
        return ec.INVALID_TOPIC_EXCEPTION, str(e)
    if isinstance(e, BadRequestError):
        return ec.INVALID_PARTITIONS, str(e)
    code = ec.code_of(e)
    if code == ec.UNKNOWN_SERVER_ERROR:
        raise e
    return code, str(e)


def _configs_list(described: dict[str, Any]) -> list[dict[str, Any]]:
    overrides = described["configs"]
    return [{"name": k, "value": config_text(v), "read_only": False,
             "config_source": SOURCE_DYNAMIC_TOPIC if k in overrides else SOURCE_DEFAULT, "is_sensitive": False}
            for k, v in sorted(described["effective_configs"].items())]


def _create_one(ctx: BrokerContext, t: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    name = t["name"]
    out: dict[str, Any] = {"name": name, "error_code": ec.NONE, "error_message": None, "num_partitions": -1,
                           "replication_factor": -1, "configs": None}
    partitions = t["num_partitions"]
    try:
        if t["assignments"]:
            if partitions != -1 or t["replication_factor"] != -1:
                raise _Refused(ec.INVALID_REQUEST, "give either assignments or partitions and replication factor")
            if any(b != ctx.node_id for a in t["assignments"] for b in a["broker_ids"]) or \
                    any(len(a["broker_ids"]) != 1 for a in t["assignments"]):
                raise _Refused(ec.INVALID_REPLICA_ASSIGNMENT, f"assignments may only name node {ctx.node_id}, once")
            partitions = len(t["assignments"])
        elif t["replication_factor"] not in (-1, 1):
            raise _Refused(ec.INVALID_REPLICATION_FACTOR,
                           f"replication factor {t['replication_factor']}: this node is the only replica")
        partitions = 1 if partitions == -1 else partitions
        configs = {c["name"]: c["value"] for c in t["configs"] if c["value"] is not None}
        if validate_only:
            names.validate_topic(name)
            validate_topic_configs(configs)
            if not 1 <= partitions <= 1024:
                raise BadRequestError(f"partitions must be from 1 to 1024, got {partitions}")
            if name in ctx.sidecar.topic_names():
                raise _Refused(ec.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            out.update(num_partitions=partitions, replication_factor=1)
            return out
        described = ctx.sidecar.create_topic(name, partitions, configs)
        out.update(num_partitions=len(described["partitions"]), replication_factor=1,
                   configs=_configs_list(described))
    except _Refused as e:
        out.update(error_code=e.code, error_message=str(e))
    except Exception as e:
        code, message = _error(e)
        out.update(error_code=code, error_message=message)
    return out


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def create_topics(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    results = [await ctx.run(_create_one, ctx, t, req["validate_only"]) for t in req["topics"]]
    return {"throttle_time_ms": 0, "topics": results}


def _delete_one(ctx: BrokerContext, name: str | None) -> tuple[int, str | None]:
    if name is None:
        return ec.UNKNOWN_TOPIC_OR_PARTITION, "topic ids are not supported: name the topic"
    if name == OFFSETS_TOPIC:
        return ec.INVALID_TOPIC_EXCEPTION, f"{OFFSETS_TOPIC} is internal and cannot be deleted"
    try:
        ctx.sidecar.delete_topic(name)
    except Exception as e:
        return _error(e)
    return ec.NONE, None


async def delete_topics(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    wanted = req["topic_names"] if version < 6 else [t["name"] for t in req["topics"]]
    out = []
    for name in wanted:
        code, message = await ctx.run(_delete_one, ctx, name)
        if code == ec.NONE and name is not None and ctx.coordinator is not None:
            await ctx.coordinator.forget_topic(name)
        out.append({"name": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "responses": out}


def _describe_one(ctx: BrokerContext, r: dict[str, Any], synonyms: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"error_code": ec.NONE, "error_message": None, "resource_type": r["resource_type"],
                           "resource_name": r["resource_name"], "configs": []}
    if r["resource_type"] == BROKER:
        return out
    if r["resource_type"] != TOPIC:
        out.update(error_code=ec.INVALID_REQUEST, error_message=f"resource type {r['resource_type']} is not served")
        return out
    try:
        described = ctx.sidecar.describe_topic(r["resource_name"])
    except Exception as e:
        code, message = _error(e)
        out.update(error_code=code, error_message=message)
        return out
    keys = r["configuration_keys"]
    for entry in _configs_list(described):
        if keys is not None and entry["name"] not in keys:
            continue
        setting = TOPIC_SETTINGS.by_key[entry["name"]]
        entry["is_default"] = entry["config_source"] == SOURCE_DEFAULT
        entry["config_type"] = CONFIG_TYPE_INT if setting.key in JAVA_INT_TOPIC_KEYS else \
            CONFIG_TYPES.get(setting.type, 2)
        entry["synonyms"] = [{"name": entry["name"], "value": entry["value"], "source": entry["config_source"]}] \
            if synonyms else []
        out["configs"].append(entry)
    return out


async def describe_configs(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                           version: int) -> dict[str, Any]:
    results = [await ctx.run(_describe_one, ctx, r, req["include_synonyms"]) for r in req["resources"]]
    return {"throttle_time_ms": 0, "results": results}


def _as_list(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _alter_one(ctx: BrokerContext, r: dict[str, Any], validate_only: bool) -> tuple[int, str | None]:
    if r["resource_type"] != TOPIC:
        return ec.INVALID_REQUEST, "only topic configs can be altered here (broker keys live in the config file)"
    topic = r["resource_name"]
    try:
        described = ctx.sidecar.describe_topic(topic)
        new = dict(described["configs"])
        for c in r["configs"]:
            key, op, value = c["name"], c["config_operation"], c["value"]
            setting = TOPIC_SETTINGS.by_key.get(key)
            if setting is None:
                raise InvalidConfigError(f"unknown topic config key {key!r}")
            if op == SET:
                new[key] = value
            elif op == DELETE:
                new.pop(key, None)
            elif op in (APPEND, SUBTRACT):
                if setting.type is not list:
                    raise InvalidConfigError(f"{key} is not a list: APPEND and SUBTRACT do not apply")
                current = _as_list(new.get(key, described["effective_configs"][key]))
                items = _as_list(value or "")
                new[key] = [*current, *[i for i in items if i not in current]] if op == APPEND else \
                    [i for i in current if i not in items]
            else:
                return ec.INVALID_REQUEST, f"unknown config operation {op}"
        if validate_only:
            validate_topic_configs(new)
        else:
            ctx.sidecar.update_topic_configs(topic, new)
    except Exception as e:
        return _error(e)
    return ec.NONE, None


async def incremental_alter_configs(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                                    version: int) -> dict[str, Any]:
    out = []
    for r in req["resources"]:
        code, message = await ctx.run(_alter_one, ctx, r, req["validate_only"])
        out.append({"error_code": code, "error_message": message, "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"]})
    return {"throttle_time_ms": 0, "responses": out}
