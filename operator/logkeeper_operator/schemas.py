"""The LogVolume's spec schema (crdgen.py assembles the CRDs): each Kafka key of a spec section is a
typed property with its bounds and enums, taken from its Setting (type, validator's schema, doc):
topic keys (log/log_config.py TOPIC_SETTINGS) under ``spec.topics[].configs``, broker keys
(log/manager_config.py) under ``spec.node``, cleaner keys (cleaner/config.py) under
``spec.cleaner`` and CleanerPolicy ``spec.cleaner``, sidecar keys (server/config.py) under
``spec.sidecar.settings``.

Kafka keys carry no schema ``default``: an absent key means "Kafka's default, or the broker-level
one" (a topic key set by a schema default would hide ``spec.node``'s broker default), so the
default is written in the description instead. Structural fields (partitions, deleteClaim, port,
spark mode, timeouts, attempts) have schema defaults.

What the schema's types cannot say is in CEL rules (x-kubernetes-validations, made by ``rule``):
the API server refuses such a spec at once, naming the field (fieldPath) and why; the operator
checks all of it again (spec.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from logkeeper.log.log_config import INT32_MAX, JAVA_INT_TOPIC_KEYS, TOPIC_SETTINGS
from logkeeper.server.config import MAX_PARTITIONS_PER_TOPIC
from logkeeper.settings import LONG_MAX, Setting, schema_of

from .names import (
    KAFKA_TLS_DIR,
    KAFKA_USERS_DIR,
    KAFKA_USERS_KEY,
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
    SCRATCH_FACTOR,
    SCRATCH_MIN_BYTES,
    SECRET_KEY_PATTERN,
    SECRET_NAME_PATTERN,
    SIDECAR_KEYS,
    SPARK_MODES,
    VOLUME_ID_MAX,
)

Schema = dict[str, Any]
MAX_CONTAINERS = 32  # bounds the cost of the rule on spec.containers
# A LogVolume's name names its Service (a DNS-1035 label: a letter first) and its StatefulSet,
# whose pods carry the label controller-revision-hash=<name>-<10 characters> (at most 63).
LOGVOLUME_NAME_MAX = 52
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


REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")


def rule(cel: str, message: str, field_path: str = "", reason: str = "FieldValueInvalid") -> Schema:
    """A CEL rule (x-kubernetes-validations): ``field_path`` (relative to the schema node, like
    ".partitions") is the field the API server names in its refusal."""
    assert reason in REASONS
    out: Schema = {"rule": cel, "message": message, "reason": reason}
    if field_path:
        out["fieldPath"] = field_path
    return out


LOGVOLUME_NAME = rule(f"size(self.metadata.name) <= {LOGVOLUME_NAME_MAX} && "
                      "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                      f"a LogVolume's name starts with a letter, has only a-z, 0-9 and '-', and at most "
                      f"{LOGVOLUME_NAME_MAX} characters (it names its Service and StatefulSet)")
# (no fieldPath: the API server accepts none into metadata, whose schema has no properties)


def cleaner_settings(what: str) -> Schema:
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
            rule("!has(self.usersKey) || has(self.usersSecret)", "usersKey needs usersSecret", ".usersKey"),
            rule("!has(self.keyPasswordKey) || has(self.tlsSecret)", "keyPasswordKey needs tlsSecret",
                 ".keyPasswordKey"),
            rule("!has(self.clientAuth) || self.clientAuth == 'none' || has(self.tlsSecret)",
                 "clientAuth requested or required needs tlsSecret (its ca.crt checks client certificates)",
                 ".clientAuth"),
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
        "x-kubernetes-validations": [rule("has(self.size) != has(self.existingClaim)",
                                          "give either size (a new claim) or existingClaim, not both", ".size",
                                          "FieldValueRequired")],
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
        # a transition rule: in a list-type map the item of the same name is oldSelf
        "x-kubernetes-validations": [rule("self.partitions >= oldSelf.partitions",
                                          "a topic's partitions cannot shrink (Kafka's rule)", ".partitions",
                                          "FieldValueForbidden")],
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
            rule(f"!{_TLS_LISTENER} || (has(self.kafkaSecurity) && has(self.kafkaSecurity.tlsSecret))",
                 "an SSL or SASL_SSL listener (settings kafka.listen) needs kafkaSecurity.tlsSecret",
                 ".kafkaSecurity", "FieldValueRequired"),
            rule(f"!has(self.kafkaSecurity) || !has(self.kafkaSecurity.tlsSecret) || {_TLS_LISTENER}",
                 "kafkaSecurity.tlsSecret: no SSL or SASL_SSL listener in settings kafka.listen uses it",
                 ".kafkaSecurity.tlsSecret", "FieldValueForbidden"),
            rule(f"!{_SASL_LISTENER} || (has(self.kafkaSecurity) && has(self.kafkaSecurity.usersSecret))",
                 "a SASL_PLAINTEXT or SASL_SSL listener (settings kafka.listen) needs kafkaSecurity.usersSecret",
                 ".kafkaSecurity", "FieldValueRequired"),
            rule(f"!has(self.kafkaSecurity) || !has(self.kafkaSecurity.usersSecret) || {_SASL_LISTENER}",
                 "kafkaSecurity.usersSecret: no SASL_PLAINTEXT or SASL_SSL listener in settings kafka.listen uses it",
                 ".kafkaSecurity.usersSecret", "FieldValueForbidden"),
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
            rule("!has(self.master) || (has(self.mode) && self.mode == 'kubernetes') == "
                 "self.master.startsWith('k8s://')",
                 "mode kubernetes needs a k8s:// master; mode local a local[N] master", ".master"),
            rule("!has(self.mode) || self.mode != 'kubernetes' || has(self.serviceAccountName)",
                 "mode kubernetes needs a serviceAccountName allowed to create the executors' pods",
                 ".serviceAccountName")],
        "properties": {
            "autoSubmit": {"type": "boolean", "default": True,
                           "description": "Make a CompactionJob when the sidecar reports a backlog."},
            "mode": {"type": "string", "enum": list(SPARK_MODES), "default": "local",
                     "description": "local: Spark local[*] in a Job's pod on the volume; kubernetes: the driver "
                                    "in that pod, executors as pods of the same image with the volume mounted "
                                    "(on the sidecar's node unless the claim is ReadWriteMany)."},
            "image": {"type": "string", "description": "Image of the Job (default: the sidecar's)."},
            "master": {"type": "string", "description": "Spark master (local[*] / k8s://https://HOST:PORT; "
                                                         "kubernetes default: the in-cluster API server)."},
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
            "scratch": {
                "type": "object",
                "description": f"The Job's /tmp (Spark's local dirs). Default: an emptyDir of factor x the "
                               f"partition's bytes, at least {SCRATCH_MIN_BYTES >> 20}Mi.",
                "x-kubernetes-validations": [rule("!(has(self.size) && has(self.factor))",
                                                  "give either a fixed size or a factor, not both", ".factor",
                                                  "FieldValueForbidden")],
                "properties": {
                    "size": {"type": "string", "pattern": QUANTITY_PATTERN, "description": "A fixed size (e.g. 20Gi)."},
                    "factor": {"type": "number", "minimum": 0.1, "maximum": 100,
                               "description": f"Scratch per byte of the partition. Default: {SCRATCH_FACTOR} "
                                              f"(measured: spec.py SCRATCH_FACTOR)."},
                    "storageClassName": {"type": "string", "description": "Make /tmp a generic ephemeral volume "
                                                                          "(a claim of this class, made and deleted "
                                                                          "with the pod) instead of an emptyDir."}}},
        },
    }
    return {
        "type": "object", "required": ["volumes"],
        "x-kubernetes-validations": [rule("!(has(self.cleanerPolicyRef) && has(self.cleaner))",
                                          "give either cleanerPolicyRef or an inline cleaner, not both", ".cleaner",
                                          "FieldValueForbidden")],
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
            "cleaner": cleaner_settings("for this LogVolume alone"),
            "sidecar": sidecar,
            "containers": {"type": "array", "description": "Application containers in the sidecar's pod "
                                                          "(core/v1 Container); they reach it on localhost.",
                           "maxItems": MAX_CONTAINERS,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                           "x-kubernetes-validations": [rule("self.all(c, c.name != 'sidecar')",
                                                             "the container name 'sidecar' is the sidecar's",
                                                             reason="FieldValueForbidden")],
                           "items": {"type": "object", "required": ["name", "image"],
                                     "x-kubernetes-preserve-unknown-fields": True,
                                     "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}},
            "spark": spark,
        },
    }
