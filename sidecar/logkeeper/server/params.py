"""Parsing the parameters and small JSON bodies of API requests; every failure is a BadRequestError
naming the parameter (a 400 with a clear message, never a 500)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..log import names
from ..log.names import TopicPartition
from .errors import BadRequestError

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
BATCH_CONTENT_TYPE = "application/vnd.kafka.batch"
JSON_CONTENT_TYPE = "application/json"
MAX_SMALL_BODY_BYTES = 1024 * 1024  # topic and config bodies


def parse_int(raw: str | None, name: str, *, default: int | None = None, minimum: int = 0,
              maximum: int = INT64_MAX) -> int:
    if raw is None or raw == "":
        if default is None:
            raise BadRequestError(f"query parameter {name} is required")
        return default
    text = raw.strip()
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise BadRequestError(f"{name} must be an integer, got {raw!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise BadRequestError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def parse_bool(raw: str | None, name: str, *, default: bool = False) -> bool:
    if raw is None or raw == "":
        return default
    text = raw.strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise BadRequestError(f"{name} must be true or false, got {raw!r}")


def parse_choice(raw: str | None, name: str, choices: Sequence[str], default: str) -> str:
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise BadRequestError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def topic_partition(match_info: Mapping[str, str]) -> TopicPartition:
    return TopicPartition(topic_name(match_info), parse_int(match_info["partition"], "partition", maximum=INT32_MAX))


def topic_name(match_info: Mapping[str, str]) -> str:
    topic = match_info["topic"]
    try:
        names.validate_topic(topic)
    except ValueError as e:
        raise BadRequestError(str(e)) from None
    return topic


def json_object(raw: bytes, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
    """A JSON object body with only ``allowed`` fields and every ``required`` one."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise BadRequestError(f"the body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadRequestError("the body must be a JSON object")
    for key in doc:
        if key not in allowed:
            raise BadRequestError(f"unknown field {key!r} (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in doc:
            raise BadRequestError(f"field {key!r} is required")
    return doc


def configs_field(doc: Mapping[str, Any]) -> dict[str, Any]:
    configs = doc.get("configs", {})
    if configs is None:
        return {}
    if not isinstance(configs, dict):
        raise BadRequestError("configs must be an object of topic config keys to values")
    for key, value in configs.items():
        if not isinstance(value, str | int | float | bool | list) or (
                isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise BadRequestError(f"configs.{key}: must be a string, number, boolean or array of strings")
    return configs


def int_field(doc: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"field {name!r} must be an integer, got {value!r}")
    return value


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()
