"""Pure manifest builders: names, owners, mounts, security, the restart annotation, the Job."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from logkeeper_operator import builders
from logkeeper_operator.jobspec import parse_compactionjob
from logkeeper_operator.names import ANNOTATION_RESTART_HASH, batch_job_name, compaction_job_name, dns_label
from logkeeper_operator.spec import SCRATCH_FACTOR, SpecError, parse_logvolume

OWNER = builders.owner_reference("LogVolume", "orders", "uid-1")


def lv(**over: object):  # type: ignore[no-untyped-def]
    s: dict[str, object] = {"volumes": [{"id": "d0", "size": "2Gi", "deleteClaim": True, "storageClassName": "fast"},
                                        {"id": "d1", "size": "1Gi"}, {"id": "d2", "existingClaim": "mine"}],
                            "containers": [{"name": "app", "image": "app:1", "env": [{"name": "X", "value": "1"}]}],
                            "sidecar": {"port": 9000, "resources": {"limits": {"memory": "1Gi"}}}}
    s.update(over)
    return parse_logvolume(s, default_image="logkeeper:t")


def test_pvcs_owned_only_with_delete_claim() -> None:
    claims = {c["metadata"]["name"]: c for c in builders.pvcs("orders", "ns", OWNER, lv())}
    assert set(claims) == {"orders-d0", "orders-d1"}  # an existing claim is never made
    assert claims["orders-d0"]["metadata"]["ownerReferences"] == [OWNER]
    assert "ownerReferences" not in claims["orders-d1"]["metadata"]
    assert claims["orders-d0"]["spec"]["storageClassName"] == "fast"
    assert claims["orders-d1"]["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_statefulset() -> None:
    ss = builders.statefulset("orders", "ns", OWNER, lv(), "abc")
    assert ss["metadata"]["ownerReferences"] == [OWNER] and ss["spec"]["replicas"] == 1
    tmpl = ss["spec"]["template"]
    assert tmpl["metadata"]["annotations"][ANNOTATION_RESTART_HASH] == "abc"
    assert ss["spec"]["selector"]["matchLabels"].items() <= tmpl["metadata"]["labels"].items()
    pod = tmpl["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"] == 10001
    sidecar, app = pod["containers"]
    assert sidecar["args"] == ["sidecar", "--config", "/etc/logkeeper/config.yaml"]
    assert sidecar["ports"][0]["containerPort"] == 9000 and sidecar["image"] == "logkeeper:t"
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] and not sidecar["securityContext"][
        "allowPrivilegeEscalation"]
    assert sidecar["resources"] == {"limits": {"memory": "1Gi"}}
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert mounts["/data/d0"] == "data-d0" and "/tmp" in mounts and "/etc/logkeeper" in mounts
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    assert claims["data-d2"] == "mine" and claims["data-d0"] == "orders-d0"
    env = {e["name"]: e["value"] for e in app["env"]}
    assert env["LOGKEEPER_URL"] == "http://127.0.0.1:9000" and env["X"] == "1"
    # the sidecar listens on loopback and on the pod's IP, not on 0.0.0.0; POD_IP comes first:
    # Kubernetes expands $(POD_IP) only from variables defined before
    names = [e["name"] for e in sidecar["env"]]
    assert names.index("POD_IP") < names.index("LOGKEEPER_LISTEN")
    side_env = {e["name"]: e for e in sidecar["env"]}
    assert side_env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert side_env["LOGKEEPER_LISTEN"]["value"] == "127.0.0.1:9000,[$(POD_IP)]:9000"
    assert {"name": "token", "mountPath": "/var/run/secrets/logkeeper", "readOnly": True} in app["volumeMounts"]


def test_children_carry_owner_and_labels() -> None:
    spec = lv()
    for obj in (builders.configmap("orders", "ns", OWNER, "x: 1"), builders.service("orders", "ns", OWNER, spec),
                builders.secret("orders", "ns", OWNER, "tok"),
                builders.network_policy("orders", "ns", OWNER, spec, "op")):
        assert obj["metadata"]["ownerReferences"] == [OWNER]
        assert obj["metadata"]["labels"]["logkeeper.io/logvolume"] == "orders"
    svc = builders.service("orders", "ns", OWNER, spec)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9000


def test_service_lists_the_kafka_listeners_other_pods_reach() -> None:
    spec = lv(sidecar={"port": 9000, "settings": {"kafka.listen": [
        "PLAINTEXT://[$(POD_IP)]:9093", "PLAINTEXT://0.0.0.0:9092", "127.0.0.1:9094", "PLAINTEXT://[::1]:9095",
        "PLAINTEXT://0.0.0.0:0", "PLAINTEXT://127.0.0.1:9093"]}})
    ports = builders.service("orders", "ns", OWNER, spec)["spec"]["ports"]
    assert ports == [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"},
                     {"name": "kafka-9092", "port": 9092, "targetPort": 9092, "protocol": "TCP"},
                     {"name": "kafka-9093", "port": 9093, "targetPort": 9093, "protocol": "TCP"}]
    assert builders.sidecar_ports(spec) == [9000, 9092, 9093, 9094, 9095]  # loopback ones guarded too
    assert [p["name"] for p in builders.service("orders", "ns", OWNER, lv())["spec"]["ports"]] == ["http"]


def test_network_policy_admits_the_operator_and_labelled_clients_to_the_sidecar_only() -> None:
    spec = lv(sidecar={"port": 9000, "settings": {"kafka.listen": ["PLAINTEXT://0.0.0.0:9092", "127.0.0.1:0"]}})
    np = builders.network_policy("orders", "ns", OWNER, spec, "logkeeper-system")
    assert np["apiVersion"] == "networking.k8s.io/v1" and np["kind"] == "NetworkPolicy"
    assert np["metadata"]["name"] == "orders" and np["metadata"]["namespace"] == "ns"
    assert np["metadata"]["ownerReferences"] == [OWNER]  # garbage-collected with the LogVolume
    ss = builders.statefulset("orders", "ns", OWNER, spec, "h")
    assert np["spec"]["podSelector"]["matchLabels"] == ss["spec"]["selector"]["matchLabels"]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    sidecar_rule, others = np["spec"]["ingress"]
    assert sidecar_rule["ports"] == [{"protocol": "TCP", "port": 9000}, {"protocol": "TCP", "port": 9092}]
    operator, clients = sidecar_rule["from"]
    assert operator == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "logkeeper",
                                                        "app.kubernetes.io/component": "operator"}},
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "logkeeper-system"}}}
    assert clients == {"podSelector": {"matchLabels": {"logkeeper.io/client": "true"}}}  # this namespace only
    # every other port stays open (the application containers' own traffic), the sidecar's do not
    assert "from" not in others
    assert others["ports"] == [{"protocol": "TCP", "port": 1, "endPort": 8999},
                               {"protocol": "TCP", "port": 9001, "endPort": 9091},
                               {"protocol": "TCP", "port": 9093, "endPort": 65535},
                               {"protocol": "UDP"}, {"protocol": "SCTP"}]
    anywhere = builders.network_policy("orders", "ns", OWNER, lv(), None)["spec"]["ingress"][0]["from"][0]
    assert anywhere["namespaceSelector"] == {}  # operator run outside the cluster: its labels, any namespace
    edge = builders.network_policy("orders", "ns", OWNER, lv(sidecar={"port": 65535}), "op")
    assert edge["spec"]["ingress"][1]["ports"][:1] == [{"protocol": "TCP", "port": 1, "endPort": 65534}]


ARGS = ["spark-compact", "--log-dir", "/data/d0/log", "--partition", "t-1", "--staging",
        "/data/d0/log/.logkeeper-staging/t-1/0123456789ab", "--master", "local[*]", "--end-offset", "42"]


def test_batch_job_local_and_kubernetes() -> None:
    cj = parse_compactionjob({"logVolume": "orders", "topic": "t", "partition": 1, "volumeId": "d0",
                              "logDir": "/data/d0/log", "handOff": "0123456789ab", "args": ARGS,
                              "staging": ARGS[6], "timeoutSeconds": 600})
    job = builders.batch_job("cj1", "ns", "cj-uid", 2, cj, lv().spark, "orders-d0")
    assert job["metadata"]["name"] == "cj1-a2" and job["metadata"]["ownerReferences"][0]["kind"] == "CompactionJob"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 600
    pod = job["spec"]["template"]["spec"]
    # the sidecar's arguments, as they are, under the image's init (tini reaps Spark's children)
    assert pod["containers"][0]["command"] == ["/usr/bin/tini", "--", "logkeeper", *ARGS]
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/data/d0"  # where the sidecar has it
    assert pod["affinity"]["podAffinity"] and pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "orders-d0"
    shared = builders.batch_job("cj1", "ns", "cj-uid", 2, cj, lv().spark, "orders-d0", read_write_many=True)
    assert "affinity" not in shared["spec"]["template"]["spec"]  # a ReadWriteMany claim mounts on any node


def test_batch_job_kubernetes_mode_driver_and_executor_pods() -> None:
    cj = parse_compactionjob({"logVolume": "orders", "topic": "t", "partition": 1, "volumeId": "d0",
                              "logDir": "/data/d0/log", "handOff": "0123456789ab", "args": ARGS,
                              "staging": ARGS[6], "timeoutSeconds": 600})
    k8s = lv(spark={"mode": "kubernetes", "serviceAccountName": "spark", "image": "img:1",
                    "conf": {"spark.executor.instances": "4"}}).spark
    job = builders.batch_job("cj1", "ns", "cj-uid", 1, cj, k8s, "orders-d0")
    pod = job["spec"]["template"]["spec"]
    # the driver: the service account's token mounted, on the sidecar's node (the claim is ReadWriteOnce)
    assert pod["serviceAccountName"] == "spark" and "automountServiceAccountToken" not in pod
    assert pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
    env = pod["containers"][0]["env"]
    values = {e["name"]: e.get("value") for e in env}
    # the driver reads its pod's IP and name (spark/on_k8s.py driver_conf)
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env if "valueFrom" in e} == {
        "POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
    conf = dict(a.split("=", 1) for a in shlex.split(values["PYSPARK_SUBMIT_ARGS"])[:-1] if a != "--conf")
    assert conf["spark.executor.instances"] == "4"  # the user's conf wins over our default (2)
    assert conf["spark.kubernetes.container.image"] == "img:1" and conf["spark.kubernetes.namespace"] == "ns"
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"].endswith("/serviceaccount/token")
    # the executors' pod: restricted security, no token, the claim where the sidecar has it, pinned alike
    template = json.loads(values["LOGKEEPER_EXECUTOR_POD_TEMPLATE"])
    spec = template["spec"]
    assert template["kind"] == "Pod" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == builders.pod_security_context()
    container = spec["containers"][0]
    assert container["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert container["securityContext"] == builders.container_security_context()
    assert {"name": "data", "mountPath": "/data/d0"} in container["volumeMounts"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "orders-d0"}} in spec["volumes"]
    assert spec["affinity"] == pod["affinity"]
    # the executors carry the Job pod's labels (the NetworkPolicy below selects both) ...
    assert template["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    # ... and Spark's local dir is our bounded emptyDir (named and mounted where Spark looks for it)
    assert values["SPARK_LOCAL_DIRS"] == "/tmp/spark"  # the driver's, which Spark gives the executors
    assert {"name": "spark-local-dir-1", "mountPath": "/tmp/spark"} in container["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    scratch = next(v for v in pod["volumes"] if v["name"] == "tmp")["emptyDir"]["sizeLimit"]
    assert volumes["spark-local-dir-1"]["emptyDir"] == {"sizeLimit": scratch}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"]
    # the default master reaches the API server without cluster DNS
    assert lv(spark={"mode": "kubernetes", "serviceAccountName": "s"}).spark.master == \
        "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    with pytest.raises(SpecError, match=r"spec\.spark\.serviceAccountName"):
        lv(spark={"mode": "kubernetes"})


def test_spark_network_policy_admits_only_the_jobs_pods_on_sparks_ports() -> None:
    policy = builders.spark_network_policy("cj1", "ns", "cj-uid", "orders")
    assert policy["metadata"]["name"] == "cj1-spark"
    assert policy["metadata"]["ownerReferences"][0] == builders.owner_reference("CompactionJob", "cj1", "cj-uid")
    job_pods = builders.compaction_pod_labels("orders", "cj1")
    assert policy["spec"]["podSelector"] == {"matchLabels": job_pods}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": job_pods}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 7078}, {"protocol": "TCP", "port": 7079}]
    # another CompactionJob's pods are not selected, nor the sidecar's
    other = builders.compaction_pod_labels("orders", "cj2")
    assert not set(job_pods.items()) <= set(other.items())
    assert not set(job_pods.items()) <= set(builders.selector("orders").items())


def test_spark_scratch_is_sized_from_the_backlog() -> None:
    base = {"logVolume": "orders", "topic": "t", "partition": 1, "volumeId": "d0", "logDir": "/data/d0/log",
            "handOff": "0123456789ab", "args": ARGS, "staging": ARGS[6]}

    def tmp(spark: dict[str, Any], backlog: int) -> dict[str, Any]:
        cj = parse_compactionjob({**base, "backlogBytes": backlog})
        job = builders.batch_job("cj1", "ns", "u", 1, cj, lv(spark=spark).spark, "orders-d0")
        return next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp")

    assert tmp({}, 0) == {"name": "tmp", "emptyDir": {"sizeLimit": "1024Mi"}}  # the floor
    assert tmp({}, 100 << 30) == {"name": "tmp", "emptyDir": {"sizeLimit": f"{int(100 * 1024 * SCRATCH_FACTOR)}Mi"}}
    assert tmp({"scratch": {"factor": 2}}, 10 << 30)["emptyDir"]["sizeLimit"] == "20480Mi"
    assert tmp({"scratch": {"size": "7Gi"}}, 100 << 30)["emptyDir"]["sizeLimit"] == "7Gi"
    pvc = tmp({"scratch": {"storageClassName": "fast", "size": "50Gi"}}, 0)
    claim = pvc["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "fast" and claim["resources"]["requests"]["storage"] == "50Gi"
    with pytest.raises(SpecError, match=r"spec\.spark\.scratch\.size"):
        lv(spark={"scratch": {"size": "lots"}})
    with pytest.raises(SpecError, match=r"spec\.spark\.scratch\.factor"):
        lv(spark={"scratch": {"factor": 0}})


def test_compaction_job_is_made_with_the_finalizer_and_the_backlog() -> None:
    cj = parse_compactionjob({"logVolume": "orders", "topic": "t", "partition": 1, "volumeId": "d0",
                              "logDir": "/data/d0/log", "handOff": "0123456789ab", "args": ARGS, "staging": ARGS[6],
                              "backlogBytes": 5})
    body = builders.compaction_job_manifest("cj1", "ns", "orders", "u1", cj, lv().spark, "orders-d0")
    assert body["metadata"]["finalizers"] == ["logkeeper.io/compaction-cleanup"]
    assert body["spec"]["backlogBytes"] == 5


def test_cancel_job_writes_the_failure_where_the_sidecar_waits() -> None:
    job = builders.cancel_job("cj1", "ns", "orders", "lv-uid", ARGS[6], "d0", "orders-d0", "img:1", "deleted")
    assert job["metadata"]["name"] == "cj1-cancel"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "LogVolume"  # outlives the CompactionJob
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == ["/usr/bin/tini", "--", "python", "-m", "logkeeper_operator.cancel",
                                               ARGS[6], "deleted"]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data/d0"}]
    assert pod["affinity"]["podAffinity"]


def test_compaction_job_spec_needs_the_hand_off() -> None:
    base = {"logVolume": "orders", "topic": "t", "partition": 1, "volumeId": "d0", "logDir": "/data/d0/log",
            "handOff": "0123456789ab", "args": ARGS, "staging": ARGS[6]}
    for field, bad, message in (("args", None, "spec.args"), ("args", ["rm", "-rf"], "spec.args"),
                                ("args", ["spark-compact", 3], "spec.args"), ("handOff", "", "spec.handOff"),
                                ("staging", None, "spec.staging")):
        with pytest.raises(SpecError, match=message):
            parse_compactionjob({**base, field: bad})


def test_names() -> None:
    assert dns_label("ok-name") == "ok-name"
    weird = dns_label("Bad_Name.with.dots")
    assert weird.startswith("bad-name-with-dots-") and len(weird) <= 63
    long = compaction_job_name("lv", "t" * 240, 3, "0123456789abcdef")
    assert len(long) <= 253 and long == compaction_job_name("lv", "t" * 240, 3, "0123456789abcdef")
    assert compaction_job_name("orders", "t", 0, "0123456789abcdef") == "orders-t-0-0123456789ab"
    assert len(batch_job_name(long, 1)) <= 63
