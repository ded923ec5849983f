"""spec.sidecar.kafkaSecurity: the Kafka listener's SASL users and TLS material come from Secrets
the kubelet mounts into the sidecar container (the operator names them, never reads them), the
rendered config points the sidecar at them, and a Secret without its listener (or a listener
without its Secret) is refused naming the field, by the operator and by the CRD's rules."""

from __future__ import annotations

import base64
import copy
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from logkeeper.protocol.sasl import UsersFile
from logkeeper.protocol.tls import tls_context
from logkeeper.server.config import config_from_document
from logkeeper_operator import builders, reconcile, schemas
from logkeeper_operator.names import KAFKA_SECRETS_DIR, KEY_SECRET
from logkeeper_operator.render import config_document, render_config, restart_hash
from logkeeper_operator.spec import SpecError, parse_logvolume

SASL_SSL = "SASL_SSL://[$(POD_IP)]:9093"
REPO = Path(__file__).resolve().parents[2]


def spec(sidecar: dict[str, Any]) -> dict[str, Any]:
    return {"volumes": [{"id": "a", "size": "1Gi"}], "sidecar": sidecar}


def secure(**security: Any) -> dict[str, Any]:
    """A SASL_SSL listener on the pod's IP and PLAINTEXT on loopback, with the given Secrets."""
    return spec({"port": 9000,
                 "settings": {"kafka.listen": [SASL_SSL, "127.0.0.1:9092"],
                              "kafka.sasl.enabled.mechanisms": ["SCRAM-SHA-512"]},
                 "kafkaSecurity": {"usersSecret": "kafka-users", "tlsSecret": "kafka-tls", **security}})


def sidecar_of(ss: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in ss["spec"]["template"]["spec"]["containers"] if c["name"] == "sidecar"]
    return c  # type: ignore[no-any-return]


def statefulset(s: dict[str, Any]) -> dict[str, Any]:
    return builders.statefulset("orders", "ns", {}, parse_logvolume(s), "h")


def test_the_secrets_are_mounted_read_only_in_the_sidecar_only() -> None:
    ss = statefulset(secure(clientAuth="required"))
    pod = ss["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["kafka-users"] == {"name": "kafka-users", "secret": {"secretName": "kafka-users",
                                                                        "defaultMode": 0o440}}
    assert volumes["kafka-tls"] == {"name": "kafka-tls", "secret": {"secretName": "kafka-tls", "defaultMode": 0o440}}
    # 0440: readable by the sidecar through the pod's fsGroup (it runs as uid and gid 10001)
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"] == builders.RUN_AS
    mounts = {m["name"]: m for m in sidecar_of(ss)["volumeMounts"]}
    assert mounts["kafka-users"] == {"name": "kafka-users", "mountPath": "/etc/logkeeper-kafka/users",
                                     "readOnly": True}
    assert mounts["kafka-tls"] == {"name": "kafka-tls", "mountPath": "/etc/logkeeper-kafka/tls", "readOnly": True}
    assert not any("subPath" in m for m in mounts.values())  # a changed Secret reaches the mounted files
    # not nested in another mount (the read-only ConfigMap at /etc/logkeeper)
    paths = [m["mountPath"] for m in mounts.values()]
    for p in paths:
        assert not any(p != q and p.startswith(q + "/") for q in paths), p


def test_app_containers_do_not_get_the_secrets() -> None:
    s = secure()
    s["containers"] = [{"name": "app", "image": "app:1"}]
    ss = statefulset(s)
    (app,) = [c for c in ss["spec"]["template"]["spec"]["containers"] if c["name"] == "app"]
    assert {m["name"] for m in app["volumeMounts"]} == {"token"}


def test_no_security_no_volumes() -> None:
    ss = statefulset(spec({"settings": {"kafka.listen": ["127.0.0.1:9092"]}}))
    names = {v["name"] for v in ss["spec"]["template"]["spec"]["volumes"]}
    assert not names & {"kafka-users", "kafka-tls"}
    env = {e["name"] for e in sidecar_of(ss)["env"]}
    assert "LOGKEEPER_KAFKA_LISTEN" not in env  # no $(POD_IP): the file's kafka.listen is enough
    doc = config_document(parse_logvolume(spec({"settings": {"kafka.listen": ["127.0.0.1:9092"]}})), {})
    assert not [k for k in doc["sidecar"] if k.startswith(("kafka.ssl.", "kafka.sasl.users"))]


