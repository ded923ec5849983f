"""TLS and SASL on the Kafka listener with real clients: confluent-kafka (librdkafka) and
kafka-python over SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512;
a wrong password is refused and never logged; nothing but ApiVersions and the SASL exchange is
served before authentication. The certificate is made by the ``openssl`` command (skipped
without it), self-signed for 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from logkeeper.protocol import messages as m
from logkeeper.server.process import KAFKA_LISTENING, SidecarError, SidecarProcess
from tests.kafka_wire import WireClient, event_count

PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob:with-colon"}
PROTOCOLS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@dataclass
class Secure:
    proc: SidecarProcess
    bootstrap: dict[str, str]
    cert: Path


def make_cert(root: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: no certificate for the TLS tests")
    cert = root / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(root / "key.pem"), "-out", str(cert), "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root = tmp_path_factory.mktemp("kafka-secure")
    cert = make_cert(root)
    (root / "users").write_text("".join(f"{u}:{p}\n" for u, p in PASSWORDS.items()))
    config = {"sidecar": {"kafka.listen": ["127.0.0.1:0", "SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0",
                                           "SASL_SSL://127.0.0.1:0"],
                          "kafka.sasl.users.file": str(root / "users"),
                          "kafka.ssl.certificate.location": str(cert),
                          "kafka.ssl.key.location": str(root / "key.pem"),
                          "group.initial.rebalance.delay.ms": 0},
              "topics": {"sec": {"partitions": 1}}}
    with SidecarProcess(root, config) as proc:
        found = KAFKA_LISTENING.findall(proc.output())
        assert len(found) == 4, proc.output()
        yield Secure(proc, dict(zip(PROTOCOLS, found)), cert)


def client_conf(secure: Secure, protocol: str, mechanism: str | None, user: str = "alice",
                password: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": secure.bootstrap[protocol], "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(secure.cert)
    if mechanism is not None:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                     "sasl.password": PASSWORDS[user] if password is None else password})
    return conf


@pytest.mark.parametrize(("protocol", "mechanism"), [
    ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")])
def test_confluent_kafka_produces_and_consumes_over_each_protocol(secure: Secure, protocol: str,
                                                                  mechanism: str | None) -> None:
    conf = client_conf(secure, protocol, mechanism, user="bob" if mechanism == "PLAIN" else "alice")
    tag = f"{protocol}-{mechanism}"
    producer = ck.Producer({**conf, "acks": "all", "linger.ms": 0})
    for i in range(20):
        producer.produce("sec", key=tag.encode(), value=b"%d" % i)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**conf, "group.id": f"g-{tag}", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe(["sec"])
    mine: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(mine) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error() and msg.key() == tag.encode():
            mine.append(msg.value())
    consumer.commit(asynchronous=False)  # the group coordinator over the same protocol
    consumer.close()
    assert mine == [b"%d" % i for i in range(20)]


def test_kafka_python_scram_over_sasl_ssl(secure: Secure) -> None:
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap["SASL_SSL"], security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                             sasl_plain_password=PASSWORDS["bob"], ssl_cafile=str(secure.cert), acks="all")
    meta = producer.send("sec", key=b"kafka-python", value=b"over SASL_SSL").get(30)
    producer.close()
    assert meta.offset >= 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_wrong_password_is_refused_and_never_logged(secure: Secure, mechanism: str) -> None:
    wrong = f"wrong-{mechanism}-pw"
    failures = event_count(secure.proc, "authentication_failures")
    admin = AdminClient({**client_conf(secure, "SASL_PLAINTEXT", mechanism, password=wrong),
                         "reconnect.backoff.ms": 500})
    with pytest.raises(ck.KafkaException):
        admin.list_topics(timeout=5)
    time.sleep(0.3)
    out = secure.proc.output()
    assert "SASL authentication failed" in out
    assert event_count(secure.proc, "authentication_failures") >= failures + 1  # librdkafka may retry
    for secret in (wrong, *PASSWORDS.values()):
        assert secret not in out


def test_only_the_sasl_exchange_is_served_before_authentication(secure: Secure) -> None:
    wire = WireClient(secure.bootstrap["SASL_PLAINTEXT"], timeout_s=10)
    got = wire.call(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"] for k in got["api_keys"]}
    assert {m.SASL_HANDSHAKE, m.SASL_AUTHENTICATE} <= keys
    with pytest.raises(ConnectionError):
        wire.call(m.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    wire.close()
    wire = WireClient(secure.bootstrap["SASL_PLAINTEXT"], timeout_s=10)
    got = wire.call(m.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert got["error_code"] == 33 and set(got["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert wire.is_closed_by_server()
    wire.close()
    wire = WireClient(secure.bootstrap["SASL_PLAINTEXT"], timeout_s=10)
    wire.send_raw(struct.pack(">i", 1 << 20) + b"\x00" * 64)  # above 512 KiB before authentication
    assert wire.is_closed_by_server()
    wire.close()
    wire = WireClient(secure.bootstrap["SASL_PLAINTEXT"], timeout_s=10)  # PLAIN by hand
    assert wire.call(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    ok = wire.call(m.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00" + PASSWORDS["alice"].encode()})
    assert ok["error_code"] == 0
    meta = wire.call(m.METADATA, 9, {"topics": [{"name": "sec"}], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    assert meta["topics"][0]["error_code"] == 0
    wire.close()


def test_sasl_requests_elsewhere_answer_illegal_sasl_state_and_plaintext_cannot_reach_tls(secure: Secure) -> None:
    wire = WireClient(secure.bootstrap["PLAINTEXT"], timeout_s=10)
    assert wire.call(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 34
    wire.close()
    wire = WireClient(secure.bootstrap["SSL"], timeout_s=10)  # a plaintext request on the TLS port
    wire.send_raw(b"\x00\x00\x00\x16" + struct.pack(">hhi", m.API_VERSIONS, 0, 1) + b"\x00\x01x" + b"\x00" * 11)
    assert wire.is_closed_by_server()
    wire.close()


def test_a_sasl_listener_without_its_users_file_does_not_start(tmp_path: Path) -> None:
    config = {"sidecar": {"kafka.listen": ["SASL_PLAINTEXT://127.0.0.1:0"],
                          "kafka.sasl.users.file": str(tmp_path / "missing")}}
    proc = SidecarProcess(tmp_path / "sidecar", config)
    with pytest.raises(SidecarError, match="exited with status 1"):
        proc.start(timeout_s=60)
    assert "cannot read the SASL users file" in proc.output()


def test_ssl_client_auth_required_admits_only_clients_with_a_certificate(tmp_path: Path) -> None:
    server_cert = make_cert(tmp_path)
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    client_cert = make_cert(client_dir)  # self-signed: it is its own CA
    config = {"sidecar": {"kafka.listen": ["SSL://127.0.0.1:0"],
                          "kafka.ssl.certificate.location": str(server_cert),
                          "kafka.ssl.key.location": str(tmp_path / "key.pem"),
                          "kafka.ssl.client.auth": "required", "kafka.ssl.ca.location": str(client_cert)},
              "topics": {"mtls": {"partitions": 1}}}
    with SidecarProcess(tmp_path / "sidecar", config) as proc:
        base = {"bootstrap.servers": proc.kafka_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(server_cert)}
        with pytest.raises(ck.KafkaException):
            AdminClient({**base, "reconnect.backoff.ms": 500}).list_topics(timeout=5)
        admin = AdminClient({**base, "ssl.certificate.location": str(client_cert),
                             "ssl.key.location": str(client_dir / "key.pem")})
        assert "mtls" in admin.list_topics(timeout=30).topics


def _swap_secret(mount: Path, cert: Path, key: Path, version: int) -> None:
    """Put a certificate and key into ``mount`` as the kubelet updates a Secret volume (its
    AtomicWriter): the files in a new timestamped directory, ``..data`` renamed to point at it,
    each name a link through ``..data``."""
    stamped = mount / f"..2026_11_27_{version:02d}"
    stamped.mkdir()
    shutil.copy(cert, stamped / "tls.crt")
    shutil.copy(key, stamped / "tls.key")
    (mount / "..data_tmp").symlink_to(stamped.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")


def _served(bootstrap: str, ca: Path) -> bytes:
    """The certificate a new TLS handshake gets, verified against ``ca``
    (ssl.SSLCertVerificationError when it is another)."""
    host, port = bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as sock, \
            ctx.wrap_socket(sock, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    """cert-manager renews the certificate and the kubelet swaps the mounted Secret's files: new
    handshakes get the new certificate, a connection made before keeps working, and a renewal
    whose files do not load (a certificate without its key) keeps the last good one, logged."""
    made = {}
    for name in ("old", "new", "bad"):
        (tmp_path / name).mkdir()
        made[name] = make_cert(tmp_path / name)
    mount = tmp_path / "secret"
    mount.mkdir()
    _swap_secret(mount, made["old"], tmp_path / "old" / "key.pem", 1)
    config = {"sidecar": {"kafka.listen": ["SSL://127.0.0.1:0"],
                          "kafka.ssl.certificate.location": str(mount / "tls.crt"),
                          "kafka.ssl.key.location": str(mount / "tls.key")},
              "topics": {"renew": {"partitions": 1}}}
    with SidecarProcess(tmp_path / "sidecar", config) as proc:
        bootstrap = proc.kafka_bootstrap
        assert _served(bootstrap, made["old"]) == ssl.PEM_cert_to_DER_cert(made["old"].read_text())
        producer = ck.Producer({"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                                "ssl.ca.location": str(made["old"])})
        producer.produce("renew", b"before")
        assert producer.flush(30) == 0

        _swap_secret(mount, made["new"], tmp_path / "new" / "key.pem", 2)
        assert _served(bootstrap, made["new"]) == ssl.PEM_cert_to_DER_cert(made["new"].read_text())
        with pytest.raises(ssl.SSLCertVerificationError):
            _served(bootstrap, made["old"])
        producer.produce("renew", b"after")  # over the connection made before the renewal
        assert producer.flush(30) == 0

        _swap_secret(mount, made["bad"], tmp_path / "new" / "key.pem", 3)  # the key is not the certificate's
        for _ in range(3):
            assert _served(bootstrap, made["new"]) == ssl.PEM_cert_to_DER_cert(made["new"].read_text())
        assert proc.output().count("the changed TLS files do not load") == 1, proc.output()
        assert "loaded again" in proc.output()
