"""Names shared by the CRDs, the builders, the handlers and the chart."""

from __future__ import annotations

import hashlib
import re

GROUP = "logkeeper.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

LOGVOLUME = "LogVolume"
CLEANERPOLICY = "CleanerPolicy"
COMPACTIONJOB = "CompactionJob"
PLURALS = {LOGVOLUME: "logvolumes", CLEANERPOLICY: "cleanerpolicies", COMPACTIONJOB: "compactionjobs"}
# kubectl resolves a short name to the first resource group that claims it, built-in groups first:
# ours carry an "lk" prefix so that none shadows, or is shadowed by, a built-in one ("cj" is
# CronJob's; tests/unit/test_operator_generated.py checks them against Kubernetes' list).
SHORT_NAMES = {LOGVOLUME: ["lkv"], CLEANERPOLICY: ["lkcp"], COMPACTIONJOB: ["lkcj"]}

FIELD_MANAGER = "logkeeper-operator"
COMPONENT = "logkeeper-operator"  # events' reporting component

# The one finalizer the operator sets, on unfinished CompactionJobs only: deleting one must stop
# its Spark Job and tell the sidecar to drop the hand-off (else the partition's cleaning stays
# paused until log.cleaner.offload.timeout.ms, hours). Removed when the job ends, and by any
# operator replica that sees the job deleted (jobs.finalize), also after a restart.
FINALIZER = "logkeeper.io/compaction-cleanup"
# kopf's finalizer, which kopf added for its timers until this version (those timers are gone):
# stripped from our objects so that nothing waits for the operator (jobs.py, periodic.py).
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
# The leader's Lease (coordination.k8s.io/v1) in the operator's namespace (leader.py).
LEASE_NAME = "logkeeper-operator-leader"
# Init of the image (Dockerfile ENTRYPOINT): reaps Spark's and Python's child processes and
# forwards SIGTERM, so a Job whose command is set must name it again.
TINI = "/usr/bin/tini"

# Labels on every child object (selectors use the first two).
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_LOGVOLUME = "logkeeper.io/logvolume"
LABEL_COMPACTIONJOB = "logkeeper.io/compactionjob"
# Pods with this label (value "true") in a LogVolume's namespace may reach its sidecar's ports
# (the LogVolume's NetworkPolicy, builders.network_policy); nothing else may but the operator.
LABEL_CLIENT = "logkeeper.io/client"
# The operator's pod as the NetworkPolicies admit it (the chart's selector less the release name).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "logkeeper", "app.kubernetes.io/component": "operator"}

# Pod template annotation: hash of everything the sidecar reads only at start; a change rolls the pod.
ANNOTATION_RESTART_HASH = "logkeeper.io/restart-hash"
ANNOTATION_PREFIX = "logkeeper.io"  # kopf's progress and diff-base annotations

# Paths inside the pod.
CONFIG_DIR = "/etc/logkeeper"
CONFIG_FILE = "config.yaml"
TOKEN_DIR = "/var/run/secrets/logkeeper"
TOKEN_KEY = "token"
# The Secret (one per namespace) holding the key the LogVolumes' tokens are derived from
# (tokens.py); the chart's RBAC names it: `get` on secrets is limited to this resourceName.
KEY_SECRET = "logkeeper-operator-key"
TOKEN_KEY_FIELD = "key"
DATA_ROOT = "/data"
# The Kafka listener's Secrets (spec.sidecar.kafkaSecurity), mounted read-only in the sidecar
# container only. Not under CONFIG_DIR: a mount point inside the read-only ConfigMap mount could
# not be created by the container runtime.
KAFKA_SECRETS_DIR = "/etc/logkeeper-kafka"
KAFKA_USERS_DIR = f"{KAFKA_SECRETS_DIR}/users"
KAFKA_TLS_DIR = f"{KAFKA_SECRETS_DIR}/tls"
KAFKA_USERS_KEY = "users"                      # default key of the users Secret
TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY = "tls.crt", "tls.key", "ca.crt"  # a kubernetes.io/tls Secret's keys
# The pod's IP in an address of the Kafka listener (expanded by Kubernetes in the environment).
POD_IP_VAR = "$(POD_IP)"
LOG_SUBDIR = "log"          # the log dir is /data/<volume id>/log (the mount root may hold lost+found)
SIDECAR_CONTAINER = "sidecar"
SPARK_CONTAINER = "spark-compact"
DEFAULT_PORT = 8080

_DNS_BAD = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str, limit: int = 63) -> str:
    """A DNS-1123 label made from ``text``; too long or altered names get a short hash suffix."""
    clean = _DNS_BAD.sub("-", text.lower()).strip("-") or "x"
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def statefulset_name(lv: str) -> str:
    return lv


def pod_name(lv: str) -> str:
    return f"{statefulset_name(lv)}-0"


def configmap_name(lv: str) -> str:
    return f"{lv}-config"


def secret_name(lv: str) -> str:
    return f"{lv}-token"


def service_name(lv: str) -> str:
    return lv


def network_policy_name(lv: str) -> str:
    return lv


def claim_name(lv: str, volume_id: str) -> str:
    return f"{lv}-{volume_id}"


def volume_name(volume_id: str) -> str:
    return f"data-{volume_id}"


def log_dir(volume_id: str) -> str:
    return f"{DATA_ROOT}/{volume_id}/{LOG_SUBDIR}"


def compaction_job_name(lv: str, topic: str, partition: int, hand_off: str) -> str:
    """One CompactionJob per hand-off of the sidecar: the same hand-off seen again maps to the same
    name (its attempt id is random, 12 hex digits or more)."""
    return dns_label(f"{lv}-{topic}-{partition}-{hand_off[:12]}", 253)


def batch_job_name(cj: str, attempt: int) -> str:
    return dns_label(f"{cj}-a{attempt}", 63)


def spark_network_policy_name(cj: str) -> str:
    """The NetworkPolicy admitting a mode-kubernetes CompactionJob's driver <-> executor traffic."""
    return dns_label(f"{cj}-spark", 253)


def cancel_job_name(cj: str) -> str:
    """The Job that tells the sidecar a deleted CompactionJob's hand-off is off (jobs.py)."""
    return dns_label(f"{cj}-cancel", 63)


def labels(lv: str, component: str) -> dict[str, str]:
    return {LABEL_NAME: "logkeeper", LABEL_INSTANCE: lv, LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: FIELD_MANAGER, LABEL_LOGVOLUME: lv}


def selector(lv: str) -> dict[str, str]:
    return {LABEL_NAME: "logkeeper", LABEL_INSTANCE: lv, LABEL_COMPONENT: "sidecar"}
