"""The operator's own settings: defined once here, read from the environment by the operator
(``LOGKEEPER_OPERATOR_`` + key upper-cased, dots as underscores), set by the chart from
``values.yaml``'s ``operator.settings`` (same keys and defaults; chartgen.py writes the values
schema from this group and a unit test checks values.yaml against it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from logkeeper.errors import InvalidConfigError
from logkeeper.settings import Setting, SettingGroup, at_least, between

ENV_PREFIX = "LOGKEEPER_OPERATOR_"

OPERATOR_SETTINGS = SettingGroup("operator", (
    Setting("status.interval.seconds", float, 15.0,
            "How often each LogVolume's sidecar /v1/status is read into its status.", between(1, 3600), "seconds"),
    Setting("reconcile.interval.seconds", float, 60.0,
            "How often every LogVolume's children are compared with what the operator owns and repaired "
            "(a deleted or changed StatefulSet, Service, ConfigMap, ... comes back within this).",
            between(5, 3600), "seconds"),
    Setting("compaction.interval.seconds", float, 10.0,
            "How often each unfinished CompactionJob takes its next step (and deleted ones are cancelled).",
            between(1, 3600), "seconds"),
    Setting("retry.delay.seconds", int, 15, "Delay before a handler retries after a transient failure.",
            between(1, 600), "seconds"),
    Setting("max.retries", int, 40, "Transient failures of one change before the operator gives up on it.",
            at_least(1)),
    Setting("lease.duration.seconds", float, 15.0,
            "Leader election: how long a leader's Lease holds without renewal; a standby takes over at most "
            "this plus lease.retry.seconds after the leader died.", between(2, 300), "seconds"),
    Setting("lease.renew.seconds", float, 5.0,
            "Leader election: how often the leader renews its Lease (it stops leading when it could not for "
            "two thirds of lease.duration.seconds).", between(1, 100), "seconds"),
    Setting("lease.retry.seconds", float, 2.0,
            "Leader election: how often a standby tries to take the Lease.", between(0.5, 60), "seconds"),
))


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


def load(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{key: value}``: the defaults overlaid with the environment (InvalidConfigError names the key)."""
    env = os.environ if environ is None else environ
    overrides = {s.key: env[env_name(s.key)] for s in OPERATOR_SETTINGS.settings if env_name(s.key) in env}
    values = OPERATOR_SETTINGS.resolve(overrides)
    out = {s.key: values[s.attr] for s in OPERATOR_SETTINGS.settings}
    if out["lease.renew.seconds"] * 1.5 >= out["lease.duration.seconds"]:
        raise InvalidConfigError(f"{env_name('lease.renew.seconds')}: must be under two thirds of "
                                 f"lease.duration.seconds ({out['lease.duration.seconds']:g}), got "
                                 f"{out['lease.renew.seconds']:g}")
    return out
