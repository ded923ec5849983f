"""Kafka's own perf tools (ProducerPerformance, ConsumerPerformance from kafka-tools) against the
sidecar's Kafka listener and against a KRaft broker, same parameters, side by side.

Both servers run on this machine on loopback (the broker as tests/kafka/kafka_harness.py starts it
for make interop, the sidecar as server/process.py starts it, with ``kafka.listen``); each is
measured while the other idles. Both are warmed up first by a round that is not counted: every
case once on each (the broker's JIT, the sidecar's first-request paths).

Producer cases: acks=1 and acks=all (the tool's default idempotence: on with acks=all) x 100 and
1,000-byte records x batch.size default (16 KiB) and 1 MiB, linger.ms 5, no compression, one
partition, ``--throughput -1``; a bounded number of records a case (``--mb`` of payload). Figures
are the tool's own final line: records/s, MB/s, p50, p99. Consumer cases: ConsumerPerformance reads
the acks=1 default-batch topic of each record size from the start in a new group: its MB/s
overall, its fetch-only MB/s and its rebalance (group join) time. Each case runs ``--rounds``
times alternating which server goes first; the median is reported.

The tools and both servers share this machine's 2 cores, and a tool's client is often what limits
the run: then the throughput ratio says more about the client's share of the CPU than about the
server. So each run also records the CPU time the server process used (user + system, from
/proc/PID/stat) and the tables give it per MB moved: the work a server does for the same bytes.
Beside it, each producer row gives the tool's own CPU time (user + system of its JVM, from the
kernel's accounting of the reaped child) and how much of it went to the JVM's JIT compiler
threads and to the producer's network thread, Kafka's Sender, which sends the requests and reads
the answers (their /proc/PID/task counters, read every 0.1 s while the tool runs, so the last
tenth of a second may be missing): every run is a fresh JVM whose JIT compiles the client's paths
while it produces, on the same 2 cores as the server, and the same work of those threads can take
more CPU time when the server shares their cores. The tool prints its producer's metrics at the
end (``--print-metrics``), and each producer row gives two of them: the select() calls of its
network thread per request sent (how often it woke for the server's answers) and its average
request latency.

With ``--pin`` both servers run on one core of their own (the last; every thread, as
``sched_setaffinity`` of each task) and the tools on the others, so that a server is measured
with the core it would have in a deployment, not with what the tool leaves it; its results go
to kafka_perf_pinned.md (+ .svg) and its lines name the pinning.

With ``--warm-tool`` only the default-batch producer cases run, each in a JVM that runs
ProducerPerformance twice (bench/WarmProducerPerformance.java: the same arguments, a new producer
each pass); the first pass warms the tool's JIT and is not counted, the figures are the second
pass's own final line (the server's CPU is counted over both passes, the tool's over its whole
JVM: both passes and java compiling the launcher from source). Results: kafka_perf_warm.md
(+ .svg), lines named "tool JIT warm".

With ``--cgroups`` each server and the tools run in a cpu cgroup of their own with equal weights,
as the containers of a pod run (kafka_tools.CpuGroups; root): the kernel then shares the 2 cores
between the three groups, and only inside a group between its threads. Without it, the kernel
shares them thread by thread, so the tool's JVM (its main thread, its network thread, its JIT and
GC threads) and the broker's many threads each weigh as much as the sidecar's one. Results:
kafka_perf_cgroups.md (+ .svg), lines named "own cgroups". ``--warm-tool --cgroups`` does both
(kafka_perf_warm_cgroups.md): the warm tool leaves the server the largest share of a row.

Each ratio is the medians' ratio; beside it, the lowest and highest ratio of one round's two runs
(the servers run back to back in a round), how far the host moved it between rounds.

Every comparison prints one line: ``side-by-side <case>: logkeeper <x> MB/s, kafka <y> MB/s,
ratio <r>x``. Results: bench/results/kafka_perf.md (+ kafka_perf.svg, the ratios as bars).

Run: ``make bench-kafka`` or ``.venv/bin/python bench/bench_kafka_perf.py [--mb 100] [--rounds 3]
[--pin | --warm-tool] [--cgroups]``
(--cgroups not with --pin).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.kafka_tools import (  # noqa: E402
    MIB,
    PERF_JVM_OPTS,
    WARM_PASSES,
    Consumed,
    CpuGroups,
    Produced,
    ProducerCase,
    consume,
    create_topic,
    pin_process,
    produce,
    run_tools_in,
    run_tools_on,
    with_server_cpu,
)
from bench.side_by_side import date_and_commit, machine_line, parse_bench_args, side_by_side_line, svg_bars  # noqa: E402
from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import Broker, fetch_kafka  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka_perf.md"
SERVERS = ("logkeeper", "kafka")

@dataclass(frozen=True)
class Variant:
    """A way of running the cases: where its results go and how its title, lines and load line
    name it."""

    results: str  # the results file's name without .md (the plot: + .svg)
    title: str  # "" or ", ..." after the page's and the plot's title
    line_suffix: str  # "" or ", ..." after each printed line's case
    placement: str  # where the tools and servers run, for the load line
    warm_tool: bool = False


SHARED_CORES = "tools, server and the idle other server share the 2 cores"
# (results-file suffix, title, line suffix, placement) of the two ways a shared-cores run can differ
WARM = ("_warm", ", the tool's JIT warm", ", tool JIT warm",
        f"; each producer run a JVM running ProducerPerformance {WARM_PASSES} times "
        "(bench/WarmProducerPerformance.java), the last pass counted")
GROUPS = ("_cgroups", ", each process in a cpu cgroup of its own", ", own cgroups",
          "; each server and the tools in a cpu cgroup of their own, equal weights (as a pod's containers "
          "are): the kernel shares the cores between the three groups, not between their threads")


def variant_of(*, warm_tool: bool, cgroups: bool) -> Variant:
    """The shared-cores variants: plain, the tool's JIT warm, each process in a cpu cgroup of its
    own, or both (results kafka_perf[_warm][_cgroups])."""
    parts = [part for on, part in ((warm_tool, WARM), (cgroups, GROUPS)) if on]
    suffix, title, line, placement = ("".join(field) for field in zip(*parts)) if parts else ("", "", "", "")
    return Variant("kafka_perf" + suffix, title, line, SHARED_CORES + placement, warm_tool=warm_tool)


UNPINNED = variant_of(warm_tool=False, cgroups=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="payload MB a producer case (bounds its records)")
    ap.add_argument("--rounds", type=int, default=3)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--pin", action="store_true", help="the servers on the last core, the tools on the others")
    mode.add_argument("--warm-tool", action="store_true",
                      help="the default-batch producer cases only, the tool's JIT warmed by a first pass in its JVM")
    ap.add_argument("--cgroups", action="store_true",
                    help="each server and the tools in a cpu cgroup of their own (root); with --warm-tool too")
    args, command = parse_bench_args(ap, "bench_kafka_perf.py", argv)
    if args.cgroups and args.pin:
        ap.error("--cgroups and --pin are two ways of placing the processes: one at a time")
    server_cpus: set[int] | None = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            ap.error(f"--pin needs 2 CPUs, this process has {len(cpus)}")
        server_cpus = {cpus[-1]}
        run_tools_on(set(cpus[:-1]))
        variant = Variant("kafka_perf_pinned", ", each server on a core of its own", ", server on its own core",
                          f"servers pinned to CPU {cpus[-1]}, the tools to CPU {', '.join(map(str, cpus[:-1]))} "
                          "(every thread)")
    else:
        variant = variant_of(warm_tool=args.warm_tool, cgroups=args.cgroups)
    cases = [ProducerCase(acks, size, batch) for acks in ("1", "all") for size in (100, 1000) for batch in (None, MIB)
             if not (variant.warm_tool and batch is not None)]
    passes = WARM_PASSES if variant.warm_tool else 1
    dist = fetch_kafka()
    groups = CpuGroups(["tools", *SERVERS]) if args.cgroups else None  # fails early: no root, no controller
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-perf-"))
    produced: dict[tuple[str, str], list[Produced]] = {}
    consumed: dict[tuple[str, str], list[Consumed]] = {}
    loads: list[float] = []
    started = time.monotonic()
    try:
        broker = Broker(dist, work / "kafka", {"num.partitions": 1})
        broker.format()
        broker.start()
        sidecar = SidecarProcess(work / "sidecar", {"sidecar": {"kafka.listen": ["127.0.0.1:0"],
                                   # as the harness's broker (group.initial.rebalance.delay.ms 0): same parameters
                                   "group.initial.rebalance.delay.ms": 0}}).start()
        try:
            bootstrap = {"logkeeper": sidecar.kafka_bootstrap, "kafka": broker.bootstrap}
            assert sidecar.proc is not None and broker.proc is not None
            pids = {"logkeeper": sidecar.proc.pid, "kafka": broker.proc.pid}
            if server_cpus is not None:
                for pid in pids.values():
                    pin_process(pid, server_cpus)
            if groups is not None:
                for server, pid in pids.items():
                    groups.join(server, pid)
                run_tools_in(groups.procs("tools"))
            for case in cases:
                for server in SERVERS:
                    create_topic(dist, bootstrap[server], case.topic)
            # round -1 warms both up and is not counted: every case once on each server (Kafka's
            # JIT compiles each case's paths over its first runs: kafka_perf.md's reading)
            for r in range(-1, args.rounds):
                counted = r >= 0
                label = f"round {r}" if counted else "warm-up"
                for case in cases:
                    records = args.mb * 1_000_000 // case.record_bytes
                    for server in (SERVERS if r % 2 == 0 else SERVERS[::-1]):
                        p, cpu = with_server_cpu(pids[server], records * case.record_bytes * passes / 1e6,
                                                 produce, dist, bootstrap[server], case, records, variant.warm_tool)
                        p = replace(p, server_cpu_ms_per_mb=cpu)
                        if counted:
                            produced.setdefault((case.name, server), []).append(p)
                        print(f"{label}: {server}: {case.name}: {p.records_per_s:,.0f} rec/s {p.mb_per_s:.1f} MB/s "
                              f"p50 {p.p50_ms:.0f} ms p99 {p.p99_ms:.0f} ms, "
                              f"server CPU {p.server_cpu_ms_per_mb:.1f} ms/MB, tool CPU {p.tool_cpu_s:.1f} s "
                              f"(JIT {p.tool_jit_s:.1f} s, sender {p.tool_sender_s:.1f} s), "
                              f"{p.selects_per_request:.1f} selects a request, request latency "
                              f"{p.request_latency_ms:.1f} ms", flush=True)
                if counted:
                    loads.append(os.getloadavg()[0])
                for size in () if variant.warm_tool else (100, 1000):
                    topic = ProducerCase("1", size, None).topic
                    records = args.mb * 1_000_000 // size * (r + 2)  # every round (the warm-up too) appended that many
                    for server in (SERVERS if r % 2 == 0 else SERVERS[::-1]):
                        c, cpu = with_server_cpu(pids[server], records * size / 1e6,
                                                 consume, dist, bootstrap[server], topic, records)
                        c = replace(c, server_cpu_ms_per_mb=cpu)
                        if counted:
                            consumed.setdefault((f"consume {size} B", server), []).append(c)
                        print(f"{label}: {server}: consume {size} B: {c.mb_per_s:.1f} MB/s, join {c.join_ms:.0f} ms, "
                              f"fetch {c.fetch_mb_per_s:.1f} MB/s, "
                              f"server CPU {c.server_cpu_ms_per_mb:.1f} ms/MB", flush=True)
        finally:
            sidecar.stop()
            broker.stop()
    finally:
        if groups is not None:
            groups.close()
        shutil.rmtree(work, ignore_errors=True)
    text, bars, lines = report(command, args, dist.version, cases, produced, consumed, loads,
                               time.monotonic() - started, variant)
    results, plot = RESULTS.with_name(f"{variant.results}.md"), RESULTS.with_name(f"{variant.results}.svg")
    results.write_text(text)
    plot.write_text(svg_bars(f"logkeeper / Kafka 4.1.2, Kafka's perf tools (MB/s ratio; 1 = parity){variant.title}",
                             bars))
    print("\n".join(lines))
    print(f"(written to {results.relative_to(REPO)} and {plot.relative_to(REPO)})")
    return 0


def _med(values: list[float]) -> float:
    return statistics.median(values)


def _spread(ratios: list[float]) -> str:
    """" (lowest-highest)" of the rounds' ratios; nothing for one round."""
    return f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""


