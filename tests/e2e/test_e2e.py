"""make e2e: logkeeper as users run it, on a real one-node cluster (conftest.py): kubectl apply -f
crds/, helm install (the operator a Deployment of our image, in-cluster, under the chart's
ServiceAccount and RBAC), kubectl apply a LogVolume on static local PVs; the StatefulSet's pod runs
our sidecar image under Pod Security "restricted", kubelet runs its probes; records go through the
Service; a backlog becomes a CompactionJob whose pod runs spark-compact in our image, then one
whose Spark executors are pods of our image (spec.spark.mode kubernetes), and the first is pruned
(the policy's successfulJobsHistoryLimit 1); the sidecar container is killed and its pod deleted,
with nothing lost; deletions leave nothing behind. Steps run in order (one cluster); each names
what it checks.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
from pathlib import Path
from typing import Any

import yaml

from .compaction_jobs import HANDOFF_CLEANER, attempt_seconds, backlog, compaction_jobs, finished
from .conftest import NAMESPACE, OPERATOR_VALUES, RELEASE_NAMESPACE, REPO
from .kafka_clients import produce as kafka_produce
from .kafka_clients import read_partition as kafka_read
from .kube import Helm, Kubectl, condition, container_ready, local_pv, mark, printed_columns, wait_for
from .pods import SIDECAR_PORT, metrics, on_bridge, sample, through_service
from .realnode import NODE_NAME, RealNode

CHART = REPO / "charts" / "logkeeper"
LV, POD = "orders", "orders-0"  # names.pod_name: the StatefulSet's one pod
OPERATOR_SA = f"system:serviceaccount:{RELEASE_NAMESPACE}:logkeeper"
POLICY = json.dumps({"apiVersion": "logkeeper.io/v1alpha1", "kind": "CleanerPolicy",
                     "metadata": {"name": "fast", "namespace": NAMESPACE},
                     "spec": {"cleaner": HANDOFF_CLEANER, "compactionJobs": {"successfulJobsHistoryLimit": 1}}})
LOGVOLUME = f"""
apiVersion: logkeeper.io/v1alpha1
kind: LogVolume
metadata: {{name: {LV}, namespace: {NAMESPACE}}}
spec:
  volumes:
    - {{id: disk-0, size: 1Gi, deleteClaim: true}}
    - {{id: disk-1, size: 1Gi}}
  topics:
    - name: accounts
      partitions: 1
      configs:
        cleanup.policy: [compact]
        segment.bytes: 16384
        min.cleanable.dirty.ratio: 0.01
    - name: events
      partitions: 2
  node:
    log.retention.check.interval.ms: 1000
    log.initial.task.delay.ms: 0
  cleanerPolicyRef: {{name: fast}}
  sidecar:
    settings:
      kafka.listen: ["PLAINTEXT://[$(POD_IP)]:9092"]
  spark:
    timeoutSeconds: 600
    maxAttempts: 2
    cooldownSeconds: 3600
