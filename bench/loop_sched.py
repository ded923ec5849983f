"""Where the sidecar's event loop thread spends a ProducerPerformance run, as the scheduler sees it.

A study tool, not a benchmark with a results file (its figures and their reading are in
bench/results/design_figures.md, "connection"): one sidecar, Kafka's ProducerPerformance (acks=1,
100-byte records, the default batch) writing to it, and ``perf record -a`` of the scheduler's
context switches and of the loop's ``pwritev2`` calls (what ``os.pwritev`` is on this libc) and
``sendto`` calls (``socket.send``: the answers) over the last pass. It prints, for the loop thread
over that pass: the seconds on a CPU, runnable but waiting for one, and asleep (in epoll: nothing
to do), each also a request; each call's latency and, of those over 0.1 ms, how much of it the
thread spent switched out and in what state (R: preempted; D: waiting for the disk); and how
often the thread was preempted within 5 us of a call's return, which the call's own time does not
show (a send wakes the client's thread, which may take the CPU as the call returns). Root (perf,
cgroups); ``--cgroups --warm-tool`` is the pods' case of bench_kafka_perf.py.

    sudo .venv/bin/python bench/loop_sched.py [--mb 100] [--cgroups] [--warm-tool]
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.kafka_tools import WARM_PASSES, CpuGroups, ProducerCase, create_topic, produce, run_tools_in  # noqa: E402
from logkeeper.server.process import SidecarProcess  # noqa: E402
from tests.kafka.kafka_harness import fetch_kafka  # noqa: E402

SYSCALLS = {328: "pwritev", 44: "send"}  # x86-64: pwritev2, sendto
_NR = re.compile(r"NR (\d+)")
_EVENT = re.compile(r"\s*(\d+)\s+([\d.]+):\s+(\S+?):?\s+(.*)")
_SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=.* next_pid=(\d+)")


def trace(mb: int, cgroups: bool, warm: bool, work: Path) -> tuple[str, int, int]:
    """Run the sidecar and the tool; perf's script text of the traced run, the loop's tid, passes."""
    dist = fetch_kafka()
    groups = CpuGroups(["tools", "logkeeper"]) if cgroups else None
    sidecar = SidecarProcess(work / "sidecar", {"sidecar": {"kafka.listen": ["127.0.0.1:0"]}}).start()
    try:
        assert sidecar.proc is not None
        pid = sidecar.proc.pid  # the event loop runs on the main thread
        if groups is not None:
            groups.join("logkeeper", pid)
            run_tools_in(groups.procs("tools"))
        case = ProducerCase("1", 100, None)
        create_topic(dist, sidecar.kafka_bootstrap, case.topic)
        records = mb * 1_000_000 // case.record_bytes
        produce(dist, sidecar.kafka_bootstrap, case, records, warm)  # warms the sidecar; not traced
        data = work / "perf.data"
        ids = " || ".join(f"id == {nr}" for nr in SYSCALLS)
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-o", str(data), "-e", "sched:sched_switch",
                                 "-e", "raw_syscalls:sys_enter", "--filter", ids,
                                 "-e", "raw_syscalls:sys_exit", "--filter", ids],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # perf is recording
        p = produce(dist, sidecar.kafka_bootstrap, case, records, warm)
        perf.send_signal(signal.SIGINT)
        perf.wait()
        print(f"traced run: {p.mb_per_s:.1f} MB/s, p99 {p.p99_ms:.0f} ms")
    finally:
        sidecar.stop()
        if groups is not None:
            groups.close()
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,time,event,trace"],
                          capture_output=True, text=True, check=True).stdout
    return text, pid, WARM_PASSES if warm else 1


def report(text: str, loop: int, passes: int) -> list[str]:
    # each traced call of the loop, by name: (start, seconds, seconds switched out, switch-outs by state)
    calls: dict[str, list[tuple[float, float, float, Counter[str]]]] = {name: [] for name in SYSCALLS.values()}
    call: list[Any] | None = None  # the call in progress: [start, off-CPU s, states, switched out at, name]
    returned: tuple[float, str] | None = None  # the loop's last traced return: (time, call)
    preempted_after: Counter[str] = Counter()  # switched out runnable within 5 us of a call's return
    switches: list[tuple[float, str, str]] = []  # (time, "out" or "in", state)
    for line in text.splitlines():
        m = _EVENT.match(line)
        if m is None:
            continue
        tid, t, event, rest = int(m[1]), float(m[2]), m[3], m[4]
        if event.startswith("raw_syscalls:sys_enter") and tid == loop:
            nr = _NR.search(rest)
            call = [t, 0.0, Counter(), None, SYSCALLS.get(int(nr[1]) if nr else -1, "?")]
        elif event.startswith("raw_syscalls:sys_exit") and tid == loop and call is not None:
            calls.setdefault(call[4], []).append((call[0], t - call[0], call[1], call[2]))
            returned, call = (t, call[4]), None
        elif event.startswith("sched:sched_switch"):
            s = _SWITCH.search(rest)
            if s is None:
                continue
            prev, state, nxt = int(s[1]), s[2].rstrip("+"), int(s[3])
            if prev == loop:
                switches.append((t, "out", state))
                if call is not None:
                    call[2][state] += 1
                    call[3] = t
                elif state == "R" and returned is not None and t - returned[0] < 5e-6:
                    preempted_after[returned[1]] += 1
            elif nxt == loop:
                switches.append((t, "in", ""))
                if call is not None and call[3] is not None:
                    call[1] += t - call[3]
                    call[3] = None
    writes = calls["pwritev"]
    if not writes:
        return ["no pwritev of the loop thread was traced (perf could not see the syscalls?)"]
    # the last pass: its share of the pwritevs (one a request), from the first of them to the last
    n = len(writes) // passes
    lo, hi = writes[-n][0], writes[-1][0]
    spent: Counter[str] = Counter()
    state, at = "?", lo
    for t, way, st in switches:
        if t <= lo:
            state = "on CPU" if way == "in" else st
            continue
        if t > hi:
            break
        spent[state] += t - at
        state, at = ("on CPU" if way == "in" else st), t
    spent[state] += hi - at
    span = hi - lo
    names = {"on CPU": "on a CPU", "R": "runnable, waiting for a CPU", "S": "asleep", "D": "waiting for I/O"}
    lines = [f"the loop over the last pass: {n:,} requests in {span:.2f} s ({n / span:,.0f} a second)"]
    for key, seconds in spent.most_common():
        lines.append(f"  {names.get(key, key)}: {seconds:.2f} s ({seconds / span:.0%}), "
                     f"{seconds / n * 1e6:.0f} us a request")
    for name, done in calls.items():
        if not done:
            continue
        ms = sorted(c[1] * 1e3 for c in done)
        long = [c for c in done if c[1] > 1e-4]
        states: Counter[str] = Counter()
        for c in long:
            states.update(c[3])
        lines.append(f"{name} (all passes, {len(ms):,}): p50 {statistics.median(ms):.3f} ms, "
                     f"p99 {ms[int(0.99 * len(ms))]:.3f} ms, max {ms[-1]:.3f} ms; over 0.1 ms: {len(long)}, "
                     f"{sum(c[1] for c in long) * 1e3:.1f} ms of which switched out "
                     f"{sum(c[2] for c in long) * 1e3:.1f} ms (switch-outs by state: {dict(states) or 'none'}); "
                     f"preempted within 5 us of its return: {preempted_after[name]:,}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="payload MB a pass")
    ap.add_argument("--cgroups", action="store_true", help="the sidecar and the tool in cpu cgroups of their own")
    ap.add_argument("--warm-tool", action="store_true", help="the tool's JIT warmed by a first pass in its JVM")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="loop-sched-") as tmp:
        text, loop, passes = trace(args.mb, args.cgroups, args.warm_tool, Path(tmp))
    print("\n".join(report(text, loop, passes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
