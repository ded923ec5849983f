"""Running a real Apache Kafka next to logkeeper: the fetched distribution, its tools, a broker.

``fetch_kafka()`` runs ``interop/fetch_kafka.sh`` (Kafka's jars from Maven Central into a cache,
and the client harness ``interop/KafkaClientHarness.java`` compiled) and returns a ``KafkaDist``.
``KafkaDist.java(main, args)`` runs a class of it; ``dump_log_segments`` runs Kafka's
DumpLogSegments and ``parse_dump`` reads its output into batches and records.

``Broker`` is a single-node KRaft broker (combined broker and controller) on 127.0.0.1 with two
free ports, formatted with Kafka's StorageTool; its log4j2 output goes to ``logs/server.log``
(and the cleaner's lines also to ``logs/log-cleaner.log``); the data log directory ``data/``
holds only topic partitions (the cluster metadata log lives in ``meta/``). ``start`` waits for
the line "Kafka Server started"; ``stop`` sends SIGTERM and waits for a clean shutdown; ``kill``
is the last resort the fixtures always call.

Every failure raises ``InteropError`` carrying the tool output that shows why.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INTEROP = REPO / "interop"
LOGKEEPER = Path(sys.executable).parent / "logkeeper"
LOG4J_TOOLS = INTEROP / "log4j2-tools.xml"
LOG4J_BROKER = INTEROP / "log4j2-broker.xml"
# short-lived JVMs (tools, clients) start faster with the C1 compiler and the serial collector
TOOL_JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m")
BROKER_JVM_OPTS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC")

STORAGE_TOOL = "kafka.tools.StorageTool"
DUMP_LOG_SEGMENTS = "kafka.tools.DumpLogSegments"
BROKER_MAIN = "kafka.Kafka"
CLIENT_HARNESS = "KafkaClientHarness"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class InteropError(AssertionError):
    """A tool or the broker failed; the message holds the output that shows why."""


def _tail(text: str, limit: int = 6000) -> str:
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]


@dataclass
class ToolResult:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self, limit: int = 6000) -> str:
        cmd = ["<classpath>" if os.pathsep in c and c.endswith(("classes", ".jar")) else c for c in self.cmd]
        shown = " ".join(cmd if len(cmd) < 14 else [*cmd[:13], "..."])
        return (f"$ {shown}\n(exit {self.returncode}, {self.seconds:.1f} s)\n"
                f"--- stdout ---\n{_tail(self.stdout, limit)}\n--- stderr ---\n{_tail(self.stderr, limit)}")


def run(cmd: Sequence[str | Path], *, input_text: str | None = None, timeout: float = 300,
        env: Mapping[str, str] | None = None, check: bool = True, what: str = "") -> ToolResult:
    args = [str(c) for c in cmd]
    started = time.monotonic()
    try:
        proc = subprocess.run(args, input=input_text, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        raise InteropError(f"{what or args[0]}: timed out after {timeout} s: {' '.join(args[:12])}\n"
                           f"stdout: {_tail(str(e.stdout or ''))}\nstderr: {_tail(str(e.stderr or ''))}") from None
    result = ToolResult(args, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
    if check and proc.returncode != 0:
        raise InteropError(f"{what or args[0]} failed\n{result.describe()}")
    return result


def logkeeper(*args: str | Path, check: bool = True, timeout: float = 300) -> ToolResult:
    return run([LOGKEEPER, *args], check=check, timeout=timeout, what=f"logkeeper {args[0]}")


# ---------------------------------------------------------------------------------------- Kafka
@dataclass(frozen=True)
class KafkaDist:
    home: Path
    version: str
    classpath: str

    def java(self, main: str, args: Sequence[str | Path], *, input_text: str | None = None,
             timeout: float = 300, check: bool = True, jvm_opts: Sequence[str] = TOOL_JVM_OPTS) -> ToolResult:
        cmd = ["java", *jvm_opts, f"-Dlog4j2.configurationFile={LOG4J_TOOLS}", "-cp", self.classpath, main,
               *[str(a) for a in args]]
        return run(cmd, input_text=input_text, timeout=timeout, check=check, what=main)


def fetch_kafka() -> KafkaDist:
    result = run(["bash", INTEROP / "fetch_kafka.sh"], timeout=900, what="interop/fetch_kafka.sh")
    home = Path(result.stdout.strip().splitlines()[-1])
    classpath = (home / "classpath").read_text().strip() + os.pathsep + str(home / "classes")
    return KafkaDist(home, (home / "VERSION").read_text().strip(), classpath)


def dump_log_segments(dist: KafkaDist, files: Iterable[Path], *options: str, timeout: float = 300) -> ToolResult:
    """DumpLogSegments on ``files`` (one JVM); the result is returned whatever the exit code."""
    names = ",".join(str(f) for f in files)
    return dist.java(DUMP_LOG_SEGMENTS, [*options, "--files", names], timeout=timeout, check=False)


# ------------------------------------------------------------------------- DumpLogSegments output
@dataclass
class DumpedRecord:
    offset: int
    timestamp_type: str
    timestamp: int
    key_size: int
    value_size: int
    sequence: int
    header_keys: list[str]
    key: str | None = None
    value: str | None = None
    control: tuple[str, int] | None = None  # (ABORT|COMMIT, coordinatorEpoch)


@dataclass
class DumpedBatch:
    line: str
    fields: dict[str, str]
    records: list[DumpedRecord] = field(default_factory=list)


@dataclass
class DumpedFile:
    path: str
    lines: list[str] = field(default_factory=list)  # every line after "Dumping FILE"
    batches: list[DumpedBatch] = field(default_factory=list)


_FIELD = re.compile(r"(\w+): (\S+)")
_RECORD = re.compile(r"\| offset: (\d+) (\w+): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+) "
                     r"sequence: (-?\d+) headerKeys: \[([^\]]*)\]")
_MARKER = re.compile(r" endTxnMarker: (\w+) coordinatorEpoch: (-?\d+)")


def _parse_record(line: str) -> DumpedRecord:
    m = _RECORD.match(line)
    if m is None:
        raise ValueError(f"unexpected record line from DumpLogSegments: {line!r}")
    r = DumpedRecord(int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), int(m[6]),
                     [k for k in m[7].split(",") if k])
    rest = line[m.end():]
    marker = _MARKER.match(rest)
    if marker is not None:
        r.control = (marker[1], int(marker[2]))
        rest = rest[marker.end():]
    # keys and values are printable ASCII in these tests, so sizes in bytes are sizes in characters
    if rest.startswith(" key: ") and r.key_size >= 0:
        r.key = rest[6:6 + r.key_size]
        rest = rest[6 + r.key_size:]
    if rest.startswith(" payload: ") and r.value_size >= 0:
        r.value = rest[10:10 + r.value_size]
        rest = rest[10 + r.value_size:]
    if rest:
        raise ValueError(f"unparsed tail {rest!r} of record line {line!r}")
    return r


def parse_dump(stdout: str) -> dict[str, DumpedFile]:
    """DumpLogSegments' stdout by file (as the tool names it)."""
    files: dict[str, DumpedFile] = {}
    current: DumpedFile | None = None
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = files.setdefault(line[len("Dumping "):], DumpedFile(line[len("Dumping "):]))
            continue
        if current is None:
            continue
        current.lines.append(line)
        if line.startswith("baseOffset: "):
            current.batches.append(DumpedBatch(line, dict(_FIELD.findall(line))))
        elif line.startswith("| offset: "):
            if not current.batches:
                raise ValueError(f"record line before any batch line: {line!r}")
            current.batches[-1].records.append(_parse_record(line))
    return files


