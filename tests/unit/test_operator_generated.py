"""Settings defined once: the CRDs, the chart's copy of them, values.yaml and values.schema.json
agree with the settings' definitions (written by make crds and make chart, never by hand)."""

from __future__ import annotations

from pathlib import Path

import yaml

from logkeeper.cleaner.config import CLEANER_SETTINGS
from logkeeper.log.log_config import TOPIC_SETTINGS
from logkeeper.log.manager_config import BROKER_LOG_DEFAULT_SETTINGS, MANAGER_SETTINGS
from logkeeper.server.config import SIDECAR_SETTINGS
from logkeeper_operator import chartgen, crdgen
from logkeeper_operator.config import OPERATOR_SETTINGS, env_name, load
from logkeeper_operator.spec import SIDECAR_RESERVED

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "logkeeper"


def _lv_spec() -> dict:  # type: ignore[type-arg]
    doc = yaml.safe_load((REPO / "crds" / "logvolumes.logkeeper.io.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_crds_are_current_and_the_chart_has_the_same() -> None:
    assert crdgen.main(["--check", str(REPO / "crds"), str(CHART / "crds")]) == 0
    assert chartgen.main(["--check", str(CHART)]) == 0


def test_every_setting_is_in_the_schema() -> None:
    spec = _lv_spec()
    topic = spec["topics"]["items"]["properties"]["configs"]["properties"]
    assert set(topic) == {s.key for s in TOPIC_SETTINGS.settings}
    node = set(spec["node"]["properties"])
    assert node == {s.key for s in (*MANAGER_SETTINGS.settings, *BROKER_LOG_DEFAULT_SETTINGS.settings)} - {"log.dirs"}
    assert set(spec["cleaner"]["properties"]) == {s.key for s in CLEANER_SETTINGS.settings}
    sidecar = set(spec["sidecar"]["properties"]["settings"]["properties"])
    # listen and token.file, and the Kafka listener's files (from spec.sidecar.kafkaSecurity), are the operator's
    assert sidecar == {s.key for s in SIDECAR_SETTINGS.settings} - SIDECAR_RESERVED
    reserved = {"listen", "token.file", "kafka.sasl.users.file", "kafka.ssl.certificate.location",
                "kafka.ssl.key.location", "kafka.ssl.key.password.file", "kafka.ssl.ca.location",
                "kafka.ssl.client.auth"}
    assert reserved == SIDECAR_RESERVED
    assert topic["segment.bytes"]["minimum"] == 14 and topic["segment.bytes"]["maximum"] == 2**31 - 1
    assert topic["cleanup.policy"]["items"]["enum"] == ["delete", "compact"]
    assert topic["min.cleanable.dirty.ratio"] == {**topic["min.cleanable.dirty.ratio"], "minimum": 0.0,
                                                  "maximum": 1.0, "type": "number"}
    assert "default" not in topic["segment.bytes"]  # Kafka keys: absent means the broker's default


def test_values_yaml_agrees_with_the_operator_settings() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["operator"]["settings"] == {s.key: s.default for s in OPERATOR_SETTINGS.settings}
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'printf "LOGKEEPER_OPERATOR_%s"' in deployment
    assert env_name("status.interval.seconds") == "LOGKEEPER_OPERATOR_STATUS_INTERVAL_SECONDS"
    assert load({"LOGKEEPER_OPERATOR_STATUS_INTERVAL_SECONDS": "2"})["status.interval.seconds"] == 2.0


def test_printer_columns_and_short_names() -> None:
    docs = crdgen.all_crds()
    lv = docs["logvolumes.logkeeper.io.yaml"]["spec"]
    assert lv["names"]["shortNames"] == ["lkv"]
    cols = [c["name"] for c in lv["versions"][0]["additionalPrinterColumns"]]
    assert cols[:5] == ["Ready", "Cleaning", "Partitions", "Max-Dirty", "Backlogs"]
    cj = docs["compactionjobs.logkeeper.io.yaml"]["spec"]["versions"][0]
    assert cj["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"] == [
        "Pending", "Running", "Succeeded", "Failed"]
    for doc in docs.values():
        assert doc["spec"]["versions"][0]["subresources"] == {"status": {}}


# kubectl's built-in short names and resource names (kubectl api-resources of Kubernetes 1.36): a
# short name of ours among them would be shadowed (kubectl get cj lists CronJobs) or shadow one.
BUILTIN = {
    "cm", "cs", "csr", "cj", "crd", "crds", "ds", "deploy", "ep", "ev", "hpa", "ing", "limits", "netpol", "no", "ns",
    "pc", "pdb", "po", "psp", "pv", "pvc", "quota", "rc", "rs", "sa", "sc", "sts", "svc", "ingclass", "vac",
    "pods", "pod", "jobs", "job", "cronjobs", "cronjob", "services", "service", "nodes", "node", "events", "event",
    "leases", "lease", "secrets", "secret", "configmaps", "configmap", "endpoints", "endpointslices",
    "statefulsets", "deployments", "daemonsets", "replicasets", "namespaces", "roles", "rolebindings",
    "clusterroles", "clusterrolebindings", "networkpolicies", "storageclasses", "volumeattachments",
    "persistentvolumes", "persistentvolumeclaims", "serviceaccounts", "priorityclasses", "runtimeclasses",
    "podtemplates", "resourcequotas", "limitranges", "bindings", "componentstatuses", "all",
}


def test_short_names_collide_with_nothing_built_in() -> None:
    names = [n for doc in crdgen.all_crds().values() for n in doc["spec"]["names"]["shortNames"]]
    assert names and not set(names) & BUILTIN
    assert len(names) == len(set(names))
    readme = (REPO / "README.md").read_text()
    for stale in ("kubectl get cj", "(short name: lv)", "kubectl get lv "):
        assert stale not in readme
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "short name: lv)" not in notes


def _rules(node: object, path: str = "") -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    out: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations") or []:
            out.append((path, r | {"_node": node}))
        for k, v in node.items():
            out += _rules(v, f"{path}.{k}")
    elif isinstance(node, list):
        for v in node:
            out += _rules(v, path)
    return out


def test_cel_rules_name_their_field_and_reason() -> None:
    rules = [(name, path, r) for name, doc in crdgen.all_crds().items()
             for path, r in _rules(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])]
    assert len(rules) >= 16
    for name, path, r in rules:
        assert r["message"] and r["reason"] in ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"), r
        field = r.get("fieldPath")
        if field and not field.startswith(".metadata"):
            props = r["_node"].get("properties") or {}
            first = field.lstrip(".").split(".")[0]
            assert first in props, f"{name} {path}: fieldPath {field} names no property"
    texts = {r["rule"]: r for _, _, r in rules}
    shrink = texts["self.partitions >= oldSelf.partitions"]
    assert shrink["fieldPath"] == ".partitions" and "shrink" in shrink["message"]
    assert any("c.name != 'sidecar'" in t for t in texts)
    assert any("self.metadata.name" in t for t in texts)
    assert "self.args[0] == 'spark-compact'" in texts


def test_compactionjob_status_is_rfc3339_with_conditions() -> None:
    cj = crdgen.all_crds()["compactionjobs.logkeeper.io.yaml"]["spec"]["versions"][0]
    status = cj["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for key in ("startTime", "completionTime", "attemptStartTime"):
        assert status[key] == {**status[key], "type": "string", "format": "date-time"}
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    lv = crdgen.all_crds()["logvolumes.logkeeper.io.yaml"]["spec"]["versions"][0]
    assert lv["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["lastSeenTime"]["format"] == \
        "date-time"
