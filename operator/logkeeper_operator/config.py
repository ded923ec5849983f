"""The operator's own settings: defined once here, read from the environment by the operator
(``LOGKEEPER_OPERATOR_`` + key upper-cased, dots as underscores), set by the chart from
``values.yaml``'s ``operator.settings`` (same keys and defaults; chartgen.py writes the values
schema from this group and a unit test checks values.yaml against it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from logkeeper.settings import Setting, SettingGroup, at_least, between

ENV_PREFIX = "LOGKEEPER_OPERATOR_"

OPERATOR_SETTINGS = SettingGroup("operator", (
    Setting("status.interval.seconds", float, 15.0,
            "How often each LogVolume's sidecar /v1/status is read into its status.", between(1, 3600), "seconds"),
    Setting("compaction.interval.seconds", float, 10.0,
            "How often each unfinished CompactionJob takes its next step.", between(1, 3600), "seconds"),
    Setting("retry.delay.seconds", int, 15, "Delay before a handler retries after a transient failure.",
            between(1, 600), "seconds"),
    Setting("max.retries", int, 40, "Transient failures of one change before the operator gives up on it.",
            at_least(1)),
))


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


def load(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{key: value}``: the defaults overlaid with the environment (InvalidConfigError names the key)."""
    env = os.environ if environ is None else environ
    overrides = {s.key: env[env_name(s.key)] for s in OPERATOR_SETTINGS.settings if env_name(s.key) in env}
    values = OPERATOR_SETTINGS.resolve(overrides)
    return {s.key: values[s.attr] for s in OPERATOR_SETTINGS.settings}
