"""The offload Job of ``spec.spark.mode: kubernetes``: its pod is Spark's driver (client mode) and
the executors are pods of our image that the driver asks the API server for.

What the driver needs, given as Spark conf (PYSPARK_SUBMIT_ARGS; the user's ``spec.spark.conf``
wins key by key):

- who it is: its pod's name (the executor pods are owned by it, so deleting the Job's pod - a
  cancel, a timeout - deletes them too) and IP, from the downward API as POD_NAME and POD_IP,
  which the driver turns into spark.kubernetes.driver.pod.name, spark.driver.host and
  spark.driver.bindAddress (spark/on_k8s.py); fixed driver and block manager ports (a
  NetworkPolicy can name them);
- the API server's CA and the service account's token (client mode reads neither by itself);
- the executors' image (the Job's) and namespace, and how many: ``EXECUTORS`` by default.

What the executors need, as the pod template the driver hands to Spark (spark/on_k8s.py writes
LOGKEEPER_EXECUTOR_POD_TEMPLATE to a file): the security context of every pod the operator
makes (the namespace may enforce Pod Security "restricted"), no API token, the log volume's
claim mounted where the sidecar has it (the workers read segments and write the cleaned ones by
the sidecar's paths), a /tmp, Spark's local dir (shuffle and spill files) as an emptyDir with
the Job's scratch size as its sizeLimit (Spark gives executors the driver's SPARK_LOCAL_DIRS; the
template names the volume ``spark-local-dir-1`` and mounts it there, as Spark's
LocalDirsFeatureStep looks for it, so Spark uses it instead of adding an unbounded emptyDir of
its own; the kubelet evicts an executor that writes past the limit rather than letting it fill
the node's disk), the
CompactionJob's labels, and - unless the claim is ReadWriteMany - the node of the sidecar's pod,
the one node where a ReadWriteOnce claim can be mounted (the driver's pod is pinned there too).
The executors run ``logkeeper executor`` (the image's entrypoint with Spark's argument
``executor``).

Who may talk to whom (network_policy): the driver listens on DRIVER_PORT (executors register)
and BLOCK_MANAGER_PORT, each executor on BLOCK_MANAGER_PORT (shuffle blocks; an executor's RPC
endpoint only dials out). One NetworkPolicy per CompactionJob admits exactly that traffic between
the pods carrying its label, so the job also runs in a namespace whose policies deny by default.
It governs ingress only: where egress is denied too, the namespace must allow the driver's
egress to the API server and the pods' egress to each other on those two ports.

The master: default ``k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)``, the
address kubelet gives every container (client-go's in-cluster config reads the same two
variables), expanded by Kubernetes in the Job's command: no cluster DNS needed.

The driver's service account must be allowed to manage the executors' pods and config maps in
the namespace (README, "Executors as pods": the Role).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

EXECUTORS = 2
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
TEMPLATE_ENV = "LOGKEEPER_EXECUTOR_POD_TEMPLATE"  # read by logkeeper/spark/on_k8s.py
# Spark's local dir in every pod of the job: the image's SPARK_LOCAL_DIRS, set again in the driver's
# environment (Spark hands the driver's to the executors; under /tmp: the driver's /tmp is the
# Job's scratch volume); in the executors a volume of its own, named as Spark looks for it.
LOCAL_DIR = "/tmp/spark"
LOCAL_DIR_VOLUME = "spark-local-dir-1"
EXECUTOR_TMP_LIMIT = "1Gi"  # /tmp of an executor: the Python workers' files and the kernels' cache
EXECUTOR_CONTAINER = "executor"
_SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def driver_env() -> list[Obj]:
    """The driver pod's name and IP (downward API), read by logkeeper/spark/on_k8s.py, and the
    local dir the executors' template mounts."""
    return [*({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
              for name, path in (("POD_NAME", "metadata.name"), ("POD_IP", "status.podIP"))),
            {"name": "SPARK_LOCAL_DIRS", "value": LOCAL_DIR}]


def spark_conf(namespace: str, image: str, user_conf: Mapping[str, str]) -> dict[str, str]:
    """The driver's Spark conf: ours, then the user's over it."""
    ours = {
        "spark.kubernetes.namespace": namespace,
        "spark.driver.port": str(DRIVER_PORT),
        "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.kubernetes.authenticate.caCertFile": f"{_SA}/ca.crt",
        "spark.kubernetes.authenticate.oauthTokenFile": f"{_SA}/token",
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.executor.instances": str(EXECUTORS),
        "spark.executorEnv.HOME": "/tmp",
        "spark.executorEnv.NUMBA_CACHE_DIR": "/tmp/numba",
    }
    return {**ours, **user_conf}


def submit_args(conf: Mapping[str, str]) -> str:
    """PYSPARK_SUBMIT_ARGS for ``conf`` (pyspark splits it as a shell would)."""
    args = " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in sorted(conf.items()))
    return f"{args} pyspark-shell"


def executor_template(pod_labels: Mapping[str, str], pod_security: Obj, container_security: Obj, data_volume: Obj,
                      data_mount: Obj, affinity: Obj | None, local_dir_limit: str) -> str:
    """The executors' pod template, as the JSON of LOGKEEPER_EXECUTOR_POD_TEMPLATE."""
    spec: Obj = {
        "securityContext": pod_security,
        "automountServiceAccountToken": False,
        "containers": [{"name": EXECUTOR_CONTAINER, "securityContext": container_security,
                        "volumeMounts": [data_mount, {"name": "tmp", "mountPath": "/tmp"},
                                         {"name": LOCAL_DIR_VOLUME, "mountPath": LOCAL_DIR}]}],
        "volumes": [data_volume, {"name": "tmp", "emptyDir": {"sizeLimit": EXECUTOR_TMP_LIMIT}},
                    {"name": LOCAL_DIR_VOLUME, "emptyDir": {"sizeLimit": local_dir_limit}}],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": dict(pod_labels)}, "spec": spec},
                      sort_keys=True)


def network_policy(name: str, namespace: str, pod_labels: Mapping[str, str], owner: Obj) -> Obj:
    """Ingress between the job's pods (``pod_labels`` select the driver and the executors) on the
    driver's and the block managers' ports; owned by the CompactionJob."""
    same_job: Obj = {"podSelector": {"matchLabels": dict(pod_labels)}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(pod_labels), "ownerReferences": [owner]},
        "spec": {
            "podSelector": {"matchLabels": dict(pod_labels)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [same_job], "ports": [{"protocol": "TCP", "port": p}
                                                       for p in (DRIVER_PORT, BLOCK_MANAGER_PORT)]}],
        },
    }
