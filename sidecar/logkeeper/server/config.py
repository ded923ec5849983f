"""The sidecar's configuration file (YAML, rendered by the operator into a ConfigMap) and its
environment overrides.

File format: a mapping with four sections, each optional except ``sidecar.token.file`` and
``node.log.dirs`` (which may come from the environment instead)::

    sidecar:                      # the sidecar's own keys (SIDECAR_SETTINGS below)
      listen: ["127.0.0.1:8080"]  # host:port, IPv6 as [::1]:8080; port 0 = any free port
      token.file: /var/run/secrets/logkeeper/token
    node:                         # Kafka broker keys of the LogManager (log/manager_config.py):
      log.dirs: [/data/disk-0, /data/disk-1]   # MANAGER_SETTINGS and the broker defaults of
      log.retention.check.interval.ms: 300000  # topic keys (log.segment.bytes, log.retention.ms...)
      num.recovery.threads.per.data.dir: 1
    cleaner:                      # log.cleaner.* keys (cleaner/config.py)
      log.cleaner.threads: 1
    topics:                       # topic name -> partitions and topic-level configs
      accounts:
        partitions: 3
        configs: {cleanup.policy: compact, segment.bytes: 104857600}

Keys are Kafka's dotted names, written flat (``log.dirs``, not nested ``log: {dirs: ...}``); a
value may be its type or a string; lists may be YAML lists or comma-separated strings. Every key
is defined once, in its SettingGroup; an unknown key, section or topic field is an error naming
the key, its section and the file.

Environment overrides (applied over the file; the variable wins): every key of the ``sidecar``,
``node`` and ``cleaner`` sections has one, ``LOGKEEPER_`` + the key upper-cased with ``.`` and
``-`` as ``_``::

    LOGKEEPER_LOG_DIRS=/data/disk-0,/data/disk-1   -> node      log.dirs
    LOGKEEPER_LISTEN=0.0.0.0:8080                  -> sidecar   listen
    LOGKEEPER_TOKEN_FILE=/var/run/secrets/token    -> sidecar   token.file
    LOGKEEPER_LOG_CLEANER_THREADS=2                -> cleaner   log.cleaner.threads
    LOGKEEPER_LOG_RETENTION_CHECK_INTERVAL_MS=1000 -> node      log.retention.check.interval.ms

Topics come from the file only. Other ``LOGKEEPER_*`` variables are ignored with a warning
(tools of the project use a few, e.g. LOGKEEPER_CRASH_ITERATIONS).

Declared topics: at start the sidecar creates their missing partitions and gives them the file's
configs, over what the API set at run time (the file is the operator's desired state); topics
created through the API keep their configs in the log directories (topic_store.py).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..cleaner.config import CLEANER_SETTINGS, CleanerConfig
from ..errors import InvalidConfigError
from ..log import names

# at home in log/log_config.py; named here too for the operator's spec.py and render.py (the lead's to move)
from ..log.log_config import validate_topic_configs as validate_topic_configs
from ..log.manager_config import BROKER_LOG_DEFAULT_SETTINGS, MANAGER_SETTINGS, ManagerConfig
from ..settings import Setting, SettingGroup, at_least, one_of, subset_of

log = logging.getLogger(__name__)

ENV_PREFIX = "LOGKEEPER_"
MIB = 1024 * 1024
MAX_PARTITIONS_PER_TOPIC = 1024  # a bound on what one request may create


def _listen_ok(value: list[str]) -> str | None:
    if not value:
        return "must name at least one host:port address"
    return _addresses_ok(value)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _first_unparsable(value: list[str], parse: Callable[[str], object]) -> str | None:
    """Why the first item of a list setting that ``parse`` rejects (ValueError) is wrong, or None."""
    for item in value:
        try:
            parse(item)
        except ValueError as e:
            return str(e)
    return None


def _kafka_listen_ok(value: list[str]) -> str | None:
    return _first_unparsable(value, parse_kafka_listener)


def _addresses_ok(value: list[str]) -> str | None:
    return _first_unparsable(value, parse_listen_address)


SIDECAR_SETTINGS = SettingGroup("sidecar", (
    Setting("listen", list, ["127.0.0.1:8080"],
            "Addresses (host:port; [v6]:port) the HTTP API listens on; port 0 takes any free port.", _listen_ok),
    Setting("token.file", str, "",
            "File holding the bearer token that writes and (by default) reads need (re-read when it changes).",
            None),
    # Secure by default: reading records, topics, status and metrics needs the token too. Only
    # the probes' paths (/healthz, /readyz) and /openapi.json answer without it (middleware.py).
    Setting("http.read.auth", str, "token",
            "Who may read over HTTP (GET: records, topics, status): token = only requests with the bearer "
            "token; none = anyone who reaches the port (open on purpose).", one_of("token", "none")),
    Setting("http.metrics.auth", str, "token",
            "Who may read /metrics: token, or none for a Prometheus that scrapes without the token.",
            one_of("token", "none")),
    Setting("http.max.connections", int, 256,
            "Most HTTP connections open at once on each listen address; more are answered 503 and closed "
            "(Kafka's max.connections).",
            at_least(1)),
    Setting("http.connections.max.idle.ms", int, 60000,
            "An HTTP connection with no request in progress (or still sending its headers) is closed after this "
            "long (Kafka's connections.max.idle.ms).", at_least(100), "ms"),
    Setting("http.body.timeout.ms", int, 30000,
            "Bound on reading one request body; a slower body is answered 408 and its connection closed.",
            at_least(100), "ms"),
    Setting("http.queued.max.request.bytes", int, 64 * MIB,
            "Bytes of HTTP request bodies held at once over all connections; a body waits (within "
            "http.body.timeout.ms) until its declared length fits (Kafka's queued.max.request.bytes).",
            at_least(1024), "bytes"),
    Setting("max.request.bytes", int, 4 * MIB, "Largest request body accepted (413 beyond).", at_least(1024),
            "bytes"),
    Setting("fetch.max.bytes", int, 50 * MIB, "Largest max_bytes a fetch may ask for (Kafka's fetch.max.bytes).",
            at_least(1), "bytes"),
    Setting("io.threads", int, 8, "Threads that run storage calls off the event loop.", at_least(1)),
    Setting("shutdown.timeout.ms", int, 25000,
            "Bound on a clean shutdown (SIGTERM): past it the process exits without the clean-shutdown marker.",
            at_least(1000), "ms"),
    # the Kafka listener (logkeeper/protocol/); README "Kafka listener"
    Setting("kafka.listen", list, [],
            "Addresses of the Kafka protocol listener, [PROTOCOL://]host:port with PROTOCOL one of PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL; empty = off. Without a protocol the address must be loopback (PLAINTEXT); "
            "PLAINTEXT elsewhere must be written out.", _kafka_listen_ok),
    Setting("kafka.advertised.listeners", list, [],
            "host:port that Metadata and FindCoordinator give clients, one per kafka.listen address; empty = "
            "the address each client connected to.", _addresses_ok),
    Setting("kafka.node.id", int, 0, "The node id the listener gives itself in Metadata.", at_least(0)),
    Setting("kafka.socket.request.max.bytes", int, 100 * MIB,
            "Largest Kafka request frame accepted; a larger one closes the connection before it is read (Kafka's "
            "socket.request.max.bytes).", at_least(1024), "bytes"),
    Setting("kafka.queued.max.request.bytes", int, 100 * MIB,
            "Bytes of request frames held at once over all connections; a connection waits (is not read) until "
            "its frame fits (Kafka's queued.max.request.bytes, bounded here). At least "
            "kafka.socket.request.max.bytes.", at_least(1024), "bytes"),
    Setting("kafka.queued.max.response.bytes", int, 100 * MIB,
            "Bytes of TLS fetch answers' records held at once over all connections, from their read until "
            "the answer is written to the socket; a fetch takes what is free, up to what it may answer, and "
            "waits for 1 MiB when less is free. Plaintext answers are sent from the page cache (sendfile, as "
            "Kafka sends them) and hold none of it.", at_least(MIB), "bytes"),
    Setting("kafka.max.connections", int, 128,
            "Kafka connections open at once; one more is closed as soon as it is accepted (Kafka's "
            "max.connections; bounded here: a sidecar serves its own pod).", at_least(1)),
    Setting("kafka.connections.max.idle.ms", int, 600000,
            "A connection without a complete request or a response for this long is closed (Kafka's "
            "connections.max.idle.ms); a request in flight is never idle.", at_least(1), "ms"),
    Setting("kafka.sasl.enabled.mechanisms", list, ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"],
            "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners.", subset_of(*SASL_MECHANISMS)),
    Setting("kafka.sasl.users.file", str, "",
            "File of SASL users, one name:password a line (a mounted Secret; re-read when it changes; never "
            "logged). Needed by SASL_PLAINTEXT and SASL_SSL listeners.", None),
    Setting("kafka.ssl.certificate.location", str, "",
            "PEM file with the certificate chain of SSL and SASL_SSL listeners (loaded again for new "
            "connections when it or the key changes: a renewed certificate needs no restart).", None),
    Setting("kafka.ssl.key.location", str, "",
            "PEM file with the private key of that certificate (may be the certificate's file).", None),
    Setting("kafka.ssl.key.password.file", str, "", "File holding the private key's password, if it has one.",
            None),
    Setting("kafka.ssl.ca.location", str, "",
            "PEM file of the CAs that sign client certificates (for kafka.ssl.client.auth).", None),
    Setting("kafka.ssl.client.auth", str, "none",
            "Client certificates: none, requested or required (Kafka's ssl.client.auth).",
            one_of("none", "requested", "required")),
    Setting("offsets.topic.num.partitions", int, 1,
            "Partitions of __consumer_offsets when the listener creates it (Kafka: 50, to spread groups over "
            "brokers; one node needs one).", at_least(1)),
    Setting("group.initial.rebalance.delay.ms", int, 3000,
            "How long a new group waits for more members before its first rebalance.", at_least(0), "ms"),
    Setting("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.",
            at_least(1), "ms"),
    Setting("group.max.session.timeout.ms", int, 1800000, "Largest session timeout a member may ask for.",
            at_least(1), "ms"),
))

SECTIONS = ("sidecar", "node", "cleaner", "topics")
TOPIC_FIELDS = ("partitions", "configs")
_NODE_KEYS = {**MANAGER_SETTINGS.by_key, **BROKER_LOG_DEFAULT_SETTINGS.by_key}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def env_overrides_map() -> dict[str, tuple[str, str]]:
    """Environment variable -> (section, key), for every key of the sidecar, node and cleaner sections."""
    out: dict[str, tuple[str, str]] = {}
    for section, keys in (("sidecar", SIDECAR_SETTINGS.by_key), ("node", _NODE_KEYS),
                          ("cleaner", CLEANER_SETTINGS.by_key)):
        for key in keys:
            name = env_name(key)
            if name in out:
                raise InvalidConfigError(f"{name} would set both {out[name]} and {(section, key)}")
            out[name] = (section, key)
    return out


def parse_listen_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6 address]:port`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {text!r} is not host:port (port 0-65535; IPv6 as [::1]:8080)")
    return host, int(port)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def parse_kafka_listener(text: str) -> tuple[str, str, int]:
    """``[PROTOCOL://]host:port`` -> (security protocol, host, port), as Kafka's ``listeners``.

    Secure default: an address without a protocol is PLAINTEXT and must be loopback (the pod's
    own containers); anything reachable from elsewhere names its protocol, PLAINTEXT included,
    so that an unauthenticated listener on the pod network is always a written-down choice."""
    text = text.strip()
    protocol, sep, rest = text.partition("://")
    if not sep:
        protocol, rest = "", text
    protocol = protocol.upper()
    if protocol and protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"listener {text!r}: unknown security protocol {protocol!r} "
                         f"(allowed: {', '.join(SECURITY_PROTOCOLS)})")
    host, port = parse_listen_address(rest)
    if not protocol:
        if not is_loopback_host(host):
            raise ValueError(f"listener {text!r} is not loopback: name its security protocol, e.g. "
                             f"SASL_SSL://{rest} (or PLAINTEXT://{rest} to open it without authentication on purpose)")
        protocol = "PLAINTEXT"
    return protocol, host, port


@dataclass(frozen=True)
class SidecarSettings:
    listen: list[str]
    token_file: str
    max_request_bytes: int
    fetch_max_bytes: int
    io_threads: int
    shutdown_timeout_ms: int
    http_read_auth: str = "token"
    http_metrics_auth: str = "token"
    http_max_connections: int = 256
    http_connections_max_idle_ms: int = 60000
    http_body_timeout_ms: int = 30000
    http_queued_max_request_bytes: int = 64 * MIB
    kafka_listen: list[str] = field(default_factory=list)
    kafka_advertised_listeners: list[str] = field(default_factory=list)
    kafka_node_id: int = 0
    kafka_socket_request_max_bytes: int = 100 * MIB
    kafka_queued_max_request_bytes: int = 100 * MIB
    kafka_queued_max_response_bytes: int = 100 * MIB
    kafka_max_connections: int = 128
    kafka_connections_max_idle_ms: int = 600000
    kafka_sasl_enabled_mechanisms: list[str] = field(default_factory=lambda: list(SASL_MECHANISMS))
    kafka_sasl_users_file: str = ""
    kafka_ssl_certificate_location: str = ""
    kafka_ssl_key_location: str = ""
    kafka_ssl_key_password_file: str = ""
    kafka_ssl_ca_location: str = ""
    kafka_ssl_client_auth: str = "none"
    offsets_topic_num_partitions: int = 1
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000

    @property
    def listen_addresses(self) -> list[tuple[str, int]]:
        return [parse_listen_address(a) for a in self.listen]

    @property
    def kafka_listeners(self) -> list[tuple[str, str, int]]:
        """(security protocol, host, port) of each kafka.listen entry."""
        return [parse_kafka_listener(a) for a in self.kafka_listen]


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)  # validated topic-level overrides


@dataclass(frozen=True)
class SidecarConfig:
    source: str  # the file (for messages)
    sidecar: SidecarSettings
    manager: ManagerConfig
    cleaner: CleanerConfig
    topics: dict[str, TopicSpec]

    @property
    def log_dirs(self) -> list[str]:
        return list(self.manager.log_dirs)


def _section(doc: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    raw = doc.get(name)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidConfigError(f"{source}: section {name!r} must be a mapping of keys to values")
    return {str(k): v for k, v in raw.items()}


def _check_keys(section: str, values: Mapping[str, Any], known: Mapping[str, Setting], source: str) -> None:
    for key, value in values.items():
        if key not in known:
            hint = " (keys are Kafka's dotted names written flat, e.g. log.dirs)" if isinstance(value, Mapping) else ""
            raise InvalidConfigError(f"{source}: unknown key {key!r} in section {section}{hint}")


def _parse_topics(raw: Any, source: str) -> dict[str, TopicSpec]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidConfigError(f"{source}: section 'topics' must map topic names to {{partitions, configs}}")
    out: dict[str, TopicSpec] = {}
    for name, spec in raw.items():
        name = str(name)
        where = f"{source}: topic {name!r}"
        try:
            names.validate_topic(name)
        except ValueError as e:
            raise InvalidConfigError(f"{where}: {e}") from None
        spec = spec or {}
        if not isinstance(spec, Mapping):
            raise InvalidConfigError(f"{where}: must be a mapping with partitions and configs")
        for key in spec:
            if key not in TOPIC_FIELDS:
                raise InvalidConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(TOPIC_FIELDS)})")
        partitions = spec.get("partitions", 1)
        if isinstance(partitions, bool) or not isinstance(partitions, int) \
                or not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidConfigError(f"{where}: partitions must be an integer from 1 to {MAX_PARTITIONS_PER_TOPIC}, "
                                     f"got {partitions!r}")
        configs = spec.get("configs") or {}
        if not isinstance(configs, Mapping):
            raise InvalidConfigError(f"{where}: configs must be a mapping of topic keys to values")
        try:
            parsed = validate_topic_configs(configs)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{where}: {e}") from None
        out[name] = TopicSpec(name, partitions, parsed)
    return out


def apply_env(sections: dict[str, dict[str, Any]], environ: Mapping[str, str]) -> None:
    """Overlay ``LOGKEEPER_*`` variables on the sections (in place)."""
    mapping = env_overrides_map()
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        target = mapping.get(name)
        if target is None:
            log.warning("ignoring environment variable %s: not a sidecar, node or cleaner key", name)
            continue
        section, key = target
        sections[section][key] = value


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Read, overlay the environment, validate. InvalidConfigError names the file and the key."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidConfigError(f"{source}: cannot read the config file: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidConfigError(f"{source}: not valid YAML: {e}") from None
    return config_from_document(doc, source, os.environ if environ is None else environ)


def config_from_document(doc: Any, source: str, environ: Mapping[str, str]) -> SidecarConfig:
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise InvalidConfigError(f"{source}: the top level must be a mapping with sections {', '.join(SECTIONS)}")
    for key in doc:
        if key not in SECTIONS:
            raise InvalidConfigError(f"{source}: unknown section {key!r} (allowed: {', '.join(SECTIONS)})")
    sections = {name: _section(doc, name, source) for name in ("sidecar", "node", "cleaner")}
    if "auth.reads" in sections["sidecar"]:  # the key of versions whose reads were open by default
        raise InvalidConfigError(f"{source}: sidecar key 'auth.reads' is gone: reads need the token by default; "
                                 f"set http.read.auth: none to open them on purpose")
    if "kafka.max.request.bytes" in sections["sidecar"]:  # renamed to Kafka's own name
        raise InvalidConfigError(f"{source}: sidecar key 'kafka.max.request.bytes' is now "
                                 f"'kafka.socket.request.max.bytes' (Kafka's name); rename it")
    _check_keys("sidecar", sections["sidecar"], SIDECAR_SETTINGS.by_key, source)
    _check_keys("node", sections["node"], _NODE_KEYS, source)
    _check_keys("cleaner", sections["cleaner"], CLEANER_SETTINGS.by_key, source)
    apply_env(sections, environ)
    if "log.dirs" not in sections["node"]:
        raise InvalidConfigError(f"{source}: node.log.dirs is not set (nor {env_name('log.dirs')})")
    try:
        sidecar = SidecarSettings(**SIDECAR_SETTINGS.resolve(sections["sidecar"]))
        manager = ManagerConfig.from_props(sections["node"])
        cleaner = CleanerConfig.from_props(sections["cleaner"])
    except InvalidConfigError as e:
        raise InvalidConfigError(f"{source}: {e}") from None
    if sidecar.kafka_advertised_listeners and len(sidecar.kafka_advertised_listeners) != len(sidecar.kafka_listen):
        raise InvalidConfigError(f"{source}: sidecar.kafka.advertised.listeners must name one address per "
                                 f"kafka.listen address ({len(sidecar.kafka_listen)}), or none")
    _check_kafka_security(sidecar, source)
    if sidecar.group_min_session_timeout_ms > sidecar.group_max_session_timeout_ms:
        raise InvalidConfigError(f"{source}: sidecar.group.min.session.timeout.ms is above "
                                 f"group.max.session.timeout.ms")
    if not sidecar.token_file:
        raise InvalidConfigError(f"{source}: sidecar.token.file is not set (nor {env_name('token.file')}): "
                                 f"requests need a bearer token")
    return SidecarConfig(source, sidecar, manager, cleaner, _parse_topics(doc.get("topics"), source))


def _check_kafka_security(sidecar: SidecarSettings, source: str) -> None:
    """The Kafka listener's limits and security settings agree with its listeners."""
    if sidecar.kafka_queued_max_request_bytes < sidecar.kafka_socket_request_max_bytes:
        raise InvalidConfigError(f"{source}: sidecar.kafka.queued.max.request.bytes is below "
                                 f"kafka.socket.request.max.bytes: the largest request could never be read")
    protocols = {p for p, _h, _port in sidecar.kafka_listeners}
    if protocols & {"SASL_PLAINTEXT", "SASL_SSL"}:
        if not sidecar.kafka_sasl_users_file:
            raise InvalidConfigError(f"{source}: a SASL listener needs sidecar.kafka.sasl.users.file")
        if not sidecar.kafka_sasl_enabled_mechanisms:
            raise InvalidConfigError(f"{source}: a SASL listener needs sidecar.kafka.sasl.enabled.mechanisms")
    if protocols & {"SSL", "SASL_SSL"} and not sidecar.kafka_ssl_certificate_location:
        raise InvalidConfigError(f"{source}: an SSL listener needs sidecar.kafka.ssl.certificate.location "
                                 f"(and kafka.ssl.key.location)")
    if sidecar.kafka_ssl_client_auth != "none" and not sidecar.kafka_ssl_ca_location:
        raise InvalidConfigError(f"{source}: sidecar.kafka.ssl.client.auth {sidecar.kafka_ssl_client_auth} needs "
                                 f"kafka.ssl.ca.location")
