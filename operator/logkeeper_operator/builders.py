"""Pure manifest builders: a parsed spec in, plain dicts out (no API calls, no clock, no random).

A LogVolume ``lv`` owns (ownerReferences, so deleting it deletes them):

    Secret         lv-token    the sidecar's bearer token (tokens.py: derived, made once, never read)
    ConfigMap      lv-config   config.yaml, rendered by render.py
    Service        lv          headless, port http -> the sidecar (stable DNS lv-0.lv.<ns>.svc)
    PVC            lv-<id>     one per volume with a size; owned only when deleteClaim is true
    StatefulSet    lv          one pod: the sidecar + the spec's application containers
    NetworkPolicy  lv          the sidecar's ports admit only the operator and pods labelled
                               logkeeper.io/client=true of the namespace (network_policy)

and names, without reading them, the Secrets of spec.sidecar.kafkaSecurity: the kubelet mounts
them in the sidecar container (kafka_security_volumes; render.kafka_security_keys points the
config at the files).

A CompactionJob owns one batch/v1 Job per attempt (``<cj>-a<n>``): ``logkeeper spark-compact`` on
the partition's volume under tini (local Spark in the Job's pod, next to the LogVolume's pod; or
Spark on Kubernetes with the driver in the Job's pod), its /tmp sized from the backlog
(scratch_bytes). A deleted unfinished CompactionJob leaves one ``<cj>-cancel`` Job, owned by the
LogVolume (cancel_job): it writes the sidecar's failure.json into the hand-off's staging
directory, so that the sidecar drops the hand-off, removes the directory and cleans again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from logkeeper.server.config import env_name, is_loopback_host, parse_listen_address

from . import spark_on_k8s
from .jobspec import CompactionJobSpec
from .names import (
    ANNOTATION_RESTART_HASH,
    API_VERSION,
    COMPACTIONJOB,
    CONFIG_DIR,
    CONFIG_FILE,
    DATA_ROOT,
    FINALIZER,
    KAFKA_TLS_DIR,
    KAFKA_USERS_DIR,
    LABEL_CLIENT,
    LABEL_COMPACTIONJOB,
    LOGVOLUME,
    OPERATOR_POD_LABELS,
    POD_IP_VAR,
    SIDECAR_CONTAINER,
    SPARK_CONTAINER,
    TINI,
    TOKEN_DIR,
    TOKEN_KEY,
    batch_job_name,
    cancel_job_name,
    claim_name,
    configmap_name,
    labels,
    network_policy_name,
    secret_name,
    selector,
    service_name,
    spark_network_policy_name,
    statefulset_name,
    volume_name,
)
from .spec import POD_IP_KEYS, SCRATCH_MIN_BYTES, LogVolumeSpec, SparkSpec, VolumeSpec

RUN_AS = 10001
SHUTDOWN_GRACE_EXTRA_S = 5
Obj = dict[str, Any]


def owner_reference(kind: str, name: str, uid: str) -> Obj:
    return {"apiVersion": API_VERSION, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def _meta(name: str, namespace: str, lv: str, component: str, owner: Obj | None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels(lv, component)}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def pod_security_context() -> Obj:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> Obj:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]}}


def secret(lv: str, namespace: str, owner: Obj, token: str) -> Obj:
    """The token Secret (``token`` comes from the caller: tokens.derive_token)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(secret_name(lv), namespace, lv, "token", owner),
            "stringData": {TOKEN_KEY: token}}


def configmap(lv: str, namespace: str, owner: Obj, config_text: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(configmap_name(lv), namespace, lv, "config", owner),
            "data": {CONFIG_FILE: config_text}}


def service(lv: str, namespace: str, owner: Obj, spec: LogVolumeSpec) -> Obj:
    """The headless Service: its name resolves to the ready pod's address; it lists the HTTP port
    and the Kafka listeners other pods can reach (``kubectl port-forward svc/NAME 9092``, DNS SRV
    records), by number: the container declares only its HTTP port, and declaring more would roll
    every existing pod when the operator is upgraded."""
    ports = [{"name": "http", "port": spec.sidecar.port, "targetPort": "http", "protocol": "TCP"}]
    ports += [{"name": f"kafka-{port}", "port": port, "targetPort": port, "protocol": "TCP"}
              for port in kafka_ports(spec, reachable_only=True) if port != spec.sidecar.port]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(service_name(lv), namespace, lv, "sidecar", owner),
            "spec": {"clusterIP": "None", "selector": selector(lv), "publishNotReadyAddresses": False,
                     "ports": ports}}


