"""The CRDs under crds/, generated from the settings' single definitions (house rule 4).

    python -m logkeeper_operator.crdgen crds/            write crds/<plural>.logkeeper.io.yaml
    python -m logkeeper_operator.crdgen --check crds/    exit 1 when a file differs (make crds-check)

Each Kafka key of a spec section is a typed property with its bounds and enums, taken from its
Setting (type, validator's schema, doc): topic keys (log/log_config.py TOPIC_SETTINGS) under
``spec.topics[].configs``, broker keys (log/manager_config.py) under ``spec.node``, cleaner keys
(cleaner/config.py) under ``spec.cleaner`` and CleanerPolicy ``spec.cleaner``, sidecar keys
(server/config.py) under ``spec.sidecar.settings``.

Kafka keys carry no schema ``default``: an absent key means "Kafka's default, or the broker-level
one" (a topic key set by a schema default would hide ``spec.node``'s broker default), so the
default is written in the description instead. Structural fields (partitions, deleteClaim, port,
spark mode, timeouts, attempts) have schema defaults.

What the schema cannot say (a claim and a size together, both a policy and an inline cleaner)
is in CEL rules (x-kubernetes-validations), and the operator checks all of it again (spec.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from logkeeper.log.log_config import TOPIC_SETTINGS
from logkeeper.server.config import INT32_MAX, JAVA_INT_TOPIC_KEYS, MAX_PARTITIONS_PER_TOPIC
from logkeeper.settings import LONG_MAX, Setting, schema_of

from .compaction import PHASES
from .names import (
    CLEANERPOLICY,
    COMPACTIONJOB,
    GROUP,
    KAFKA_TLS_DIR,
    KAFKA_USERS_DIR,
    KAFKA_USERS_KEY,
    LOGVOLUME,
    PLURALS,
    SHORT_NAMES,
    VERSION,
)
from .spec import (
    CLEANER_KEYS,
    CLIENT_AUTH,
    LISTEN_MAX_ITEMS,
    LISTEN_MAX_LENGTH,
    MAX_TOPICS,
    MAX_VOLUMES,
    NODE_KEYS,
    POD_IP_KEYS,
    PULL_POLICIES,
    SECRET_KEY_PATTERN,
    SECRET_NAME_PATTERN,
    SIDECAR_KEYS,
    SPARK_MODES,
    VOLUME_ID_MAX,
)

Schema = dict[str, Any]
TOPIC_NAME_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


def _default_text(setting: Setting) -> str:
    d = setting.default
    if d is None:
        return "unset"
    if d == LONG_MAX:
        return "Long.MAX_VALUE"
    if isinstance(d, list):
        return ",".join(d) or "empty"
    if isinstance(d, bool):
        return str(d).lower()
    return str(d)


def setting_schema(setting: Setting) -> Schema:
    unit = f" Unit: {setting.unit}." if setting.unit else ""
    out: Schema = {"description": f"{setting.doc}{unit} Default: {_default_text(setting)}."}
    hints = schema_of(setting.validator)
    if setting.type is int:
        out.update({"type": "integer", "format": "int64"})
        if setting.key in JAVA_INT_TOPIC_KEYS:
            out["maximum"] = INT32_MAX
        for k in ("minimum", "maximum"):
            if k in hints:
                out[k] = int(hints[k])
    elif setting.type is float:
        out["type"] = "number"
        out.update({k: hints[k] for k in ("minimum", "maximum") if k in hints})
    elif setting.type is bool:
        out["type"] = "boolean"
    elif setting.type is list:
        out.update({"type": "array", "items": hints.get("items", {"type": "string"})})
    else:
        out["type"] = "string"
        if "enum" in hints:
            out["enum"] = list(hints["enum"])
    return out


def settings_object(settings: Iterable[Setting], description: str) -> Schema:
    return {"type": "object", "description": description,
            "properties": {s.key: setting_schema(s) for s in sorted(settings, key=lambda s: s.key)}}


def _resources() -> Schema:
    qty: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    return {"type": "object", "description": "Compute resources (a core/v1 ResourceRequirements).",
            "properties": {"limits": {"type": "object", "additionalProperties": qty},
                           "requests": {"type": "object", "additionalProperties": qty}}}


def _cleaner_settings(what: str) -> Schema:
    return settings_object(CLEANER_KEYS.values(), f"Kafka's log.cleaner.* keys {what} (cleaner/config.py).")


def _cel_key(key: str) -> str:
    """A property name as CEL sees it (Kubernetes escapes '.' and '-')."""
    return key.replace("__", "__underscores__").replace(".", "__dot__").replace("-", "__dash__")


# Kafka listeners by protocol (as config.parse_kafka_listener reads them: case-insensitive); CEL's
# r'' strings keep the regex's backslash.
_LISTEN = f"self.settings.{_cel_key('kafka.listen')}"
_HAS_LISTEN = f"has(self.settings) && has({_LISTEN})"
_TLS_LISTENER = f"({_HAS_LISTEN} && {_LISTEN}.exists(a, a.matches(r'(?i)^\\s*(sasl_)?ssl://')))"
_SASL_LISTENER = f"({_HAS_LISTEN} && {_LISTEN}.exists(a, a.matches(r'(?i)^\\s*sasl_')))"


def kafka_security() -> Schema:
    secret_name: Schema = {"type": "string", "maxLength": 253, "pattern": SECRET_NAME_PATTERN}
    secret_key: Schema = {"type": "string", "maxLength": 253, "pattern": SECRET_KEY_PATTERN}
    return {
        "type": "object",
        "description": f"Secrets for the Kafka listener (settings kafka.listen): the kubelet mounts them read-only "
                       f"in the sidecar container ({KAFKA_USERS_DIR}, {KAFKA_TLS_DIR}) and the operator sets "
                       f"kafka.sasl.users.file and kafka.ssl.*; it never reads them.",
        "x-kubernetes-validations": [
            {"rule": "!has(self.usersKey) || has(self.usersSecret)", "message": "usersKey needs usersSecret"},
            {"rule": "!has(self.keyPasswordKey) || has(self.tlsSecret)", "message": "keyPasswordKey needs tlsSecret"},
            {"rule": "!has(self.clientAuth) || self.clientAuth == 'none' || has(self.tlsSecret)",
             "message": "clientAuth requested or required needs tlsSecret (its ca.crt checks client certificates)"},
        ],
        "properties": {
            "usersSecret": {**secret_name, "description": "Secret of SASL users, one name:password a line (needed "
                                                          "by SASL_PLAINTEXT and SASL_SSL listeners; a change is "
                                                          "picked up without a restart)."},
            "usersKey": {**secret_key, "description": f"Key of usersSecret holding the lines. Default: "
                                                      f"{KAFKA_USERS_KEY}."},
            "tlsSecret": {**secret_name, "description": "A kubernetes.io/tls Secret: tls.crt (the chain), tls.key "
                                                        "and, for clientAuth, ca.crt (needed by SSL and SASL_SSL "
                                                        "listeners)."},
            "keyPasswordKey": {**secret_key, "description": "Key of tlsSecret holding tls.key's password, if it "
                                                            "has one."},
            "clientAuth": {"type": "string", "enum": list(CLIENT_AUTH), "default": "none",
                           "description": "Client certificates of SSL listeners, checked against tlsSecret's "
                                          "ca.crt (Kafka's ssl.client.auth)."},
        },
    }


def sidecar_settings() -> Schema:
    out = settings_object(SIDECAR_KEYS.values(), "The sidecar's own keys (server/config.py); listen, token.file, "
                                                 "kafka.sasl.users.file and kafka.ssl.* are set by the operator "
                                                 "(kafkaSecurity). kafka.listen and kafka.advertised.listeners "
                                                 "may name the pod's IP as $(POD_IP), e.g. "
                                                 "SASL_SSL://[$(POD_IP)]:9093.")
    for key in POD_IP_KEYS:  # bounded, so the API server can bound the cost of the rules on kafka.listen
        prop = out["properties"][key]
        prop["maxItems"] = LISTEN_MAX_ITEMS
        prop["items"] = {**prop["items"], "maxLength": LISTEN_MAX_LENGTH}
    return out


def logvolume_spec() -> Schema:
    volume: Schema = {
        "type": "object", "required": ["id"],
        "x-kubernetes-validations": [{"rule": "has(self.size) != has(self.existingClaim)",
                                      "message": "give either size (a new claim) or existingClaim, not both"}],
        "properties": {
            "id": {"type": "string", "maxLength": VOLUME_ID_MAX, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                   "description": "The volume's id: mounted at /data/<id>, log directory /data/<id>/log."},
            "size": {"type": "string", "pattern": QUANTITY_PATTERN,
                     "description": "Size of a new claim made by the operator (e.g. 10Gi)."},
            "storageClassName": {"type": "string", "description": "Storage class of a new claim."},
            "existingClaim": {"type": "string", "description": "Use this PersistentVolumeClaim instead of "
                                                               "making one (never deleted by the operator)."},
            "deleteClaim": {"type": "boolean", "default": False,
                            "description": "Delete the claim (and its data) with the LogVolume."},
            "accessModes": {"type": "array", "items": {"type": "string", "enum": [
                "ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany"]},
                "description": "Access modes of a new claim (default ReadWriteOnce; ReadWriteMany for Spark "
                               "on Kubernetes executors)."},
        },
    }
    topic: Schema = {
        "type": "object", "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": TOPIC_NAME_PATTERN},
            "partitions": {"type": "integer", "minimum": 1, "maximum": MAX_PARTITIONS_PER_TOPIC, "default": 1,
                           "description": "Partition count (grows live; never shrinks)."},
            "configs": settings_object(TOPIC_SETTINGS.settings, "Kafka topic configs (log/log_config.py); unset keys "
                                                                "take the broker default in spec.node, else Kafka's."),
        },
    }
    sidecar: Schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": f"!{_TLS_LISTENER} || (has(self.kafkaSecurity) && has(self.kafkaSecurity.tlsSecret))",
             "message": "an SSL or SASL_SSL listener (settings kafka.listen) needs kafkaSecurity.tlsSecret"},
            {"rule": f"!has(self.kafkaSecurity) || !has(self.kafkaSecurity.tlsSecret) || {_TLS_LISTENER}",
             "message": "kafkaSecurity.tlsSecret: no SSL or SASL_SSL listener in settings kafka.listen uses it"},
            {"rule": f"!{_SASL_LISTENER} || (has(self.kafkaSecurity) && has(self.kafkaSecurity.usersSecret))",
             "message": "a SASL_PLAINTEXT or SASL_SSL listener (settings kafka.listen) needs "
                        "kafkaSecurity.usersSecret"},
            {"rule": f"!has(self.kafkaSecurity) || !has(self.kafkaSecurity.usersSecret) || {_SASL_LISTENER}",
             "message": "kafkaSecurity.usersSecret: no SASL_PLAINTEXT or SASL_SSL listener in settings kafka.listen "
                        "uses it"},
        ],
        "properties": {
            "image": {"type": "string", "description": "The logkeeper image (default: the operator's)."},
            "imagePullPolicy": {"type": "string", "enum": list(PULL_POLICIES), "default": "IfNotPresent"},
            "port": {"type": "integer", "minimum": 1024, "maximum": 65535, "default": 8080,
                     "description": "Port of the sidecar's HTTP API (applications use localhost:<port>)."},
            "resources": _resources(),
            "settings": sidecar_settings(),
            "kafkaSecurity": kafka_security(),
            "env": {"type": "array", "description": "Extra environment (core/v1 EnvVar).",
                    "items": {"type": "object", "required": ["name"], "x-kubernetes-preserve-unknown-fields": True,
                              "properties": {"name": {"type": "string"}}}},
        },
    }
    spark: Schema = {
        "type": "object",
        "description": "Offload of compaction backlogs to Spark (one CompactionJob per backlog).",
        "x-kubernetes-validations": [
            {"rule": "!has(self.master) || (has(self.mode) && self.mode == 'kubernetes') == "
                     "self.master.startsWith('k8s://')",
             "message": "mode kubernetes needs a k8s:// master; mode local a local[N] master"}],
        "properties": {
            "autoSubmit": {"type": "boolean", "default": True,
                           "description": "Make a CompactionJob when the sidecar reports a backlog."},
            "mode": {"type": "string", "enum": list(SPARK_MODES), "default": "local",
                     "description": "local: Spark local[*] in a Job's pod on the volume; kubernetes: the driver "
                                    "in that pod, executors as pods (needs a ReadWriteMany claim)."},
            "image": {"type": "string", "description": "Image of the Job (default: the sidecar's)."},
            "master": {"type": "string", "description": "Spark master (local[*] / k8s://https://HOST:PORT)."},
            "conf": {"type": "object", "additionalProperties": {"type": "string"},
                     "description": "Spark conf (spark.executor.instances, ...)."},
            "serviceAccountName": {"type": "string", "description": "Service account of the driver (kubernetes)."},
            "resources": _resources(),
            "timeoutSeconds": {"type": "integer", "minimum": 60, "maximum": 7 * 86400, "default": 3600,
                               "description": "Bound on one attempt."},
            "maxAttempts": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "cooldownSeconds": {"type": "integer", "minimum": 0, "maximum": 7 * 86400, "default": 900,
                                "description": "After a partition's CompactionJob ends, how long a backlog still "
                                               "reported on it waits before another is made."},
        },
    }
    return {
        "type": "object", "required": ["volumes"],
        "x-kubernetes-validations": [{"rule": "!(has(self.cleanerPolicyRef) && has(self.cleaner))",
                                      "message": "give either cleanerPolicyRef or an inline cleaner, not both"}],
        "properties": {
            "volumes": {"type": "array", "minItems": 1, "maxItems": MAX_VOLUMES, "items": volume,
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                        "description": "One log directory per volume (Kafka's log.dirs)."},
            "topics": {"type": "array", "maxItems": MAX_TOPICS, "items": topic,
                       "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
            "node": settings_object(NODE_KEYS.values(), "Kafka broker keys of the LogManager and broker defaults of "
                                                        "topic keys (log/manager_config.py); log.dirs is set by the "
                                                        "operator."),
            "cleanerPolicyRef": {"type": "object", "required": ["name"],
                                 "properties": {"name": {"type": "string", "minLength": 1}},
                                 "description": "A CleanerPolicy in the same namespace."},
            "cleaner": _cleaner_settings("for this LogVolume alone"),
            "sidecar": sidecar,
            "containers": {"type": "array", "description": "Application containers in the sidecar's pod "
                                                          "(core/v1 Container); they reach it on localhost.",
                           "items": {"type": "object", "required": ["name", "image"],
                                     "x-kubernetes-preserve-unknown-fields": True,
                                     "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}},
            "spark": spark,
        },
    }


def _conditions() -> Schema:
    return {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object", "required": ["type", "status"], "properties": {
                "type": {"type": "string"}, "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"}, "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"}}}}


def _free_list(description: str) -> Schema:
    return {"type": "array", "description": description,
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def logvolume_status() -> Schema:
    return {"type": "object", "properties": {
        "observedGeneration": {"type": "integer", "format": "int64"},
        "conditions": _conditions(),
        "cleaningState": {"type": "string"},
        "summary": {"type": "object", "properties": {
            "partitions": {"type": "integer"}, "compacted": {"type": "integer"}, "cleaning": {"type": "integer"},
            "maxDirtyRatio": {"type": "string"}, "backlogs": {"type": "integer"},
            "offlineDirs": {"type": "integer"}, "offlinePartitions": {"type": "integer"},
            "uncleanable": {"type": "integer"},
            "sizeBytes": {"type": "integer", "format": "int64"}}},
        "partitions": _free_list("Per partition: size, offsets, dirty ratio, cleaning state, last round."),
        "partitionsTruncated": {"type": "boolean"},
        "offlineDirs": _free_list("Log directories taken offline after an I/O error."),
        "offlinePartitions": _free_list("Partitions that exist but cannot be served (their directory is offline, "
                                        "or they have a copy in two), with the repair to make."),
        "uncleanablePartitions": _free_list("Partitions whose cleaning failed, with the reason."),
        "backlogs": _free_list("Compaction backlogs the sidecar reported."),
    }}


def _column(name: str, path: str, typ: str = "string", priority: int = 0, description: str = "") -> Schema:
    col: Schema = {"name": name, "type": typ, "jsonPath": path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


AGE = _column("Age", ".metadata.creationTimestamp", "date")


def crd(kind: str, spec: Schema, status: Schema, columns: list[Schema], description: str) -> Schema:
    plural = PLURALS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "logkeeper"}},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": SHORT_NAMES[kind], "categories": ["logkeeper"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {"type": "object", "description": description, "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                    "spec": spec, "status": status}, "required": ["spec"]}},
            }],
        },
    }


def all_crds() -> dict[str, Schema]:
    ready = '.status.conditions[?(@.type=="Ready")]'
    lv = crd(LOGVOLUME, logvolume_spec(), logvolume_status(), [
        _column("Ready", f"{ready}.status"),
        _column("Cleaning", ".status.cleaningState", description="idle, or cleaning N/M compacted partitions"),
        _column("Partitions", ".status.summary.partitions", "integer"),
        _column("Max-Dirty", ".status.summary.maxDirtyRatio", description="largest dirty ratio of a compacted log"),
        _column("Backlogs", ".status.summary.backlogs", "integer"),
        _column("Offline", ".status.summary.offlineDirs", "integer", 1),
        _column("Uncleanable", ".status.summary.uncleanable", "integer", 1),
        _column("Reason", f"{ready}.reason", priority=1),
        AGE,
    ], "A set of volumes holding Kafka logs, served by a logkeeper sidecar.")
    cp = crd(CLEANERPOLICY, {"type": "object", "required": ["cleaner"], "properties": {
        "cleaner": _cleaner_settings("shared by the LogVolumes that name this policy")}},
        {"type": "object", "properties": {"logVolumes": {"type": "integer"},
                                          "observedGeneration": {"type": "integer", "format": "int64"},
                                          "conditions": _conditions()}},
        [_column("LogVolumes", ".status.logVolumes", "integer"), AGE],
        "Log cleaner settings shared by many LogVolumes.")
    cj_spec: Schema = {
        "type": "object", "required": ["logVolume", "topic", "partition", "volumeId", "logDir", "handOff", "args",
                                       "staging"],
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "a CompactionJob's spec is immutable"}],
        "properties": {
            "logVolume": {"type": "string", "minLength": 1}, "topic": {"type": "string", "pattern": TOPIC_NAME_PATTERN},
            "partition": {"type": "integer", "minimum": 0, "maximum": MAX_PARTITIONS_PER_TOPIC - 1},
            "volumeId": {"type": "string"}, "logDir": {"type": "string"}, "claimName": {"type": "string"},
            "handOff": {"type": "string", "minLength": 1,
                        "description": "The sidecar's attempt id of the hand-off this job serves."},
            "args": {"type": "array", "minItems": 1, "items": {"type": "string"},
                     "description": "The `logkeeper` arguments the sidecar asked for (spark-compact ...)."},
            "staging": {"type": "string", "description": "Where the job writes; the sidecar reads it."},
            "mode": {"type": "string", "enum": list(SPARK_MODES), "default": "local"},
            "timeoutSeconds": {"type": "integer", "minimum": 60, "maximum": 7 * 86400, "default": 3600},
            "maxAttempts": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        }}
    cj_status: Schema = {"type": "object", "properties": {
        "phase": {"type": "string", "enum": list(PHASES)},
        "attempts": {"type": "integer"},
        "submissionId": {"type": "string", "description": "The current attempt's Job: found again after an "
                                                           "operator restart."},
        "jobName": {"type": "string"},
        "attemptStartedAt": {"type": "number", "description": "Unix time the attempt was submitted."},
        "startTime": {"type": "string", "format": "date-time"},
        "completionTime": {"type": "string", "format": "date-time"},
        "staging": {"type": "string"},
        "message": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "conditions": _conditions(),
    }}
    cj = crd(COMPACTIONJOB, cj_spec, cj_status, [
        _column("Phase", ".status.phase"),
        _column("LogVolume", ".spec.logVolume"),
        _column("Topic", ".spec.topic"),
        _column("Partition", ".spec.partition", "integer"),
        _column("Attempts", ".status.attempts", "integer"),
        _column("Submission", ".status.submissionId", priority=1),
        _column("Message", ".status.message", priority=1),
        AGE,
    ], "One hand-off of a compaction backlog from a sidecar to a Spark job, tracked until the sidecar "
       "swapped the result in.")
    return {f"{PLURALS[k]}.{GROUP}.yaml": doc for k, doc in ((LOGVOLUME, lv), (CLEANERPOLICY, cp), (COMPACTIONJOB, cj))}


HEADER = "# Generated by `python -m logkeeper_operator.crdgen crds/` (make crds) from the settings; do not edit.\n"


def render(doc: Mapping[str, Any]) -> str:
    return HEADER + yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False, width=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m logkeeper_operator.crdgen")
    p.add_argument("out", nargs="+", help="directories to write (or check) the CRD files in")
    p.add_argument("--check", action="store_true", help="exit 1 when a file is missing or differs")
    args = p.parse_args(argv)
    stale = []
    for out in args.out:
        folder = Path(out)
        for name, doc in all_crds().items():
            path = folder / name
            text = render(doc)
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
            else:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if stale:
        print("out of date (run make crds): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