"""
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
# what step 6 and step 8 wrote to accounts-0, key -> last value; what step 9 wrote to events-0
WRITTEN: dict[str, Any] = {"accounts": {}, "events": []}


def lv_json(kubectl: Kubectl, name: str = LV) -> dict[str, Any]:
    return dict(kubectl.json("get", "logvolume", name, "-n", NAMESPACE))


def partition_status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    return next((p for p in lv_json(kubectl).get("status", {}).get("partitions") or [] if p["partition"] == name), {})


def pod(kubectl: Kubectl, name: str = POD) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", name, "-n", NAMESPACE))


def sidecar_ready(kubectl: Kubectl, min_restarts: int = 0) -> dict[str, Any] | None:
    return container_ready(pod(kubectl), "sidecar", min_restarts)


def latest_by_key(records: list[dict[str, Any]]) -> dict[str, str]:
    return {r["key"]: r["value"] for r in records}


# ------------------------------------------------------------------------------------------ steps
def test_01_cluster_up_and_namespaces_restricted(kubectl: Kubectl, versions: None) -> None:
    wait_for(lambda: condition(kubectl.json("get", "node", NODE_NAME), "Ready").get("status") == "True",
             120, f"node {NODE_NAME} Ready")
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert server.startswith("v1."), server
    for ns in (NAMESPACE, RELEASE_NAMESPACE):
        kubectl("create", "namespace", ns)
        kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest")
        wait_for(lambda n=ns: kubectl.exists("serviceaccount", "default", n), 60, f"{ns}'s default ServiceAccount")
    # Pod Security admission enforces "restricted": a pod that asks for nothing is refused
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "c", "image": "logkeeper:0.1.0"}]}}
    refused = kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(bare), check=False)
    assert refused.returncode != 0 and "restricted" in refused.stderr, refused.stderr + refused.stdout
    mark("node Ready; namespaces enforce Pod Security restricted")


def test_02_crds_apply(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(REPO / "crds"))
    # polled here, not with ``kubectl wait --for=condition=Established``: that fails at once
    # (".status.conditions accessor error: <nil>") when it reads a CRD whose status the API
    # server has not written yet, which happened in one CI run of 2026-11-23
    for crd in ("logvolumes", "cleanerpolicies", "compactionjobs"):
        wait_for(lambda name=f"crd/{crd}.logkeeper.io": kubectl(
            "get", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}").stdout == "True",
            60, f"{crd}.logkeeper.io Established")
    out = kubectl("api-resources", "--api-group=logkeeper.io").stdout
    for short in ("lkv", "lkcp", "lkcj"):
        assert short in out, out
    mark("CRDs applied")


def test_03_chart_lint_and_server_dry_run(helm: Helm, kubectl: Kubectl) -> None:
    lint = helm("lint", "--strict", str(CHART), "--set", f"operator.watchNamespaces={{{NAMESPACE}}}")
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    # helm template talks to no cluster: give it the server's version for the chart's kubeVersion check
    server = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    for values in ([], ["--set", "operator.clusterWide=true"]):
        rendered = helm("template", "logkeeper", str(CHART), "-n", RELEASE_NAMESPACE, "--kube-version", server,
                        "--set", f"operator.watchNamespaces={{{NAMESPACE}}}", *values).stdout
        kinds = sorted({d["kind"] for d in yaml.safe_load_all(rendered) if d})
        assert "Deployment" in kinds and "ServiceAccount" in kinds, kinds
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered)
        for doc in yaml.safe_load_all(rendered):
            for rule in (doc or {}).get("rules", []):
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    mark("chart linted, server-side dry run")


def test_04_helm_install_runs_the_operator_in_cluster(helm: Helm, kubectl: Kubectl, node: RealNode,
                                                      env: dict[str, str]) -> None:
    values = node.workdir / "values.yaml"
    values.write_text(OPERATOR_VALUES)
    helm("install", "logkeeper", str(CHART), "-n", RELEASE_NAMESPACE, "-f", str(values), "--wait", "--timeout", "300s")
    dep = kubectl.json("get", "deployment", "logkeeper", "-n", RELEASE_NAMESPACE)
    assert dep["status"].get("readyReplicas") == 1, dep["status"]
    assert kubectl.exists("role", "logkeeper", NAMESPACE) and kubectl.exists("rolebinding", "logkeeper", NAMESPACE)
    can = kubectl("auth", "can-i", "create", "statefulsets", "-n", NAMESPACE, f"--as={OPERATOR_SA}",
                  check=False).stdout.strip()
    cannot = kubectl("auth", "can-i", "delete", "secrets", "-n", NAMESPACE, f"--as={OPERATOR_SA}",
                     check=False).stdout.strip()
    assert (can, cannot) == ("yes", "no")
    pods = kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/instance=logkeeper")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    op = pods[0]
    assert op["spec"]["serviceAccountName"] == "logkeeper" and op["spec"]["nodeName"] == NODE_NAME
    assert op["status"]["phase"] == "Running" and container_ready(op, "operator"), op["status"]
    status = op["status"]["containerStatuses"][0]
    assert env["IMAGE_ID"] in status["imageID"] or env["IMAGE_DIGEST"] in status["imageID"], status
    print(kubectl("get", "pods", "-A", "-o", "wide").stdout)
    mark("helm install: the operator's pod Running in-cluster from our image under its ServiceAccount")


def test_05_logvolume_becomes_ready_on_the_node(kubectl: Kubectl, node: RealNode) -> None:
    pvs = [local_pv(f"e2e-disk-{i}", node.workdir / "volumes" / f"disk-{i}", "1Gi", NODE_NAME,
                    (NAMESPACE, f"{LV}-disk-{i}")) for i in range(2)]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(pvs))
    kubectl("apply", "-f", "-", stdin=POLICY)
    kubectl("apply", "-f", "-", stdin=LOGVOLUME)
    for kind, name in (("statefulset", LV), ("configmap", f"{LV}-config"), ("service", LV),
                       ("secret", f"{LV}-token"), ("pvc", f"{LV}-disk-0"), ("pvc", f"{LV}-disk-1")):
        wait_for(lambda k=kind, n=name: kubectl.exists(k, n, NAMESPACE), 60, f"{kind}/{name} made by the operator")
    config = yaml.safe_load(kubectl.json("get", "configmap", f"{LV}-config", "-n", NAMESPACE)["data"]["config.yaml"])
    assert config["node"]["log.dirs"] == ["/data/disk-0/log", "/data/disk-1/log"]
    assert config["cleaner"]["log.cleaner.dedupe.buffer.size"] == 24576
    ready = wait_for(lambda: sidecar_ready(kubectl), 300, "the sidecar container Ready (kubelet's /readyz probe)")
    wait_for(lambda: condition(lv_json(kubectl), "Ready").get("status") == "True", 120, "LogVolume orders Ready")
    for i in range(2):
        claim = kubectl.json("get", "pvc", f"{LV}-disk-{i}", "-n", NAMESPACE)
        assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == f"e2e-disk-{i}"
    assert kubectl.json("get", "pvc", f"{LV}-disk-0", "-n", NAMESPACE)["metadata"]["ownerReferences"][0][
        "kind"] == "LogVolume"
    assert not kubectl.json("get", "pvc", f"{LV}-disk-1", "-n", NAMESPACE)["metadata"].get("ownerReferences")
    st = pod(kubectl)["status"]
    assert st["phase"] == "Running" and on_bridge(st["podIP"]), st
    # what the runtime runs: the OCI spec containerd gave runc, and the process itself
    info = json.loads(node.crictl("inspect", ready["containerID"].split("://", 1)[1]).stdout)["info"]
    spec = info["runtimeSpec"]
    assert spec["process"]["user"]["uid"] == 10001 and spec["process"]["user"]["gid"] == 10001, spec["process"]
    assert spec["root"].get("readonly") is True, spec["root"]
    caps = spec["process"].get("capabilities", {})
    assert not any(caps.get(k) for k in ("bounding", "effective", "permitted", "inheritable", "ambient")), caps
    assert spec["process"].get("noNewPrivileges") is True
    assert spec["linux"].get("seccomp", {}).get("defaultAction") == "SCMP_ACT_ERRNO"
    status_file = Path(f"/proc/{info['pid']}/status").read_text()
    uids = next(line for line in status_file.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids[:2] == ["10001", "10001"], uids
    assert not node.kernel_tunables_changed(), f"kubelet changed them again: {node.kernel_tunables_changed()}"
    print(kubectl("get", "pods", "-A", "-o", "wide").stdout)
    mark("LogVolume Ready: the sidecar pod Running from our image on the local PVs (uid 10001, read-only root)")


def test_06_records_through_the_service_and_cleaning_state(kubectl: Kubectl, node: RealNode) -> None:
    api = through_service(kubectl, LV)
    for rnd in range(4):  # the same keys again and again: a dirty compacted log
        for lo in range(0, 300, 100):  # a batch must fit in a segment (16 KiB here), as in Kafka
            batch = [{"key": f"k{i}", "value": f"v{rnd}-{i}-" + "x" * 40} for i in range(lo, lo + 100)]
            api.produce("accounts", 0, batch)
            WRITTEN["accounts"].update({r["key"]: r["value"] for r in batch})
    assert latest_by_key(api.read_all("accounts", 0)) == WRITTEN["accounts"]
    assert any((node.workdir / "volumes" / "disk-0").rglob("*.log")), "no segment on the PV"
    mark("records produced through the Service and read back; segments on the local PV")
    wait_for(lambda: partition_status(kubectl, "accounts-0").get("lastCleanedTime"), 120,
             "a cleaning round on accounts-0 reported in the status")
    table = kubectl("get", "logvolumes", "-n", NAMESPACE).stdout
    columns = printed_columns(table)
    assert list(columns)[:6] == ["NAME", "READY", "CLEANING", "PARTITIONS", "MAX-DIRTY", "BACKLOGS"], table
    # the topics' 3 and the Kafka listener's __consumer_offsets (its group coordinator's)
    assert (columns["NAME"], columns["READY"], columns["PARTITIONS"]) == (LV, "True", "4"), table
    assert columns["CLEANING"].startswith(("idle", "cleaning")), table  # e.g. "cleaning 1/1"
    wide = kubectl("get", "lkv", "-n", NAMESPACE, "-o", "wide").stdout
    assert "OFFLINE" in wide and "UNCLEANABLE" in wide, wide
    print("\n" + table)
    mark("kubectl get logvolumes shows the cleaning state")


def test_06b_kafka_clients_produce_and_fetch_in_the_pod(kubectl: Kubectl) -> None:
    """A stock Kafka client (librdkafka) produces to and fetches from the listener in the pod:
    the fetch answers leave through sendfile from the segments on the PV, and the page-cache
    query that decides where a fetch is answered (cachestat) runs under the pod's RuntimeDefault
    seccomp profile. What it writes joins WRITTEN, so the later steps (the roll, the compaction
    jobs, the kill, the deletion) check it too."""
    ports = kubectl.json("get", "service", LV, "-n", NAMESPACE)["spec"]["ports"]
    assert {"name": "kafka-9092", "port": 9092, "targetPort": 9092, "protocol": "TCP"} in ports, ports
    ip = on_bridge(pod(kubectl)["status"]["podIP"])
    bootstrap = f"{ip}:9092"
    records = [(f"k{i}", f"kafka-{i}-" + secrets.token_hex(8)) for i in range(150, 450)]
    kafka_produce(bootstrap, "accounts", 0, records)
    WRITTEN["accounts"].update(records)
    read, committed = kafka_read(bootstrap, "accounts", 0, group="e2e-reader")
    assert dict(read) == WRITTEN["accounts"], "the Kafka client read other values than were written"
    assert latest_by_key(through_service(kubectl, LV).read_all("accounts", 0)) == WRITTEN["accounts"]
    figures = metrics(ip, SIDECAR_PORT, token=through_service(kubectl, LV).token)
    assert sample(figures, "logkeeper_kafka_page_cache_queryable") == 1.0, \
        "cachestat refused in the pod: every fetch goes to a thread"
    out = sample(figures, "logkeeper_kafka_record_bytes_out_total", topic="accounts")
    fetches = sample(figures, "logkeeper_kafka_request_duration_seconds_count", api="Fetch")
    reads = {on: sample(figures, "logkeeper_kafka_fetch_reads_total", on=on) for on in ("loop", "thread")}
    assert out and fetches and sum(v or 0 for v in reads.values()) >= 1, (out, fetches, reads)
    mark(f"Kafka client produced {len(records)} records and fetched {len(read)} back from {bootstrap} "
         f"(group offset {committed} committed; {out:.0f} record bytes out in {fetches:.0f} fetches, "
         f"reads {reads})")


def test_07_topic_change_is_live_and_cleaner_change_rolls(kubectl: Kubectl) -> None:
    uid = pod(kubectl)["metadata"]["uid"]
    kubectl("patch", "logvolume", LV, "-n", NAMESPACE, "--type=json", "-p",
            json.dumps([{"op": "replace", "path": "/spec/topics/1/partitions", "value": 3}]))
    wait_for(lambda: partition_status(kubectl, "events-2"), 60, "events-2 created live by the operator")
    assert pod(kubectl)["metadata"]["uid"] == uid, "a partition count change must not roll the pod"
    kubectl("patch", "cleanerpolicy", "fast", "-n", NAMESPACE, "--type=merge", "-p",
            json.dumps({"spec": {"cleaner": {"log.cleaner.backoff.ms": 250}}}))
    wait_for(lambda: pod(kubectl)["metadata"]["uid"] != uid, 120, "the pod rolled after a cleaner change")
    # the new pod itself must serve: the LogVolume's Ready may still be the old pod's until the next poll
    wait_for(lambda: sidecar_ready(kubectl) and condition(lv_json(kubectl), "Ready").get("status") == "True"
             and partition_status(kubectl, "events-2"), 300, "Ready again after the roll")
    assert latest_by_key(through_service(kubectl, LV).read_all("accounts", 0)) == WRITTEN["accounts"]
    mark("topic change live; cleaner change rolled the pod, records kept")


def test_08_backlog_becomes_a_compaction_job_in_our_image(kubectl: Kubectl, env: dict[str, str]) -> None:
    api = through_service(kubectl, LV)
    for batch in backlog(api, "accounts", "b", "v" + "y" * 20):
        WRITTEN["accounts"].update({r["key"]: r["value"] for r in batch})
    cjs = wait_for(lambda: compaction_jobs(kubectl), 180, "a CompactionJob for the backlog on accounts-0")
    cj = cjs[0]
    assert cj["spec"]["topic"] == "accounts" and cj["spec"]["partition"] == 0
    name = cj["metadata"]["name"]
    done = wait_for(lambda: finished(kubectl, name), 600, f"CompactionJob {name} to finish", every_s=3)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["submissionId"] == f"{name}-a1"
    # the API conventions (issue 20): conditions with one reason, observedGeneration, RFC 3339 times
    st = done["status"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert {t: (c["status"], c["reason"]) for t, c in conds.items()} == {
        "Ready": ("True", "Succeeded"), "Progressing": ("False", "Succeeded"), "Failed": ("False", "Succeeded")}, conds
    assert all(RFC3339.match(c["lastTransitionTime"]) and c["message"] for c in conds.values()), conds
    assert st["observedGeneration"] == done["metadata"]["generation"], st
    for key in ("startTime", "completionTime", "attemptStartTime"):
        assert RFC3339.match(st[key]), (key, st)
    assert st["startTime"] <= st["attemptStartTime"] <= st["completionTime"], st
    # our finalizer is on unfinished CompactionJobs only: gone once it ended
    wait_for(lambda: not kubectl.json("get", "compactionjob", name, "-n", NAMESPACE)["metadata"].get("finalizers"),
             60, f"CompactionJob {name}'s finalizer removed after it ended")
    job = kubectl.json("get", "job", f"{name}-a1", "-n", NAMESPACE)
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    # under tini, the image's init (a Job's command replaces the entrypoint)
    assert cmd[:4] == ["/usr/bin/tini", "--", "logkeeper", "spark-compact"] and "--partition" in cmd, cmd
    # the Job's pod ran on the node, in our image, and exited 0
    # (kubelet may report the pod's phase a moment after the Job controller counted its container)
    job_pods = wait_for(lambda: [p for p in kubectl.json("get", "pods", "-n", NAMESPACE, "-l",
                                                         f"job-name={name}-a1")["items"]
                                 if p["status"].get("phase") == "Succeeded"], 60, f"{name}-a1's pod Succeeded")
    assert len(job_pods) == 1, [p["metadata"]["name"] for p in job_pods]
    spark = job_pods[0]["status"]["containerStatuses"][0]
    assert env["IMAGE_ID"] in spark["imageID"] or env["IMAGE_DIGEST"] in spark["imageID"], spark
    assert spark["state"]["terminated"]["exitCode"] == 0, spark
    print("\n" + kubectl("get", "compactionjobs", "-n", NAMESPACE, "-o", "wide").stdout)
    print(done["status"]["message"])
    figures = {k: int(v.replace(",", "")) for k, v in re.findall(r"(bytes_read|bytes_written) ([\d,]+)",
                                                                  done["status"]["message"])}
    assert figures["bytes_written"] < figures["bytes_read"], done["status"]  # the overwritten half went
    # the result is installed: every key's last value, and only the last, is what the sidecar serves
    records = api.read_all("accounts", 0)
    assert latest_by_key(records) == WRITTEN["accounts"]
    mark(f"CompactionJob {name}: spark-compact in our image's pod, result installed ({len(records)} records left)")


SPARK_SA = "logkeeper-spark"
# README "Executors as pods": the driver's ServiceAccount and what it may do in the namespace
SPARK_RBAC = [
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SPARK_SA, "namespace": NAMESPACE}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
     "metadata": {"name": SPARK_SA, "namespace": NAMESPACE},
     "rules": [{"apiGroups": [""], "resources": ["pods", "configmaps", "services", "persistentvolumeclaims"],
                "verbs": ["create", "get", "list", "watch", "delete", "deletecollection", "patch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": SPARK_SA, "namespace": NAMESPACE},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SPARK_SA},
     "subjects": [{"kind": "ServiceAccount", "name": SPARK_SA, "namespace": NAMESPACE}]},
]


def test_08b_executors_as_pods_on_the_node(kubectl: Kubectl, env: dict[str, str]) -> None:
    """spec.spark.mode kubernetes: the Job's pod is the driver, the executors are pods of our image
    on the node (the claim is ReadWriteOnce: the sidecar's node), and the result is exact."""
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": SPARK_RBAC}))
    uid = pod(kubectl)["metadata"]["uid"]
    # 100m a executor: the node's 2 cores are mostly requested by the pods already there. Spark
    # watches its executors' pods with a watch list, which this node's etcd (Debian's 3.4) cannot
    # serve (RequestWatchProgress): poll them instead, every 2 s (Spark's switch for such an etcd)
    kubectl("patch", "logvolume", LV, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": {"spark": {
        "mode": "kubernetes", "serviceAccountName": SPARK_SA, "cooldownSeconds": 0,
        "conf": {"spark.executor.instances": "2", "spark.kubernetes.executor.request.cores": "100m",
                 "spark.kubernetes.executor.enableApiWatcher": "false",
                 "spark.kubernetes.executor.apiPollingInterval": "2s"}}}}))
    wait_for(lambda: pod(kubectl)["metadata"]["uid"] != uid and sidecar_ready(kubectl)
             and condition(lv_json(kubectl), "Ready").get("status") == "True", 300,
             "the pod rolled for the new offload master, Ready", every_s=2)
    # the CompactionJobs so far, taken once the new pod runs: the old pod may have handed off a
    # backlog just as the spec changed, a CompactionJob that ends HandOffEnded when the pod rolls
    before = {c["metadata"]["name"]: c for c in compaction_jobs(kubectl)}
    api = through_service(kubectl, LV)
    for batch in backlog(api, "accounts", "b", "k" + "z" * 20):
        WRITTEN["accounts"].update({r["key"]: r["value"] for r in batch})
    cj = wait_for(lambda: next((c for c in compaction_jobs(kubectl) if c["metadata"]["name"] not in before), None), 180,
                  "a CompactionJob for the new backlog on accounts-0")
    name = cj["metadata"]["name"]
    assert cj["spec"]["mode"] == "kubernetes", cj["spec"]
    seen: dict[str, dict[str, Any]] = {}  # executor pod -> what it was seen as while the job ran

    def watch_executors() -> dict[str, Any] | None:
        for p in kubectl.json("get", "pods", "-n", NAMESPACE, "-l", "spark-role=executor")["items"]:
            c = (p["status"].get("containerStatuses") or [{}])[0]
            seen.setdefault(p["metadata"]["name"], {}).update(
                node=p["spec"].get("nodeName"), phase=p["status"].get("phase"), imageID=c.get("imageID"),
                ran=seen.get(p["metadata"]["name"], {}).get("ran") or "running" in (c.get("state") or {}),
                owner=[o["kind"] + "/" + o["name"] for o in p["metadata"].get("ownerReferences") or []],
                args=p["spec"]["containers"][0].get("args"), sa_token=p["spec"].get("automountServiceAccountToken"),
                labels=p["metadata"].get("labels") or {},
                local_dirs=[e.get("value") for e in p["spec"]["containers"][0].get("env") or []
                            if e["name"] == "SPARK_LOCAL_DIRS"],
                volumes={v["name"]: v.get("emptyDir") for v in p["spec"].get("volumes") or [] if "emptyDir" in v})
        return finished(kubectl, name)

    done = wait_for(watch_executors, 900, f"CompactionJob {name} (executors as pods) to finish", every_s=1)
    job_pods = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", f"job-name={name}-a1")["items"]
    if done["status"]["phase"] != "Succeeded" and job_pods:
        print(kubectl("logs", "-n", NAMESPACE, job_pods[0]["metadata"]["name"], "--tail=80", check=False).stdout)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    ran = {n: p for n, p in seen.items() if p["ran"]}
    print("\nexecutor pods seen:", json.dumps(seen, indent=1))
    assert ran, f"no executor pod ran: {seen}"
    driver = job_pods[0]["metadata"]["name"]
    for p in ran.values():
        assert p["node"] == NODE_NAME and p["args"] == ["executor"], p
        assert env["IMAGE_ID"] in p["imageID"] or env["IMAGE_DIGEST"] in p["imageID"], p
        assert p["owner"] == [f"Pod/{driver}"] and p["sa_token"] is False, p
        # Spark's local dir is the template's bounded emptyDir, not one Spark adds without a limit
        assert p["local_dirs"] == ["/tmp/spark"], p
        assert (p["volumes"].get("spark-local-dir-1") or {}).get("sizeLimit") and len(p["volumes"]) == 2, p
    # the job's NetworkPolicy selects the driver and every executor (this node enforces no policy:
    # what is checked is that the policy the operator made would admit this job's traffic)
    policy = kubectl.json("get", "networkpolicy", f"{name}-spark", "-n", NAMESPACE)
    wanted = policy["spec"]["podSelector"]["matchLabels"]
    assert [r["port"] for r in policy["spec"]["ingress"][0]["ports"]] == [7078, 7079], policy["spec"]
    for who, pod_labels in [(driver, job_pods[0]["metadata"]["labels"]), *((n, p["labels"]) for n, p in ran.items())]:
        assert wanted.items() <= pod_labels.items(), (who, wanted, pod_labels)
    # Spark deletes its executors when the job ends (and the driver's pod owns them regardless)
    wait_for(lambda: not kubectl.json("get", "pods", "-n", NAMESPACE, "-l", "spark-role=executor")["items"], 120,
             "the executor pods deleted after the job")
    assert latest_by_key(api.read_all("accounts", 0)) == WRITTEN["accounts"]
    local = next(c for c in before.values() if (c.get("status") or {}).get("phase") == "Succeeded")
    # the policy keeps one succeeded CompactionJob (successfulJobsHistoryLimit: 1): this one; the
    # earlier ones are pruned by the operator's compaction pass, their Jobs collected with them
    earlier = sorted(n for n, c in before.items() if (c.get("status") or {}).get("phase") == "Succeeded")
    wait_for(lambda: not [n for n in earlier if kubectl.exists("compactionjob", n, NAMESPACE)], 60,
             f"the earlier succeeded CompactionJobs {earlier} pruned (successfulJobsHistoryLimit 1)", every_s=1)
    wait_for(lambda: not [n for n in earlier if kubectl.exists("job", f"{n}-a1", NAMESPACE)], 60,
             f"the pruned CompactionJobs' Jobs collected ({earlier})", every_s=1)
    assert kubectl.exists("compactionjob", name, NAMESPACE), f"the newest succeeded CompactionJob {name} was kept"
    figures = {"local attempt s (step 8)": attempt_seconds(local["status"]),
               "executors-as-pods attempt s": attempt_seconds(done["status"]), "executor pods ran": len(ran)}
    print(f"issue-21 figures: {figures}")
    mark(f"CompactionJob {name}: driver {driver}, {len(ran)} executor pods of our image on {NODE_NAME}, "
         f"result installed ({figures})")


