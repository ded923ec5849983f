"""Running Kafka's perf tools (ProducerPerformance, ConsumerPerformance, the interop harness) and
reading what they report, with the CPU time the tools and the servers used meanwhile: the layer
under bench_kafka_perf.py, also used by bench_kafka_raw.py and ab_kafka_consume.py.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.kafka.kafka_harness import LOG4J_TOOLS, KafkaDist  # noqa: E402

WARM_PRODUCER = REPO / "bench" / "WarmProducerPerformance.java"  # run by java's source-file mode
WARM_PASSES = 2
PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
PERF_JVM_OPTS = ("-Xmx1g", "-XX:+UseG1GC")
TOOL_TIMEOUT_S = 300  # one tool run; a hung server fails the benchmark instead of stalling it
MIB = 1 << 20

# the tool's threads counted apart, by the name /proc gives them (their first 15 characters):
# HotSpot's JIT compilers, and the producer's network thread ("kafka-producer-network-thread | ...")
_THREAD_ROLES = {"C1 CompilerThre": "jit", "C2 CompilerThre": "jit", "kafka-producer-": "sender"}
SAMPLE_S = 0.1
# "1000000 records sent, 533000.5 records/sec (50.83 MB/sec), 45.23 ms avg latency, 207.00 ms max
# latency, 40 ms 50th, 150 ms 95th, 200 ms 99th, 207 ms 99.9th."
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
# one line of --print-metrics: "producer-metrics:select-total:{client-id=perf-producer-client}  : 25351.000"
_METRIC = re.compile(r"^producer-metrics:([\w-]+):\{[^}]*\}\s*:\s*(\S+)\s*$", re.M)


@dataclass(frozen=True)
class ProducerCase:
    acks: str
    record_bytes: int
    batch_bytes: int | None  # None: the producer's default

    @property
    def name(self) -> str:
        batch = "default batch" if self.batch_bytes is None else f"{self.batch_bytes // MIB} MiB batch"
        return f"produce acks={self.acks} {self.record_bytes} B {batch}"

    @property
    def topic(self) -> str:
        return f"perf-{self.acks}-{self.record_bytes}-{self.batch_bytes or 0}"


@dataclass(frozen=True)
class Produced:
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu_ms_per_mb: float = 0.0
    tool_cpu_s: float = 0.0  # the tool JVM's user + system CPU
    tool_jit_s: float = 0.0  # of it, its JIT compiler threads'
    tool_sender_s: float = 0.0  # of it, the producer's network thread's
    selects_per_request: float = 0.0  # the producer's select() calls per request sent
    request_latency_ms: float = 0.0  # its average request latency


@dataclass(frozen=True)
class Consumed:
    mb_per_s: float
    records_per_s: float
    join_ms: float
    fetch_mb_per_s: float
    server_cpu_ms_per_mb: float = 0.0


def stat_cpu_s(stat: str) -> float:
    """User + system CPU seconds in the text of a /proc/.../stat file (a process's or a thread's)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included)."""
    return stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())


def per_mb(cpu_s: float, mb: float) -> float:
    return cpu_s * 1000 / mb if mb > 0 else 0.0


R = TypeVar("R")


def with_server_cpu(pid: int, mb: float, run: Callable[..., R], *args: Any) -> tuple[R, float]:
    """``run(*args)``'s result and the CPU the server process ``pid`` used meanwhile, in ms per MB moved."""
    before = cpu_seconds(pid)
    result = run(*args)
    return result, per_mb(cpu_seconds(pid) - before, mb)


# the CPUs the tools run on (None: wherever the kernel puts them); bench_kafka_perf --pin sets them once
TOOL_CPUS: set[int] | None = None
# the cgroup.procs file each tool joins before it starts (None: this process's cgroup); --cgroups sets it
TOOL_CGROUP: Path | None = None


def run_tools_on(cpus: set[int]) -> None:
    """Run every later tool on ``cpus`` (every thread of it)."""
    global TOOL_CPUS
    TOOL_CPUS = cpus


def run_tools_in(cgroup_procs: Path) -> None:
    """Start every later tool in the cgroup of ``cgroup_procs`` (its threads follow it)."""
    global TOOL_CGROUP
    TOOL_CGROUP = cgroup_procs