def test_the_pod_ip_reaches_the_listener_through_the_environment() -> None:
    s = secure()
    s["sidecar"]["settings"]["kafka.advertised.listeners"] = ["orders-0.orders.ns.svc:9093", "127.0.0.1:9092"]
    env = sidecar_of(statefulset(s))["env"]
    names = [e["name"] for e in env]
    by_name = {e["name"]: e for e in env}
    # Kubernetes expands $(POD_IP) only from variables defined before
    assert names.index("POD_IP") < names.index("LOGKEEPER_KAFKA_LISTEN")
    assert by_name["LOGKEEPER_KAFKA_LISTEN"]["value"] == f"{SASL_SSL},127.0.0.1:9092"
    assert "LOGKEEPER_KAFKA_ADVERTISED_LISTENERS" not in by_name  # no $(POD_IP) in them: the file has them
    s["sidecar"]["settings"]["kafka.advertised.listeners"] = ["[$(POD_IP)]:9093", "127.0.0.1:9092"]
    by_name = {e["name"]: e for e in sidecar_of(statefulset(s))["env"]}
    assert by_name["LOGKEEPER_KAFKA_ADVERTISED_LISTENERS"]["value"] == "[$(POD_IP)]:9093,127.0.0.1:9092"


def test_the_network_policy_guards_the_kafka_ports() -> None:
    np = builders.network_policy("orders", "ns", {}, parse_logvolume(secure()), "logkeeper-system")
    assert [p["port"] for p in np["spec"]["ingress"][0]["ports"]] == [9000, 9092, 9093]


def test_rendered_config_points_at_the_mounted_files() -> None:
    doc = yaml.safe_load(render_config(parse_logvolume(secure(clientAuth="requested", keyPasswordKey="pw")), {}))
    sidecar = doc["sidecar"]
    assert sidecar["kafka.sasl.users.file"] == "/etc/logkeeper-kafka/users/users"
    assert sidecar["kafka.ssl.certificate.location"] == "/etc/logkeeper-kafka/tls/tls.crt"
    assert sidecar["kafka.ssl.key.location"] == "/etc/logkeeper-kafka/tls/tls.key"
    assert sidecar["kafka.ssl.key.password.file"] == "/etc/logkeeper-kafka/tls/pw"
    assert sidecar["kafka.ssl.ca.location"] == "/etc/logkeeper-kafka/tls/ca.crt"
    assert sidecar["kafka.ssl.client.auth"] == "requested"
    assert sidecar["kafka.listen"] == [SASL_SSL, "127.0.0.1:9092"]
    plain = config_document(parse_logvolume(secure(usersKey="list")), {})["sidecar"]
    assert plain["kafka.sasl.users.file"] == "/etc/logkeeper-kafka/users/list"
    # no client certificates: no CA needed (a tls Secret without ca.crt works)
    assert "kafka.ssl.ca.location" not in plain and "kafka.ssl.client.auth" not in plain
    assert "kafka.ssl.key.password.file" not in plain


def test_changing_the_secrets_rolls_the_pod() -> None:
    base = restart_hash(parse_logvolume(secure()), {})
    assert restart_hash(parse_logvolume(secure(clientAuth="required")), {}) != base
    assert restart_hash(parse_logvolume(secure(usersKey="other")), {}) != base