def _cpu(runs: list[Produced] | list[Consumed]) -> str:
    return f"{_med([r.server_cpu_ms_per_mb for r in runs]):.1f}"


def _tool(runs: list[Produced]) -> str:
    return (f"{_med([r.tool_cpu_s for r in runs]):.1f} ({_med([r.tool_jit_s for r in runs]):.1f}, "
            f"{_med([r.tool_sender_s for r in runs]):.1f})")


def _wakeups(runs: list[Produced]) -> str:
    return f"{_med([r.selects_per_request for r in runs]):.1f}, {_med([r.request_latency_ms for r in runs]):.1f}"


def report(command: str, args: argparse.Namespace, version: str, cases: list[ProducerCase],
           produced: dict[tuple[str, str], list[Produced]], consumed: dict[tuple[str, str], list[Consumed]],
           loads: list[float], seconds: float,
           variant: Variant = UNPINNED) -> tuple[str, list[tuple[str, float]], list[str]]:
    suffix = variant.line_suffix
    lines: list[str] = []
    bars: list[tuple[str, float]] = []
    rows = []
    met = cheaper = 0
    for case in cases:
        lk, kf = produced[(case.name, "logkeeper")], produced[(case.name, "kafka")]
        lk_mb, kf_mb = _med([p.mb_per_s for p in lk]), _med([p.mb_per_s for p in kf])
        lk_p99, kf_p99 = _med([p.p99_ms for p in lk]), _med([p.p99_ms for p in kf])
        spread = _spread([a.mb_per_s / b.mb_per_s for a, b in zip(lk, kf, strict=True)])
        lines.append(side_by_side_line(case.name + suffix, lk_mb, kf_mb))
        bars.append((case.name.removeprefix("produce "), lk_mb / kf_mb))
        ok = lk_mb >= kf_mb and lk_p99 <= kf_p99
        met += ok
        lk_cpu, kf_cpu = _med([p.server_cpu_ms_per_mb for p in lk]), _med([p.server_cpu_ms_per_mb for p in kf])
        cheaper += lk_cpu <= kf_cpu
        rows.append(f"| {case.name} | {_med([p.records_per_s for p in lk]):,.0f} "
                    f"| {_med([p.records_per_s for p in kf]):,.0f} "
                    f"| {lk_mb:.1f} | {kf_mb:.1f} | **{lk_mb / kf_mb:.2f}x**{spread} "
                    f"| {_med([p.p50_ms for p in lk]):.0f} / {_med([p.p50_ms for p in kf]):.0f} "
                    f"| {lk_p99:.0f} / {kf_p99:.0f} | {'yes' if ok else 'no'} "
                    f"| {lk_cpu:.1f} / {kf_cpu:.1f} | {_tool(lk)} / {_tool(kf)} | {_wakeups(lk)} / {_wakeups(kf)} |")
    crow = []
    for size in (100, 1000) if consumed else ():
        name = f"consume {size} B"
        clk, ckf = consumed[(name, "logkeeper")], consumed[(name, "kafka")]
        lk_mb, kf_mb = _med([c.mb_per_s for c in clk]), _med([c.mb_per_s for c in ckf])
        lk_f, kf_f = _med([c.fetch_mb_per_s for c in clk]), _med([c.fetch_mb_per_s for c in ckf])
        spread = _spread([a.mb_per_s / b.mb_per_s for a, b in zip(clk, ckf, strict=True)])
        lines.append(side_by_side_line(name + suffix, lk_mb, kf_mb))
        lines.append(side_by_side_line(f"{name} fetch only{suffix}", lk_f, kf_f))
        bars.append((name, lk_mb / kf_mb))
        crow.append(f"| {name} | {_med([c.records_per_s for c in clk]):,.0f} "
                    f"| {_med([c.records_per_s for c in ckf]):,.0f} "
                    f"| {lk_mb:.1f} | {kf_mb:.1f} | **{lk_mb / kf_mb:.2f}x**{spread} | {lk_f:.1f} / {kf_f:.1f} "
                    f"| {_med([c.join_ms for c in clk]):.0f} / {_med([c.join_ms for c in ckf]):.0f} "
                    f"| {_cpu(clk)} / {_cpu(ckf)} |")
    detail = []
    for (name, server), ps in sorted(produced.items()):
        detail.append(f"- {server}, {name}: " + "; ".join(
            f"{p.mb_per_s:.1f} MB/s p99 {p.p99_ms:.0f} ms CPU {p.server_cpu_ms_per_mb:.1f} ms/MB, "
            f"tool CPU {p.tool_cpu_s:.1f} s (JIT {p.tool_jit_s:.1f} s, sender {p.tool_sender_s:.1f} s), "
            f"{p.selects_per_request:.1f} selects a request, request latency {p.request_latency_ms:.1f} ms"
            for p in ps))
    for (name, server), cs in sorted(consumed.items()):
        detail.append(f"- {server}, {name}: " + "; ".join(f"{c.mb_per_s:.1f} MB/s join {c.join_ms:.0f} ms "
                                                          f"CPU {c.server_cpu_ms_per_mb:.1f} ms/MB" for c in cs))
    text = "\n".join([
        "# Kafka's perf tools against the sidecar and against Apache Kafka"
        + variant.title,
        "",
        f"- command: `{command}` (`make bench-kafka`)",
        date_and_commit(),
        f"- machine: {machine_line()}",
        f"- tools: org.apache.kafka:kafka-tools:{version} ProducerPerformance / ConsumerPerformance, JVM "
        f"{' '.join(PERF_JVM_OPTS)}; broker: Apache Kafka {version}, one KRaft node on 127.0.0.1 (make interop's)",
        f"- load: {args.mb} MB of payload a producer case (100 B: {args.mb * 10_000:,} records; 1,000 B: "
        f"{args.mb * 1000:,}), one partition, linger.ms 5, no compression, `--throughput -1`; both servers "
        f"warmed up first (a round of every case, not counted); median of {args.rounds} rounds, "
        "servers alternating first; " + variant.placement,
        f"- 1-minute load average after each round: {', '.join(f'{x:.1f}' for x in loads)}; whole run {seconds:.0f} s",
        "",
        f"![ratios]({variant.results}.svg)",
        "",
        "| case | logkeeper rec/s | Kafka rec/s | logkeeper MB/s | Kafka MB/s | ratio (rounds' range) "
        "| p50 ms (lk / kafka) "
        "| p99 ms (lk / kafka) | >= 1x and p99 <= | server CPU ms per MB (lk / kafka) "
        "| tool CPU s (of it: JIT compiler threads, producer network thread) (lk / kafka) "
        "| the producer's selects a request, its request latency ms (lk / kafka) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
        *rows,
        "",
        f"Target (>= 1x the broker's MB/s and <= its p99): met on {met} of {len(cases)} producer rows. "
        f"The sidecar's CPU per MB at or below the broker's (the server's own share of a row, which the "
        f"tool's CPU outweighs on 2 cores): on {cheaper} of {len(cases)}.",
        "",
        *(["| case | logkeeper rec/s | Kafka rec/s | logkeeper MB/s | Kafka MB/s | ratio (rounds' range) "
            "| fetch-only MB/s (lk / kafka) | group join ms (lk / kafka) | server CPU ms per MB (lk / kafka) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *crow, ""] if crow else []),
        "The lines `make bench-kafka` printed:",
        "",
        "```",
        *lines,
        "```",
        "",
        "Every round:",
        "",
        *detail,
        "",
    ])
    return text, bars, lines


if __name__ == "__main__":
    raise SystemExit(main())