def logkeeper_json(files: Iterable[Path]) -> list[dict[str, object]]:
    """``logkeeper dump-log --json`` of ``files``: one dict a record."""
    result = logkeeper("dump-log", "--json", *files)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def b64(data: bytes | None) -> str:
    return "-" if data is None else base64.b64encode(data).decode("ascii")


def unb64(field_: str | None) -> bytes | None:
    return None if field_ is None or field_ == "-" else base64.b64decode(field_)


# ------------------------------------------------------------------------------------ the broker
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kafka_uuid() -> str:
    """A Kafka Uuid string (URL-safe base64 of 16 random bytes, unpadded) for a cluster id; as
    Kafka's Uuid.randomUuid does, never one starting with '-' (a command line takes it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class ConsumedRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


class Broker:
    """One KRaft node (broker + controller) on loopback, in ``workdir``."""

    def __init__(self, dist: KafkaDist, workdir: Path, props: Mapping[str, object] | None = None) -> None:
        self.dist = dist
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.meta_dir = self.workdir / "meta"
        self.logs_dir = self.workdir / "logs"
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "metadata.log.dir": str(self.meta_dir),
            "num.partitions": 1,
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
        }
        self.props.update(props or {})
        self.config_file = self.workdir / "server.properties"
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def cleaner_log(self) -> Path:
        return self.logs_dir / "log-cleaner.log"

    def log_text(self) -> str:
        try:
            return self.server_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self, lines: int = 60) -> str:
        text = self.log_text().splitlines()
        stdout = self.logs_dir / "stdout.log"
        extra = stdout.read_text(errors="replace") if stdout.exists() else ""
        return (f"broker {self.workdir} (exit {self.proc.poll() if self.proc else 'not started'}); "
                f"last {lines} lines of {self.server_log}:\n" + "\n".join(text[-lines:]) +
                (f"\n--- broker stdout/stderr ---\n{_tail(extra, 3000)}" if extra.strip() else ""))

    def write_config(self, **changes: object) -> None:
        """(Re)write server.properties, with ``changes`` (dots as underscores) applied; a running
        broker sees them at its next start."""
        self.props.update({k.replace("_", "."): v for k, v in changes.items()})
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))

    def format(self) -> ToolResult:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self.write_config()
        return self.dist.java(STORAGE_TOOL, ["format", "--cluster-id", kafka_uuid(), "--config", self.config_file],
                              timeout=120)

    def start(self, timeout: float = 90) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise InteropError(f"broker {self.workdir} is already running")
        # a fresh server.log per start, so greps see this start only; earlier ones are kept
        if self.server_log.exists():
            self.server_log.rename(self.logs_dir / f"server.log.{self.starts}")
        if self.cleaner_log.exists():
            self.cleaner_log.rename(self.logs_dir / f"log-cleaner.log.{self.starts}")
        self.starts += 1
        cmd = ["java", *BROKER_JVM_OPTS, f"-Dkafka.logs.dir={self.logs_dir}",
               f"-Dlog4j2.configurationFile={LOG4J_BROKER}", "-cp", self.dist.classpath, BROKER_MAIN,
               str(self.config_file)]
        with open(self.logs_dir / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise InteropError(f"the broker exited during startup\n{self.describe()}")
            if "Kafka Server started" in self.log_text() and self._port_open():
                return
            time.sleep(0.25)
        raise InteropError(f"the broker did not start within {timeout} s\n{self.describe()}")

    def _port_open(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 90) -> None:
        """Clean shutdown (SIGTERM); raises if the broker needed killing or left no clean-shutdown file."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise InteropError(f"the broker did not stop within {timeout} s; killed\n{self.describe()}") from None
        if not (self.data_dir / ".kafka_cleanshutdown").exists():
            raise InteropError(f"the broker stopped without writing .kafka_cleanshutdown\n{self.describe()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    # ------------------------------------------------------------------ clients
    def client(self, command: str, *args: object, input_text: str | None = None, timeout: float = 300) -> ToolResult:
        return self.dist.java(CLIENT_HARNESS, [command, self.bootstrap, *[str(a) for a in args]],
                              input_text=input_text, timeout=timeout)

    def create_topic(self, topic: str, partitions: int = 1, configs: Mapping[str, object] | None = None) -> None:
        self.client("create-topic", topic, partitions, *[f"{k}={v}" for k, v in (configs or {}).items()])

    def alter_topic_config(self, topic: str, configs: Mapping[str, object]) -> None:
        self.client("alter-topic-config", topic, *[f"{k}={v}" for k, v in configs.items()])

    def produce(self, topic: str, partition: int,
                records: Sequence[tuple[str, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
                ) -> list[int]:
        """Produce (codec, key, value, headers) records in order; returns the offsets they got."""
        lines = []
        for codec, key, value, headers in records:
            hdr = ",".join(f"{k}={b64(v)}" for k, v in headers)
            lines.append(f"{codec}\t{b64(key)}\t{b64(value)}\t{hdr}\n")
        result = self.client("produce", topic, partition, input_text="".join(lines), timeout=600)
        offsets = [int(x) for x in result.stdout.split()]
        if len(offsets) != len(records):
            raise InteropError(f"produced {len(records)} records, got {len(offsets)} offsets\n{result.describe()}")
        return offsets

    def produce_transactions(self, topic: str, partition: int, codec: str,
                             transactions: Sequence[tuple[bool, Sequence[tuple[bytes | None, bytes | None]]]],
                             ) -> list[int]:
        """Produce each (commit?, [(key, value), ...]) as one transaction of one transactional
        producer; returns the offsets the records got."""
        lines = [f"{i}\t{'commit' if commit else 'abort'}\t{b64(k)}\t{b64(v)}\n"
                 for i, (commit, recs) in enumerate(transactions) for k, v in recs]
        result = self.client("produce-transactions", topic, partition, codec, input_text="".join(lines), timeout=600)
        offsets = [int(x) for x in result.stdout.split()]
        if len(offsets) != len(lines):
            raise InteropError(f"produced {len(lines)} records, got {len(offsets)} offsets\n{result.describe()}")
        return offsets

    def consume(self, topic: str, partition: int, isolation: str = "read_uncommitted",
                ) -> tuple[tuple[int, int], list[ConsumedRecord], ToolResult]:
        """Every record from the partition's start to its end: ((start, end), records, tool result)."""
        result = self.client("consume", topic, partition, isolation, timeout=300)
        lines = result.stdout.splitlines()
        if not lines or not lines[0].startswith("#range "):
            raise InteropError(f"unexpected consumer output\n{result.describe()}")
        start, end = (int(x) for x in lines[0].split()[1:3])
        out = []
        for line in lines[1:]:
            offset, key, value, headers, ts = line.split("\t")
            hdrs = [(k, unb64(v)) for k, _, v in (h.partition("=") for h in headers.split(",") if h)]
            out.append(ConsumedRecord(int(offset), unb64(key), unb64(value), hdrs, int(ts)))
        return (start, end), out, result


# --------------------------------------------------------------------------- cleaner statistics
@dataclass(frozen=True)
class CleanerRound:
    """One cleaning round as Kafka's stats message (LogCleaner's recordStats) prints it."""

    thread: int
    log: str
    dirty_start: int
    dirty_end: int
    mb: float
    seconds: float
    mb_per_sec: float
    indexed_mb: float
    index_seconds: float
    buffer_utilization_pct: float
    start_mb: float
    start_messages: int
    end_mb: float
    end_messages: int
    size_reduction_pct: float
    fewer_messages_pct: float
    text: str


_NUM = r"(-?[\d,]+\.\d|NaN|-?Infinity)"
_STATS = re.compile(
    r"Log cleaner thread (\d+) cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)\s*"
    rf"{_NUM} MB of log processed in {_NUM} seconds \({_NUM} MB/sec\)\.\s*"
    rf"Indexed {_NUM} MB in {_NUM} seconds \({_NUM} Mb/sec, {_NUM}% of total time\)\s*"
    rf"Buffer utilization: {_NUM}%\s*"
    rf"Cleaned {_NUM} MB in {_NUM} seconds \({_NUM} Mb/sec, {_NUM}% of total time\)\s*"
    rf"Start size: {_NUM} MB \(([\d,]+) messages\)\s*"
    rf"End size: {_NUM} MB \(([\d,]+) messages\)\s*"
    rf"{_NUM}% size reduction \({_NUM}% fewer messages\)")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def parse_cleaner_stats(text: str) -> list[CleanerRound]:
    """Every stats message in ``text`` (a broker's log or `logkeeper clean`'s output)."""
    out = []
    for m in _STATS.finditer(text):
        g = m.groups()
        out.append(CleanerRound(
            thread=int(g[0]), log=g[1], dirty_start=int(g[2]), dirty_end=int(g[3]), mb=_f(g[4]), seconds=_f(g[5]),
            mb_per_sec=_f(g[6]), indexed_mb=_f(g[7]), index_seconds=_f(g[8]), buffer_utilization_pct=_f(g[11]),
            start_mb=_f(g[16]), start_messages=int(g[17].replace(",", "")), end_mb=_f(g[18]),
            end_messages=int(g[19].replace(",", "")), size_reduction_pct=_f(g[20]), fewer_messages_pct=_f(g[21]),
            text=m[0]))
    return out


def wait_for_round(broker: Broker, log_name: str, end: int, timeout: float) -> CleanerRound | None:
    """The broker's stats message for a round of ``log_name`` that cleaned up to ``end``; None when
    none came within ``timeout`` seconds or the broker exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker.proc is None or broker.proc.poll() is not None:
            break
        text = broker.cleaner_log.read_text(errors="replace") if broker.cleaner_log.exists() else ""
        rounds = [r for r in parse_cleaner_stats(text) if r.log == log_name and r.dirty_end == end]
        if rounds:
            return rounds[-1]
        time.sleep(0.5)
    return None