@pytest.mark.parametrize(("sidecar", "field", "why"), [
    ({"settings": {"kafka.listen": ["SSL://[$(POD_IP)]:9093"]}}, "spec.sidecar.kafkaSecurity.tlsSecret",
     "needs a kubernetes.io/tls Secret"),
    ({"settings": {"kafka.listen": ["sasl_ssl://[$(POD_IP)]:9093"]}, "kafkaSecurity": {"tlsSecret": "t"}},
     "spec.sidecar.kafkaSecurity.usersSecret", "needs a Secret of name:password lines"),
    ({"settings": {"kafka.listen": ["SASL_PLAINTEXT://[$(POD_IP)]:9093"]}},
     "spec.sidecar.kafkaSecurity.usersSecret", "SASL_PLAINTEXT or SASL_SSL listener"),
    ({"settings": {"kafka.listen": ["127.0.0.1:9092"]}, "kafkaSecurity": {"tlsSecret": "t"}},
     "spec.sidecar.kafkaSecurity.tlsSecret", "no SSL or SASL_SSL listener"),
    ({"kafkaSecurity": {"tlsSecret": "t"}}, "spec.sidecar.kafkaSecurity.tlsSecret", "no SSL or SASL_SSL listener"),
    ({"settings": {"kafka.listen": ["SSL://[$(POD_IP)]:9093"]}, "kafkaSecurity": {"tlsSecret": "t",
                                                                                   "usersSecret": "u"}},
     "spec.sidecar.kafkaSecurity.usersSecret", "no SASL_PLAINTEXT or SASL_SSL listener"),
    ({"settings": {"kafka.listen": ["SASL_PLAINTEXT://[$(POD_IP)]:9093"]},
      "kafkaSecurity": {"usersSecret": "u", "clientAuth": "required"}},
     "spec.sidecar.kafkaSecurity.clientAuth", "needs tlsSecret"),
    ({"settings": {"kafka.listen": ["SSL://[$(POD_IP)]:9093"]},
      "kafkaSecurity": {"tlsSecret": "t", "clientAuth": "sometimes"}},
     "spec.sidecar.kafkaSecurity.clientAuth", "must be one of none, requested, required"),
    ({"settings": {"kafka.listen": ["SASL_PLAINTEXT://[$(POD_IP)]:9093"]},
      "kafkaSecurity": {"usersSecret": "u", "keyPasswordKey": "pw"}},
     "spec.sidecar.kafkaSecurity.keyPasswordKey", "needs tlsSecret"),
    ({"kafkaSecurity": {"usersKey": "k"}}, "spec.sidecar.kafkaSecurity.usersKey", "needs usersSecret"),
    ({"settings": {"kafka.listen": ["SSL://[$(POD_IP)]:9093"]}, "kafkaSecurity": {"tlsSecret": "Kafka_TLS"}},
     "spec.sidecar.kafkaSecurity.tlsSecret", "a Secret's name"),
    ({"settings": {"kafka.listen": ["SASL_SSL://[$(POD_IP)]:9093"]},
      "kafkaSecurity": {"tlsSecret": "t", "usersSecret": "u", "usersKey": "a/b"}},
     "spec.sidecar.kafkaSecurity.usersKey", "a key of a Secret's data"),
    ({"settings": {"kafka.ssl.certificate.location": "/data/a/cert.pem"}},
     "spec.sidecar.settings.kafka.ssl.certificate.location", "set by the operator from spec.sidecar.kafkaSecurity"),
    ({"settings": {"kafka.sasl.users.file": "/tmp/users"}}, "spec.sidecar.settings.kafka.sasl.users.file",
     "set by the operator"),
    ({"settings": {"kafka.ssl.client.auth": "required"}}, "spec.sidecar.settings.kafka.ssl.client.auth",
     "set by the operator"),
    ({"settings": {"kafka.listen": ["SSL://[$(HOSTNAME)]:9093"]}, "kafkaSecurity": {"tlsSecret": "t"}},
     "spec.sidecar.settings.kafka.listen[0]", "only $(POD_IP)"),
    ({"settings": {"kafka.listen": ["[$(POD_IP)]:9092"]}}, "spec.sidecar.settings.kafka.listen",
     "name its security protocol"),
    ({"settings": {"kafka.listen": [f"127.0.0.1:{9000 + i}" for i in range(17)]}},
     "spec.sidecar.settings.kafka.listen", "at most 16 addresses"),
])
def test_invalid_combinations_are_refused_naming_the_field(sidecar: dict[str, Any], field: str, why: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_logvolume(spec(sidecar))
    assert e.value.field == field
    assert why in e.value.message


class Kube:
    """The API as the operator's RBAC sees it: the only Secret it may read is the token key."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def apply(self, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        self.objects[obj["kind"], obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj

    def create_if_absent(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        key = obj["kind"], obj["metadata"]["name"]
        if key in self.objects:
            return self.objects[key], False
        stored = copy.deepcopy(obj)
        if "stringData" in stored:
            stored["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in stored.pop("stringData").items()}
        self.objects[key] = stored
        return stored, True

    def create(self, obj: dict[str, Any]) -> bool:  # a POST: an existing object is a 409, not read
        return (obj["kind"], obj["metadata"]["name"]) not in self.objects and self.create_if_absent(obj)[1]

    def get(self, api_version: str, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        assert kind != "Secret" or name == KEY_SECRET, f"the operator read Secret {name}"
        return self.objects.get((kind, name))

    def list(self, api_version: str, kind: str, ns: str | None, label_selector: str | None = None) -> list[Any]:
        return [o for (k, _), o in self.objects.items() if k == kind]


def body(s: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "logkeeper.io/v1alpha1", "kind": "LogVolume", "spec": s,
            "metadata": {"name": "orders", "namespace": "ns", "uid": "u1", "generation": 1}}


def test_the_operator_references_the_secrets_without_reading_them() -> None:
    kube = Kube()
    reconcile.apply_logvolume(kube, body(secure(clientAuth="required")))  # type: ignore[arg-type]
    assert ("Secret", "kafka-users") not in kube.objects and ("Secret", "kafka-tls") not in kube.objects
    config = yaml.safe_load(kube.objects["ConfigMap", "orders-config"]["data"]["config.yaml"])
    assert config["sidecar"]["kafka.ssl.client.auth"] == "required"
    volumes = kube.objects["StatefulSet", "orders"]["spec"]["template"]["spec"]["volumes"]
    assert {"kafka-users", "kafka-tls"} <= {v["name"] for v in volumes}


def test_an_invalid_combination_is_an_invalid_spec() -> None:
    with pytest.raises(SpecError, match=r"^spec\.sidecar\.kafkaSecurity\.tlsSecret: "):
        reconcile.apply_logvolume(Kube(), body(spec({"kafkaSecurity": {"tlsSecret": "t"}})))  # type: ignore[arg-type]
    status, _events = reconcile.failure_status(body(spec({})), "spec.sidecar.kafkaSecurity.tlsSecret: no ...",
                                               "InvalidSpec", reconcile.now_iso())
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith("spec.sidecar.kafkaSecurity.tlsSecret")


def test_the_crd_has_the_schema_and_the_rules() -> None:
    doc = yaml.safe_load((REPO / "crds" / "logvolumes.logkeeper.io.yaml").read_text())
    sidecar = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["sidecar"]
    assert sidecar == schemas.logvolume_spec()["properties"]["sidecar"]
    ks = sidecar["properties"]["kafkaSecurity"]
    assert set(ks["properties"]) == {"usersSecret", "usersKey", "tlsSecret", "keyPasswordKey", "clientAuth"}
    assert ks["properties"]["clientAuth"]["enum"] == ["none", "requested", "required"]
    assert "default" not in ks["properties"]["usersKey"]  # a default would trip "usersKey needs usersSecret"
    rules = [r["rule"] for r in sidecar["x-kubernetes-validations"]]
    assert len(rules) == 4 and all("kafka__dot__listen" in r for r in rules)
    assert {r["message"] for r in ks["x-kubernetes-validations"]} >= {"usersKey needs usersSecret"}
    listen = sidecar["properties"]["settings"]["properties"]["kafka.listen"]
    assert listen["maxItems"] == 16 and listen["items"]["maxLength"] == 300  # the rules' cost is bounded
    settings = sidecar["properties"]["settings"]["properties"]
    assert "kafka.sasl.enabled.mechanisms" in settings and "kafka.ssl.ca.location" not in settings


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def test_a_sidecar_loads_the_rendered_config_with_the_secrets_mounted(tmp_path: Path) -> None:
    """The rendered keys name files the sidecar's own loaders accept: the document is loaded
    with the mount directory moved under tmp_path and the pod's environment expanded."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: no certificate to mount")
    users, tls = tmp_path / "users", tmp_path / "tls"
    users.mkdir()
    tls.mkdir()
    (users / "users").write_text("alice:secret-1\nbob:secret-2\n")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=orders-0.orders.ns.svc", "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.crt"))
    shutil.copy(tls / "tls.crt", tls / "ca.crt")  # self-signed: its own CA, for client certificates
    lv = parse_logvolume(secure(clientAuth="required"))
    text = render_config(lv, {}).replace(KAFKA_SECRETS_DIR, str(tmp_path))
    doc = yaml.safe_load(text)
    doc["node"]["log.dirs"] = [str(tmp_path / "log")]
    doc["sidecar"]["token.file"] = str(tmp_path / "token")
    env = {e["name"]: e["value"] for e in sidecar_of(builders.statefulset("orders", "ns", {}, lv, "h"))["env"]
           if e["name"].startswith("LOGKEEPER_KAFKA")}
    env = {k: v.replace("$(POD_IP)", "10.1.2.3") for k, v in env.items()}  # as the kubelet does
    cfg = config_from_document(doc, "rendered", env).sidecar
    assert cfg.kafka_listeners == [("SASL_SSL", "10.1.2.3", 9093), ("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.kafka_sasl_enabled_mechanisms == ["SCRAM-SHA-512"]
    assert UsersFile(cfg.kafka_sasl_users_file).ensure_usable() == 2
    ctx = tls_context(cfg)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.minimum_version == ssl.TLSVersion.TLSv1_2