def test_09_killed_sidecar_container_is_restarted_with_nothing_lost(kubectl: Kubectl, node: RealNode) -> None:
    api = through_service(kubectl, LV)
    WRITTEN["events"] = [f"e{i}-{secrets.token_hex(4)}" for i in range(50)]
    api.produce("events", 0, [{"key": f"e{i}", "value": v} for i, v in enumerate(WRITTEN["events"])])
    before = sidecar_ready(kubectl)
    assert before is not None
    info = json.loads(node.crictl("inspect", before["containerID"].split("://", 1)[1]).stdout)["info"]
    os.kill(int(info["pid"]), signal.SIGKILL)  # the container's init (tini) and with it the sidecar
    after = wait_for(lambda: sidecar_ready(kubectl, min_restarts=before.get("restartCount", 0) + 1), 300,
                     "kubelet to restart the sidecar container and /readyz to pass again", every_s=2)
    assert after["containerID"] != before["containerID"]
    api = through_service(kubectl, LV)
    assert api.values("events", 0) == WRITTEN["events"], "records lost across the container restart"
    assert latest_by_key(api.read_all("accounts", 0)) == WRITTEN["accounts"]
    mark(f"sidecar container SIGKILLed, restarted by kubelet (restartCount {after['restartCount']}), nothing lost")