def kafka_ports(spec: LogVolumeSpec, *, reachable_only: bool = False) -> list[int]:
    """The fixed ports of the sidecar's Kafka listeners (kafka.listen ``[PROTOCOL://]host:port``;
    port 0 is any free one). ``reachable_only``: without those bound to a loopback address,
    which only the pod's own containers reach."""
    ports = set()
    for address in spec.sidecar.settings.get("kafka.listen") or []:
        text = str(address)
        host, port = parse_listen_address(text.partition("://")[2] or text)
        if port and not (reachable_only and is_loopback_host(host)):
            ports.add(port)
    return sorted(ports)


def sidecar_ports(spec: LogVolumeSpec) -> list[int]:
    """The ports the sidecar listens on in the pod: its HTTP port and its Kafka listeners'."""
    return sorted({spec.sidecar.port, *kafka_ports(spec)})


def _other_ports(guarded: list[int]) -> list[Obj]:
    """Every port but ``guarded``: TCP as ranges around them (endPort), UDP and SCTP whole."""
    out: list[Obj] = []
    low = 1
    for port in [*guarded, 65536]:
        if port > low:
            rng: Obj = {"protocol": "TCP", "port": low}
            if port - 1 > low:
                rng["endPort"] = port - 1
            out.append(rng)
        low = port + 1
    return [*out, {"protocol": "UDP"}, {"protocol": "SCTP"}]


def network_policy(lv: str, namespace: str, owner: Obj, spec: LogVolumeSpec, operator_namespace: str | None) -> Obj:
    """Who may reach the sidecar over the pod network: the operator (it reads /v1/status and
    applies topic changes) and the namespace's pods labelled ``logkeeper.io/client: "true"``.

    - Only the sidecar's ports are guarded: the policy selects the whole pod, so a second rule
      admits everything else, TCP around those ports and all UDP/SCTP; the application
      containers of the pod keep whatever traffic they had.
    - Applications in the pod reach the sidecar on 127.0.0.1, which no policy filters; kubelet
      probes come from the node, which NetworkPolicies always admit.
    - ``operator_namespace``: where the operator runs (None when unknown, e.g. run outside the
      cluster: its labels are then admitted from any namespace).
    - More clients (another namespace, a Prometheus): label their pods, or add a NetworkPolicy of
      your own selecting this pod; policies add up.
    Owned by the LogVolume: deleted with it."""
    guarded = sidecar_ports(spec)
    operator: Obj = {"podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)}}
    operator["namespaceSelector"] = (
        {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}} if operator_namespace else {})
    clients: Obj = {"podSelector": {"matchLabels": {LABEL_CLIENT: "true"}}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _meta(network_policy_name(lv), namespace, lv, "sidecar", owner),
        "spec": {
            "podSelector": {"matchLabels": selector(lv)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [operator, clients], "ports": [{"protocol": "TCP", "port": p} for p in guarded]},
                {"ports": _other_ports(guarded)},
            ],
        },
    }


def claim_for(lv: str, volume: VolumeSpec) -> str:
    return volume.existing_claim or claim_name(lv, volume.id)


def pvcs(lv: str, namespace: str, owner: Obj, spec: LogVolumeSpec) -> list[Obj]:
    """Claims the operator makes (volumes with a size). deleteClaim: false -> no owner, so the
    claim and its data outlive the LogVolume; existing claims are never touched."""
    out = []
    for v in spec.volumes:
        if v.existing_claim:
            continue
        claim: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": _meta(claim_name(lv, v.id), namespace, lv, "data",
                                        owner if v.delete_claim else None),
                      "spec": {"accessModes": list(v.access_modes),
                               "resources": {"requests": {"storage": v.size}}}}
        if v.storage_class:
            claim["spec"]["storageClassName"] = v.storage_class
        out.append(claim)
    return out