def _place_tool() -> None:  # in the tool's process, between fork and exec
    if TOOL_CGROUP is not None:
        with open(TOOL_CGROUP, "w") as f:
            f.write(str(os.getpid()))
    if TOOL_CPUS is not None:
        os.sched_setaffinity(0, TOOL_CPUS)


class CpuGroups:
    """A cpu cgroup of its own, with the default weight, for each of ``names``, inside one made for
    this run: the kernel then shares the cores between the groups and only inside a group between
    its threads, as it does between the containers of a pod, not thread by thread across processes
    (where a JVM's dozen runnable threads outweigh a one-thread server). Needs root and a cpu
    controller: cgroup v1's /sys/fs/cgroup/cpu, or v2 with cpu in its cgroup.controllers."""

    def __init__(self, names: list[str], root: Path = Path("/sys/fs/cgroup")) -> None:
        if (root / "cpu" / "cgroup.procs").exists():
            self.root, v2 = root / "cpu", False
        elif "cpu" in _read(root / "cgroup.controllers").split():
            self.root, v2 = root, True
        else:
            raise RuntimeError(f"no cpu cgroup controller under {root} (v1 {root}/cpu, or v2 with cpu in "
                               f"{root}/cgroup.controllers)")
        self.parent = self.root / f"logkeeper-bench-{os.getpid()}"
        try:
            self.parent.mkdir()
            if v2:  # v2 shares the cpu between children only where the parents hand the controller down
                for parent in (self.root, self.parent):
                    (parent / "cgroup.subtree_control").write_text("+cpu")
            for name in names:
                (self.parent / name).mkdir()
        except OSError as e:
            self.close()
            raise RuntimeError(f"cannot make cpu cgroups in {self.root} (root is needed): {e}") from e

    def procs(self, name: str) -> Path:
        return self.parent / name / "cgroup.procs"

    def join(self, name: str, pid: int) -> None:
        """Move process ``pid``, every thread of it, into group ``name``."""
        self.procs(name).write_text(str(pid))

    def close(self) -> None:
        """Move what is left in the groups back to the root group and remove the groups."""
        if not self.parent.exists():
            return
        for group in [*self.parent.iterdir(), self.parent]:
            if not group.is_dir():
                continue
            for pid in _read(group / "cgroup.procs").split():
                try:
                    (self.root / "cgroup.procs").write_text(pid)
                except ProcessLookupError:
                    pass  # it ended meanwhile
            if group != self.parent:
                group.rmdir()
        self.parent.rmdir()

    def __enter__(self) -> CpuGroups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` to ``cpus`` (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:
            pass  # the thread ended meanwhile


def children_cpu_s() -> float:
    """User + system CPU of this process's reaped children so far (the tools: each run is reaped
    before the call returns; the servers run on and are not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def role_cpu_s(pid: int, seen: dict[int, tuple[str, float]]) -> None:
    """Record in ``seen`` (thread id -> (role, seconds)) the CPU time so far of each thread of
    process ``pid`` that has a role in _THREAD_ROLES."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return  # exited
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        role = _THREAD_ROLES.get(stat[stat.index("(") + 1:stat.rindex(")")])
        if role is not None:
            seen[int(task.name)] = (role, stat_cpu_s(stat))


def run_tool(dist: KafkaDist, main: str, args: list[str]) -> tuple[str, dict[str, float]]:
    """The tool's standard output and the CPU seconds of its threads by role (_THREAD_ROLES)."""
    cmd = ["java", *PERF_JVM_OPTS, f"-Dlog4j2.configurationFile={LOG4J_TOOLS}", "-cp", dist.classpath, main, *args]
    placed = TOOL_CPUS is not None or TOOL_CGROUP is not None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=_place_tool if placed else None) as proc:
        outputs: list[str] = []
        reader = threading.Thread(target=lambda: outputs.extend(proc.communicate()), daemon=True)
        reader.start()
        threads: dict[int, tuple[str, float]] = {}
        deadline = time.monotonic() + TOOL_TIMEOUT_S
        while reader.is_alive() and time.monotonic() < deadline:
            role_cpu_s(proc.pid, threads)
            reader.join(SAMPLE_S)
        if reader.is_alive():
            proc.kill()
            reader.join()
            raise RuntimeError(f"{main} {' '.join(args)}: no exit in {TOOL_TIMEOUT_S} s")
    out, err = outputs
    if proc.returncode != 0:
        raise RuntimeError(f"{main} {' '.join(args)} failed (exit {proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
    roles = dict.fromkeys(_THREAD_ROLES.values(), 0.0)
    for role, seconds in threads.values():
        roles[role] += seconds
    return out, roles


def produce(dist: KafkaDist, bootstrap: str, case: ProducerCase, records: int, warm_tool: bool = False) -> Produced:
    """ProducerPerformance's figures for ``records`` of ``case``; with ``warm_tool``, of the last
    of WARM_PASSES runs of it in one JVM."""
    props = [f"bootstrap.servers={bootstrap}", f"acks={case.acks}", "linger.ms=5", "compression.type=none"]
    if case.batch_bytes is not None:
        props += [f"batch.size={case.batch_bytes}", f"buffer.memory={max(64 * MIB, 4 * case.batch_bytes)}"]
    cpu_before = children_cpu_s()
    tool_args = ["--topic", case.topic, "--num-records", str(records), "--record-size", str(case.record_bytes),
                 "--throughput", "-1", "--print-metrics", "--producer-props", *props]
    if warm_tool:
        out, roles = run_tool(dist, str(WARM_PRODUCER), [str(WARM_PASSES), *tool_args])
    else:
        out, roles = run_tool(dist, PRODUCER, tool_args)
    tool_cpu = children_cpu_s() - cpu_before
    finals = list(_PRODUCED.finditer(out))  # the last line is the whole run's (the others: 5-second windows)
    m = finals[-1] if finals else None
    if m is None or int(m[1]) != records:
        raise RuntimeError(f"ProducerPerformance to {bootstrap}: no final line for {records} records:\n{out[-2000:]}")
    metrics = producer_metrics(out[m.end():])  # the measured run's (a warm tool prints them after each pass)
    return Produced(float(m[2]), float(m[3]), float(m[6]), float(m[8]), tool_cpu_s=tool_cpu, tool_jit_s=roles["jit"],
                    tool_sender_s=roles["sender"],
                    selects_per_request=metrics.get("select-total", 0.0) / max(metrics.get("request-total", 0.0), 1.0),
                    request_latency_ms=metrics.get("request-latency-avg", 0.0))


def producer_metrics(text: str) -> dict[str, float]:
    """The ``producer-metrics`` group of the first ``--print-metrics`` listing in ``text`` (the
    per-node groups left out), by metric name; values that are not numbers (NaN included) left out."""
    found: dict[str, float] = {}
    for name, value in _METRIC.findall(text):
        try:
            number = float(value)
        except ValueError:
            continue
        if number == number:  # not NaN
            found.setdefault(name, number)
    return found


def consume(dist: KafkaDist, bootstrap: str, topic: str, records: int, isolation: str = "read_uncommitted") -> Consumed:
    """ConsumerPerformance reading ``records`` of ``topic``; ``isolation``: the consumer's
    isolation.level (read_committed is librdkafka's default, the Java client's is not)."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
            "--group", f"perf-{time.monotonic_ns()}", "--timeout", "60000"]
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as conf:
        conf.write(f"isolation.level={isolation}\n")
        conf.flush()
        out, _ = run_tool(dist, CONSUMER, [*args, "--consumer.config", conf.name])
    lines = [line for line in out.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if header is None or header + 1 >= len(lines):
        raise RuntimeError(f"ConsumerPerformance on {bootstrap}: no figures:\n{out[-2000:]}")
    names = [c.strip() for c in lines[header].split(",")]
    row = dict(zip(names, (c.strip() for c in lines[header + 1].split(",")), strict=False))
    if float(row["data.consumed.in.nMsg"]) < records:
        raise RuntimeError(f"ConsumerPerformance on {bootstrap}: read {row['data.consumed.in.nMsg']} of {records}")
    return Consumed(float(row["MB.sec"]), float(row["nMsg.sec"]), float(row["rebalance.time.ms"]),
                    float(row["fetch.MB.sec"]))


def create_topic(dist: KafkaDist, bootstrap: str, topic: str) -> None:
    run_tool(dist, "KafkaClientHarness", ["create-topic", bootstrap, topic, "1"])