def test_10_deleted_pod_comes_back_with_its_data(kubectl: Kubectl) -> None:
    uid = pod(kubectl)["metadata"]["uid"]
    kubectl("delete", "pod", POD, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_for(lambda: pod(kubectl)["metadata"]["uid"] != uid and sidecar_ready(kubectl), 300,
             "the StatefulSet's new pod Ready", every_s=2)
    api = through_service(kubectl, LV)
    assert api.values("events", 0) == WRITTEN["events"], "records lost across the pod's deletion"
    assert latest_by_key(api.read_all("accounts", 0)) == WRITTEN["accounts"]
    print(kubectl("get", "pods", "-A", "-o", "wide").stdout)
    mark("pod deleted: the StatefulSet's new pod (new sandbox) has every record")


def test_11_invalid_specs_are_rejected_or_reported(kubectl: Kubectl) -> None:
    bad_schema = LOGVOLUME.replace(f"name: {LV}", "name: bad-schema").replace("partitions: 2", "partitions: 0")
    out = kubectl("apply", "-f", "-", stdin=bad_schema, check=False)
    assert out.returncode != 0 and "spec.topics[1].partitions" in out.stderr, out.stderr
    bad_both = LOGVOLUME.replace(f"name: {LV}", "name: bad-both").replace(
        "  cleanerPolicyRef: {name: fast}", "  cleanerPolicyRef: {name: fast}\n  cleaner: {log.cleaner.threads: 2}")
    out = kubectl("apply", "-f", "-", stdin=bad_both, check=False)
    assert out.returncode != 0 and "not both" in out.stderr, out.stderr
    # Past the schema: a broker key whose bound only the settings know -> Ready=False naming it.
    bad_node = LOGVOLUME.replace(f"name: {LV}", "name: bad-node").replace(
        "    log.initial.task.delay.ms: 0", "    log.initial.task.delay.ms: 0\n    log.roll.hours: 0")
    kubectl("apply", "-f", "-", stdin=bad_node)
    ready = wait_for(lambda: (c := condition(lv_json(kubectl, "bad-node"), "Ready")).get("reason") and c, 60,
                     "Ready=False on bad-node")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec", ready
    assert "spec.node.log.roll.hours" in ready["message"], ready
    events = kubectl("get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=bad-node").stdout
    assert "InvalidSpec" in events, events
    assert not kubectl.exists("statefulset", "bad-node", NAMESPACE)
    missing = LOGVOLUME.replace(f"name: {LV}", "name: no-policy").replace("{name: fast}", "{name: nowhere}")
    kubectl("apply", "-f", "-", stdin=missing)
    # the status loop may first say PodMissing (it found no pod) before the create handler's verdict
    ready = wait_for(lambda: (c := condition(lv_json(kubectl, "no-policy"), "Ready")).get("reason")
                     == "PolicyNotFound" and c, 60, "Ready=False PolicyNotFound on no-policy")
    assert ready["status"] == "False" and "nowhere" in ready["message"], ready
    kubectl("delete", "logvolume", "bad-node", "no-policy", "-n", NAMESPACE)
    mark("invalid specs rejected or reported")


def test_12_deletion_and_helm_uninstall_leave_nothing(kubectl: Kubectl, helm: Helm, node: RealNode) -> None:
    kubectl("delete", "logvolume", LV, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    for kind, name in (("statefulset", LV), ("configmap", f"{LV}-config"), ("service", LV),
                       ("secret", f"{LV}-token"), ("networkpolicy", LV), ("pvc", f"{LV}-disk-0"), ("pod", POD)):
        wait_for(lambda k=kind, n=name: not kubectl.exists(k, n, NAMESPACE), 120,
                 f"{kind}/{name} deleted with its LogVolume", every_s=2)
    wait_for(lambda: not kubectl.json("get", "compactionjobs,jobs,pods", "-n", NAMESPACE)["items"], 120,
             "CompactionJobs, Jobs and their pods deleted with their LogVolume", every_s=2)
    assert kubectl.exists("pvc", f"{LV}-disk-1", NAMESPACE), "deleteClaim: false keeps the claim"
    # the rest is the user's: the kept claim, the policy, step 8b's RBAC, the PVs this test made (Retain)
    kubectl("delete", "pvc", f"{LV}-disk-1", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    kubectl("delete", "cleanerpolicy", "fast", "-n", NAMESPACE)
    kubectl("delete", "-n", NAMESPACE, *(f"{k}/{SPARK_SA}" for k in ("serviceaccount", "role", "rolebinding")))
    kubectl("delete", "pv", "e2e-disk-0", "e2e-disk-1", "--wait=true", "--timeout=60s")
    mark("LogVolume deleted: its children, CompactionJobs, Jobs and pods went")

    helm("uninstall", "logkeeper", "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "120s")
    wait_for(lambda: not kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE)["items"], 120, "the operator pod gone",
             every_s=2)
    left = kubectl("get", "deploy,rs,sts,job,svc,cm,secret,sa,role,rolebinding,networkpolicy,pvc,lkv,lkcp,lkcj",
                   "-A", "-l", "app.kubernetes.io/instance=logkeeper", "-o", "name").stdout.split()
    left += [x for x in kubectl("get", "clusterrole,clusterrolebinding", "-o", "name").stdout.split()
             if "logkeeper" in x]
    left += kubectl("get", "pv", "-o", "name").stdout.split()
    assert not left, left
    # what every namespace has: its default ServiceAccount and the root CA's ConfigMap; and, by
    # design, the watched namespace's token key (the operator may not delete Secrets, and a
    # reinstalled operator keeps the LogVolumes' tokens with it): the user deletes it
    every = ["configmap/kube-root-ca.crt", "serviceaccount/default"]
    kinds = "all,cm,secret,sa,role,rolebinding,networkpolicy,pvc"
    objs = kubectl("get", kinds, "-n", NAMESPACE, "-o", "name").stdout.split()
    assert sorted(objs) == sorted([*every, "secret/logkeeper-operator-key"]), objs
    kubectl("delete", "secret", "logkeeper-operator-key", "-n", NAMESPACE)
    for ns in (NAMESPACE, RELEASE_NAMESPACE):
        objs = kubectl("get", kinds, "-n", ns, "-o", "name").stdout.split()
        assert sorted(objs) == every, (ns, objs)
    # and on the node: no container runs, no pod sandbox is up (kubelet's GC removes them later)
    wait_for(lambda: not node.crictl("ps", "-q").stdout.strip() and
             not node.crictl("pods", "--state", "ready", "-q").stdout.strip(), 120,
             "no container or pod sandbox running on the node")
    node.check_alive()
    mark("helm uninstall: nothing left in the API or on the node")