def listen_env(port: int) -> list[Obj]:
    """Where the sidecar listens: loopback (the pod's applications) and the pod's own IP (the
    operator, labelled clients and the kubelet's probes), not every address of the pod (0.0.0.0
    would include any other interface a CNI adds). The pod IP is known only in the pod: the
    environment (LOGKEEPER_LISTEN wins over the file's listen), with Kubernetes' $(VAR)
    expansion; brackets work for an IPv4 address as for IPv6 (config.parse_listen_address)."""
    return [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LOGKEEPER_LISTEN", "value": f"127.0.0.1:{port},[$(POD_IP)]:{port}"}]


def kafka_listen_env(spec: LogVolumeSpec) -> list[Obj]:
    """Kafka listener addresses naming $(POD_IP) (``SASL_SSL://[$(POD_IP)]:9093``) go to the
    sidecar through the environment too (LOGKEEPER_KAFKA_LISTEN wins over the file's
    kafka.listen), where Kubernetes expands the variable; put after POD_IP (listen_env)."""
    out: list[Obj] = []
    for key in POD_IP_KEYS:
        addresses = [str(a) for a in spec.sidecar.settings.get(key) or []]
        if any(POD_IP_VAR in a for a in addresses):
            out.append({"name": env_name(key), "value": ",".join(addresses)})
    return out


KAFKA_USERS_VOLUME = "kafka-users"
KAFKA_TLS_VOLUME = "kafka-tls"


def kafka_security_volumes(spec: LogVolumeSpec) -> list[tuple[Obj, Obj]]:
    """(pod volume, sidecar mount) for each Secret of spec.sidecar.kafkaSecurity: the kubelet
    mounts them (the operator never reads them), read-only, files 0440 of group fsGroup (the
    sidecar's uid 10001), the whole Secret as a directory (no subPath: a changed Secret reaches
    the files, and the sidecar re-reads its users file)."""
    ks = spec.sidecar.kafka_security
    out = []
    for volume, secret_ref, path in ((KAFKA_USERS_VOLUME, ks.users_secret, KAFKA_USERS_DIR),
                                     (KAFKA_TLS_VOLUME, ks.tls_secret, KAFKA_TLS_DIR)):
        if secret_ref:
            out.append(({"name": volume, "secret": {"secretName": secret_ref, "defaultMode": 0o440}},
                        {"name": volume, "mountPath": path, "readOnly": True}))
    return out


def _sidecar_container(spec: LogVolumeSpec) -> Obj:
    sc = spec.sidecar
    mounts: list[Obj] = [{"name": volume_name(v.id), "mountPath": f"{DATA_ROOT}/{v.id}"} for v in spec.volumes]
    mounts += [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
               {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
               {"name": "tmp", "mountPath": "/tmp"}]
    mounts += [mount for _volume, mount in kafka_security_volumes(spec)]
    probe: Obj = {"httpGet": {"path": "/healthz", "port": "http"}}
    container: Obj = {
        "name": SIDECAR_CONTAINER,
        "image": sc.image,
        "imagePullPolicy": sc.pull_policy,
        "args": ["sidecar", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "ports": [{"name": "http", "containerPort": sc.port, "protocol": "TCP"}],
        "env": [{"name": "NUMBA_CACHE_DIR", "value": "/tmp/numba"}, {"name": "HOME", "value": "/tmp"},
                *listen_env(sc.port), *kafka_listen_env(spec), *copy.deepcopy(sc.env)],
        "volumeMounts": mounts,
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5,
                           "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 5},
        "startupProbe": {**probe, "periodSeconds": 2, "failureThreshold": 60},
        "securityContext": container_security_context(),
    }
    if sc.resources:
        container["resources"] = copy.deepcopy(sc.resources)
    return container


def _app_container(raw: Mapping[str, Any], port: int) -> Obj:
    """An application container: it reaches the sidecar on localhost, with the token mounted."""
    c = copy.deepcopy(dict(raw))
    env = [e for e in c.get("env", []) if e.get("name") not in ("LOGKEEPER_URL", "LOGKEEPER_TOKEN_FILE")]
    c["env"] = [{"name": "LOGKEEPER_URL", "value": f"http://127.0.0.1:{port}"},
                {"name": "LOGKEEPER_TOKEN_FILE", "value": f"{TOKEN_DIR}/{TOKEN_KEY}"}, *env]
    mounts = [m for m in c.get("volumeMounts", []) if m.get("mountPath") != TOKEN_DIR]
    c["volumeMounts"] = [*mounts, {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}]
    return c


def statefulset(lv: str, namespace: str, owner: Obj, spec: LogVolumeSpec, restart_hash: str) -> Obj:
    volumes: list[Obj] = [{"name": volume_name(v.id), "persistentVolumeClaim": {"claimName": claim_for(lv, v)}}
                          for v in spec.volumes]
    volumes += [
        {"name": "config", "configMap": {"name": configmap_name(lv)}},
        {"name": "token", "secret": {"secretName": secret_name(lv), "defaultMode": 0o440}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    volumes += [volume for volume, _mount in kafka_security_volumes(spec)]
    grace = int(spec.sidecar.settings.get("shutdown.timeout.ms", 25000)) // 1000 + SHUTDOWN_GRACE_EXTRA_S
    pod_labels = {**labels(lv, "sidecar"), **selector(lv)}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _meta(statefulset_name(lv), namespace, lv, "sidecar", owner),
        "spec": {
            "replicas": 1,
            "serviceName": service_name(lv),
            "selector": {"matchLabels": selector(lv)},
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {ANNOTATION_RESTART_HASH: restart_hash}},
                "spec": {
                    "securityContext": pod_security_context(),
                    "terminationGracePeriodSeconds": grace,
                    "automountServiceAccountToken": False,
                    "containers": [_sidecar_container(spec),
                                   *(_app_container(c, spec.sidecar.port) for c in spec.containers)],
                    "volumes": volumes,
                },
            },
        },
    }


def compaction_job_manifest(name: str, namespace: str, lv: str, uid: str, cj: CompactionJobSpec,
                            spark: SparkSpec, claim: str) -> Obj:
    """The CompactionJob resource a sidecar's hand-off becomes (owned by its LogVolume)."""
    meta = _meta(name, namespace, lv, "compaction", owner_reference(LOGVOLUME, lv, uid))
    meta["finalizers"] = [FINALIZER]  # from its creation: a deletion before the first tick still cancels
    return {"apiVersion": API_VERSION, "kind": COMPACTIONJOB, "metadata": meta,
            "spec": {"logVolume": cj.log_volume, "topic": cj.topic, "partition": cj.partition,
                     "volumeId": cj.volume_id, "logDir": cj.log_dir, "claimName": claim,
                     "handOff": cj.hand_off, "args": list(cj.args), "staging": cj.staging,
                     "mode": spark.mode, "timeoutSeconds": cj.timeout_seconds, "maxAttempts": cj.max_attempts,
                     "backlogBytes": cj.backlog_bytes}}


MI = 1 << 20


def scratch_bytes(backlog_bytes: int, spark: SparkSpec) -> int:
    """The Job's /tmp (Spark's local dirs) for a backlog: factor x its bytes, at least
    SCRATCH_MIN_BYTES, rounded up to a MiB (spec.SCRATCH_FACTOR says how it was measured)."""
    want = max(SCRATCH_MIN_BYTES, int(backlog_bytes * spark.scratch.factor))
    return -(-want // MI) * MI


def scratch_size(backlog_bytes: int, spark: SparkSpec) -> str:
    """spec.spark.scratch.size, else scratch_bytes as a quantity."""
    return spark.scratch.size or f"{scratch_bytes(backlog_bytes, spark) // MI}Mi"


def scratch_volume(backlog_bytes: int, spark: SparkSpec) -> Obj:
    """The Job's /tmp volume of scratch_size: an emptyDir (evicted past its sizeLimit), or with a
    storage class a generic ephemeral volume (a claim of that size made with the pod and deleted
    with it). Mode kubernetes: each executor's local dir is an emptyDir of the same limit."""
    size = scratch_size(backlog_bytes, spark)
    if spark.scratch.storage_class:
        claim: Obj = {"accessModes": ["ReadWriteOnce"], "storageClassName": spark.scratch.storage_class,
                      "resources": {"requests": {"storage": size}}}
        return {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}
    return {"name": "tmp", "emptyDir": {"sizeLimit": size}}


def batch_job(cj_name: str, namespace: str, cj_uid: str, attempt: int, cj: CompactionJobSpec, spark: SparkSpec,
              claim: str, read_write_many: bool = False) -> Obj:
    """Attempt ``attempt`` of a CompactionJob: one pod running the sidecar's ``logkeeper
    spark-compact`` arguments, with the volume mounted where the sidecar has it (the arguments'
    paths hold there), no retries of its own (the CompactionJob counts attempts), bounded by
    activeDeadlineSeconds. On the node of the sidecar's pod unless the claim is ReadWriteMany.
    Mode kubernetes: the pod is Spark's driver and the executors are pods (spark_on_k8s.py)."""
    env: list[Obj] = [{"name": "HOME", "value": "/tmp"}, {"name": "NUMBA_CACHE_DIR", "value": "/tmp/numba"},
                      {"name": "LOGKEEPER_SUBMISSION_ID", "value": batch_job_name(cj_name, attempt)}]
    data_volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    data_mount = {"name": "data", "mountPath": f"{DATA_ROOT}/{cj.volume_id}"}
    pinned = None if read_write_many else _next_to_sidecar(cj.log_volume)
    job_labels = compaction_pod_labels(cj.log_volume, cj_name)
    scratch = scratch_volume(cj.backlog_bytes, spark)
    conf = dict(spark.conf)
    if spark.mode == "kubernetes":
        conf = spark_on_k8s.spark_conf(namespace, spark.image, conf)
        template = spark_on_k8s.executor_template(
            job_labels, pod_security_context(), container_security_context(), data_volume, data_mount, pinned,
            scratch_size(cj.backlog_bytes, spark))
        env += [*spark_on_k8s.driver_env(), {"name": spark_on_k8s.TEMPLATE_ENV, "value": template}]
    if conf:
        env.append({"name": "PYSPARK_SUBMIT_ARGS", "value": spark_on_k8s.submit_args(conf)})
    container: Obj = {
        "name": SPARK_CONTAINER,
        "image": spark.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [TINI, "--", "logkeeper", *cj.args],
        "env": env,
        "volumeMounts": [data_mount, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": container_security_context(),
    }
    if spark.resources:
        container["resources"] = copy.deepcopy(spark.resources)
    pod: Obj = {
        "restartPolicy": "Never",
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [data_volume, scratch],
    }
    if pinned is not None:
        pod["affinity"] = pinned
    if spark.mode == "local":
        pod["automountServiceAccountToken"] = False
    elif spark.service_account:
        pod["serviceAccountName"] = spark.service_account
    name = batch_job_name(cj_name, attempt)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels,
                     "ownerReferences": [owner_reference(COMPACTIONJOB, cj_name, cj_uid)]},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": cj.timeout_seconds,
                 "template": {"metadata": {"labels": job_labels}, "spec": pod}},
    }


def compaction_pod_labels(lv: str, cj_name: str) -> dict[str, str]:
    """The labels of a CompactionJob's pods: its Jobs' pods and, in mode kubernetes, the executors."""
    return {**labels(lv, "compaction"), LABEL_COMPACTIONJOB: cj_name}


def spark_network_policy(cj_name: str, namespace: str, cj_uid: str, lv: str) -> Obj:
    """Mode kubernetes: the driver <-> executor traffic of the CompactionJob's pods admitted
    (spark_on_k8s.network_policy), owned by the CompactionJob."""
    return spark_on_k8s.network_policy(spark_network_policy_name(cj_name), namespace,
                                       compaction_pod_labels(lv, cj_name),
                                       owner_reference(COMPACTIONJOB, cj_name, cj_uid))


def _next_to_sidecar(lv: str) -> Obj:
    """The claim is usually ReadWriteOnce: run on the node of the LogVolume's pod."""
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": selector(lv)}, "topologyKey": "kubernetes.io/hostname"}]}}


CANCEL_TTL_S = 600  # the cancel Job stays this long after it ends: while it exists, no new CompactionJob
CANCEL_DEADLINE_S = 300


def cancel_job(cj_name: str, namespace: str, lv: str, lv_uid: str, staging: str, volume_id: str, claim: str,
               image: str, reason: str) -> Obj:
    """The Job that ends a deleted CompactionJob's hand-off: ``python -m logkeeper_operator.cancel``
    writes failure.json (``reason``) into the staging directory, where the sidecar waits for the
    job's result (it then removes the directory and resumes cleaning). Owned by the LogVolume
    (the CompactionJob is going away); while it exists the operator makes no new CompactionJob of
    the same hand-off (jobs.ensure_compaction_job)."""
    container: Obj = {
        "name": "cancel", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": [TINI, "--", "python", "-m", "logkeeper_operator.cancel", staging, reason],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "volumeMounts": [{"name": "data", "mountPath": f"{DATA_ROOT}/{volume_id}"}],
        "securityContext": container_security_context(),
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    pod: Obj = {"restartPolicy": "Never", "securityContext": pod_security_context(), "containers": [container],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                "affinity": _next_to_sidecar(lv), "automountServiceAccountToken": False}
    job_labels = {**labels(lv, "compaction-cancel"), LABEL_COMPACTIONJOB: cj_name}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": cancel_job_name(cj_name), "namespace": namespace, "labels": job_labels,
                     "ownerReferences": [owner_reference(LOGVOLUME, lv, lv_uid)]},
        "spec": {"backoffLimit": 2, "activeDeadlineSeconds": CANCEL_DEADLINE_S, "ttlSecondsAfterFinished": CANCEL_TTL_S,
                 "template": {"metadata": {"labels": job_labels}, "spec": pod}},
    }
