"""The sidecar's config file, rendered from a LogVolume spec (format: logkeeper/server/config.py).

    sidecar:  listen [127.0.0.1:<port>] (the pod adds its own IP through LOGKEEPER_LISTEN:
              builders.listen_env), token.file <TOKEN_DIR>/token, the Kafka listener's
              kafka.sasl.users.file / kafka.ssl.* at the mounted Secrets of
              spec.sidecar.kafkaSecurity (kafka_security_keys), + spec.sidecar.settings
              (reads need the token unless they set http.read.auth: none)
    node:     log.dirs [/data/<volume id>/log, ...] + spec.node (broker keys)
    cleaner:  the CleanerPolicy's keys, or spec.cleaner; with spec.spark.autoSubmit the operator
              owns log.cleaner.offload.{enable,runner,spark.master,timeout.ms}: the sidecar hands
              backlogs off and waits for the CompactionJob the operator runs (compaction.py)
    topics:   {name: {partitions, configs}} from spec.topics

The rendered document is loaded by the sidecar's own loader (``config_from_document``) before it
is applied, so the operator never writes a file the sidecar would refuse.

What the sidecar can change live and what rolls the pod:
- topics (new topics, more partitions, changed topic configs) are applied through the sidecar's
  API (POST /v1/topics, POST .../partitions, PUT .../configs) and also written to the file, which
  the sidecar reads again at its next start;
- everything else (sidecar, node and cleaner keys, volumes, image, resources, app containers) is
  read only at start: ``restart_hash`` covers the file less its topics, and the pod template
  carries it as an annotation, so a change there rolls the pod.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from logkeeper.errors import InvalidConfigError
from logkeeper.server.config import config_from_document, validate_topic_configs

from .names import (
    KAFKA_TLS_DIR,
    KAFKA_USERS_DIR,
    TLS_CA_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TOKEN_DIR,
    TOKEN_KEY,
    log_dir,
)
from .spec import LogVolumeSpec, SpecError, TopicSpec


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def offload_keys(spec: LogVolumeSpec) -> dict[str, Any]:
    """The cleaner keys that make the sidecar wait for the operator's jobs (none without autoSubmit).
    The sidecar's bound on a hand-off covers every attempt the CompactionJob may make, plus a minute."""
    if not spec.spark.auto_submit:
        return {}
    return {"log.cleaner.offload.enable": True, "log.cleaner.offload.runner": "external",
            "log.cleaner.offload.spark.master": spec.spark.master,
            "log.cleaner.offload.timeout.ms": (spec.spark.max_attempts * spec.spark.timeout_seconds + 60) * 1000}


def kafka_security_keys(spec: LogVolumeSpec) -> dict[str, Any]:
    """The Kafka listener's file keys, at the paths where the sidecar container has the Secrets of
    spec.sidecar.kafkaSecurity (builders.kafka_security_volumes); none without them."""
    ks = spec.sidecar.kafka_security
    out: dict[str, Any] = {}
    if ks.users_secret:
        out["kafka.sasl.users.file"] = f"{KAFKA_USERS_DIR}/{ks.users_key}"
    if ks.tls_secret:
        out["kafka.ssl.certificate.location"] = f"{KAFKA_TLS_DIR}/{TLS_CERT_KEY}"
        out["kafka.ssl.key.location"] = f"{KAFKA_TLS_DIR}/{TLS_KEY_KEY}"
        if ks.key_password_key:
            out["kafka.ssl.key.password.file"] = f"{KAFKA_TLS_DIR}/{ks.key_password_key}"
        if ks.client_auth != "none":
            out["kafka.ssl.client.auth"] = ks.client_auth
            out["kafka.ssl.ca.location"] = f"{KAFKA_TLS_DIR}/{TLS_CA_KEY}"
    return out


def config_document(spec: LogVolumeSpec, cleaner: dict[str, Any]) -> dict[str, Any]:
    """The config as a mapping (``cleaner``: the resolved keys, from the policy or inline)."""
    cleaner = {**cleaner, **offload_keys(spec)}
    return {
        "sidecar": {"listen": [f"127.0.0.1:{spec.sidecar.port}"], "token.file": f"{TOKEN_DIR}/{TOKEN_KEY}",
                    **kafka_security_keys(spec),
                    **{k: _plain(v) for k, v in sorted(spec.sidecar.settings.items())}},
        "node": {"log.dirs": [log_dir(v.id) for v in spec.volumes],
                 **{k: _plain(v) for k, v in sorted(spec.node.items())}},
        "cleaner": {k: _plain(v) for k, v in sorted(cleaner.items())},
        "topics": {t.name: {"partitions": t.partitions,
                            "configs": {k: _plain(v) for k, v in sorted(t.configs.items())}}
                   for t in spec.topics},
    }


def render_config(spec: LogVolumeSpec, cleaner: dict[str, Any]) -> str:
    """The file's text, checked by the sidecar's loader (SpecError when it refuses it)."""
    doc = config_document(spec, cleaner)
    try:
        config_from_document(doc, "the rendered sidecar config", {})
    except InvalidConfigError as e:
        raise SpecError("spec", str(e)) from None
    header = "# Rendered by the logkeeper operator from the LogVolume; edits are overwritten.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def restart_hash(spec: LogVolumeSpec, cleaner: dict[str, Any]) -> str:
    """Hash of what the sidecar reads only at start (the config less its topics)."""
    doc = config_document(spec, cleaner)
    doc.pop("topics")
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _normal(configs: Any) -> dict[str, Any] | None:
    try:
        return validate_topic_configs(configs or {})
    except InvalidConfigError:
        return None


def topic_actions(desired: tuple[TopicSpec, ...] | list[TopicSpec],
                  actual: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """What to ask a running sidecar so its topics match the spec: ("create", name, TopicSpec),
    ("grow", name, count), ("configs", name, configs). Topics the spec no longer names are kept
    (their data stays; the API's DELETE removes them)."""
    have = {str(t.get("name")): t for t in actual}
    out: list[tuple[str, str, Any]] = []
    for t in desired:
        cur = have.get(t.name)
        if cur is None:
            out.append(("create", t.name, t))
            continue
        # offline partitions exist (their directory failed): counted, so the sync never asks for
        # them again (a new empty log would restart their offsets at 0 on another disk)
        if len(cur.get("partitions") or []) + len(cur.get("offline_partitions") or []) < t.partitions:
            out.append(("grow", t.name, t.partitions))
        if _normal(cur.get("configs")) != t.configs:
            out.append(("configs", t.name, {k: _plain(v) for k, v in t.configs.items()}))
    return out
