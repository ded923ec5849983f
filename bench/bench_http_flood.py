"""RSS of a real sidecar process under a loopback connection flood of its HTTP port (issue 17
point 5): before, during (sampled, and the kernel's high-water mark VmHWM) and after, from /proc.

    .venv/bin/python bench/bench_http_flood.py [--idle 2000] [--slow-headers 500] [--partial-bodies 300]
                                                [--full-bodies 32] [--sidecar key=value ...]

Phases, one after the other, every connection held until the end of the flood:
  idle            connections that send nothing
  slow-headers    connections that send half a request head and stop
  partial-bodies  authenticated produce requests declaring max.request.bytes that send 1 MiB of it
                  and stop (the memory-heavy case: without a bound each would hold its body)
  full-bodies     authenticated produce requests of 256 KiB sent whole (served while the rest is held)
Then every connection is closed and RSS read again after a pause; --rounds repeats the flood on
the same process (RSS that the allocator kept from one round is reused by the next). Loopback only; every phase
is bounded in count and in time (PHASE_BOUND_S). ``--sidecar http.max.connections=100000
--sidecar http.queued.max.request.bytes=2147483648`` shows what the bounds buy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from logkeeper.server.process import SidecarProcess

MIB = 1024 * 1024
PHASE_BOUND_S = 30.0
SETTLE_S = 3.0


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0]) * (1024 if key != "Threads" else 1)
    return out


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


class Flood:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token
        self.held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.refused = 0  # answered 503 too_many_connections
        self.failed = 0   # could not connect at all

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
        except (OSError, TimeoutError):
            self.failed += 1
            return None
        self.held.append(conn)
        return conn

    async def phase(self, count: int, first_bytes: bytes, then: bytes = b"") -> None:
        deadline = time.monotonic() + PHASE_BOUND_S
        for _ in range(count):
            if time.monotonic() > deadline:
                break
            conn = await self.connect()
            if conn is None:
                continue
            conn[1].write(first_bytes)
            if then:
                conn[1].write(then)
                try:
                    await asyncio.wait_for(conn[1].drain(), 2)
                except (TimeoutError, ConnectionError):
                    pass  # the sidecar reads no more of it (the budget): the rest waits in the kernel
        await asyncio.sleep(0.5)

    async def count_refusals(self) -> None:
        async def refused(reader: asyncio.StreamReader) -> bool:
            try:
                return (await asyncio.wait_for(reader.read(64), 0.5)).startswith(b"HTTP/1.1 503")
            except (TimeoutError, ConnectionError):
                return False
        self.refused = sum(await asyncio.gather(*(refused(r) for r, _w in self.held)))

    async def full_bodies(self, count: int, size: int) -> list[int]:
        body = b'{"records": [{"value": "' + b"v" * (size - 30) + b'"}]}'
        head = (f"POST /v1/topics/flood/partitions/0/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                f"{self.token}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()

        async def one() -> int:
            conn = await self.connect()
            if conn is None:
                return 0
            conn[1].write(head + body)
            try:
                line = await asyncio.wait_for(conn[0].readline(), PHASE_BOUND_S)
                return int(line.split()[1]) if line else 0
            except (TimeoutError, ConnectionError, ValueError, IndexError):
                return 0
        return list(await asyncio.gather(*(one() for _ in range(count))))

    def close(self) -> None:
        for _r, w in self.held:
            w.transport.abort()
        self.held.clear()


async def flood(proc: SidecarProcess, args: argparse.Namespace, first: bool = True) -> dict[str, Any]:
    assert proc.proc is not None
    pid = proc.proc.pid
    port = int(proc.base_url.rsplit(":", 1)[1])
    samples: list[int] = []
    stop = asyncio.Event()

    async def sampler() -> None:
        while not stop.is_set():
            samples.append(proc_status(pid)["VmRSS"])
            await asyncio.sleep(0.2)

    if first:
        proc.client.json("POST", "/v1/topics", {"name": "flood", "partitions": 1}, expect=201)
    proc.client.produce("flood", 0, [{"value": "warm-up"}])
    time.sleep(SETTLE_S)
    before = proc_status(pid)
    out: dict[str, Any] = {"before": before, "fds_before": open_fds(pid)}
    task = asyncio.ensure_future(sampler())
    f = Flood(port, proc.token)
    started = time.monotonic()
    await f.phase(args.idle, b"")
    out["after_idle"] = proc_status(pid)
    await f.phase(args.slow_headers, b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    out["after_slow_headers"] = proc_status(pid)
    declared = args.declared_bytes
    head = (f"POST /v1/topics/flood/partitions/0/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {proc.token}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n").encode()
    await f.phase(args.partial_bodies, head, b'{"records": [{"value": "' + b"v" * (MIB - 25))
    out["after_partial_bodies"] = proc_status(pid)
    statuses = await f.full_bodies(args.full_bodies, 256 * 1024)  # under max.message.bytes
    out["full_bodies_status"] = {str(s): statuses.count(s) for s in sorted(set(statuses))}
    out["during"] = proc_status(pid)
    out["fds_during"] = open_fds(pid)
    await f.count_refusals()
    out["connections_attempted"] = len(f.held) + f.failed
    out["refused_503_seen"] = f.refused
    out["connect_failed"] = f.failed
    f.close()
    out["flood_s"] = round(time.monotonic() - started, 1)
    await asyncio.sleep(SETTLE_S)
    stop.set()
    await task
    out["after"] = proc_status(pid)
    out["fds_after"] = open_fds(pid)
    out["rss_peak_sampled"] = max(samples) if samples else 0
    out["healthz_after"] = proc.client.request("GET", "/healthz")[0]
    return out


RESULTS = Path(__file__).parent / "results" / "http_flood.md"
UNBOUNDED = {"http.max.connections": "100000", "http.queued.max.request.bytes": str(2 * 1024 * MIB)}


def run_one(settings: dict[str, str], args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="logkeeper-flood-") as root:
        if args.keep:
            root = args.keep
        with SidecarProcess(root, {"sidecar": settings}) as proc:
            results = []
            for n in range(1, args.rounds + 1):
                result = asyncio.run(flood(proc, args, first=n == 1))
                result["settings"], result["round"] = settings, n
                mib = {k: round(v["VmRSS"] / MIB, 1) for k, v in result.items()
                       if isinstance(v, dict) and "VmRSS" in v}
                print(json.dumps(result, indent=1))
                print(f"round {n}: RSS MiB: {mib}; sampled peak {result['rss_peak_sampled'] / MIB:.1f}; "
                      f"VmHWM {result['after']['VmHWM'] / MIB:.1f}", file=sys.stderr)
                results.append(result)
            return results


def write_results(args: argparse.Namespace, bounded: list[dict[str, Any]], unbounded: list[dict[str, Any]]) -> None:
    """The defaults against the same flood with the limits raised out of the way, one run."""
    import platform
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    flood_desc = (f"{args.idle} idle, {args.slow_headers} slow-header, {args.partial_bodies} stalled "
                  f"{args.declared_bytes // 1024} KiB bodies (1 MiB sent), {args.full_bodies} produces of 256 KiB")
    lines = ["# HTTP connection flood: resident memory of the sidecar (issue 17 point 5)", "",
             f"{time.strftime('%Y-%m-%d')}, commit {commit}, {platform.machine()}, "
             f"`.venv/bin/python bench/bench_http_flood.py --results --rounds {args.rounds}`", "",
             f"Flood per round: {flood_desc}; loopback, every phase bounded in count and time. RSS from "
             "/proc (VmRSS; peak: sampled every 0.2 s and the kernel's VmHWM).", "",
             "| settings | round | before MiB | peak sampled MiB | VmHWM MiB | after MiB | open fds during | "
             "produces answered | /healthz after |", "|---|---|---|---|---|---|---|---|---|"]
    for name, results in (("defaults", bounded), ("limits out of the way (baseline)", unbounded)):
        for r in results:
            lines.append(f"| {name} | {r['round']} | {r['before']['VmRSS'] / MIB:.1f} | "
                         f"{r['rss_peak_sampled'] / MIB:.1f} | {r['after']['VmHWM'] / MIB:.1f} | "
                         f"{r['after']['VmRSS'] / MIB:.1f} | {r['fds_during']} | {r['full_bodies_status']} | "
                         f"{r['healthz_after']} |")
    peak_b = max(r["rss_peak_sampled"] for r in bounded)
    peak_u = max(r["rss_peak_sampled"] for r in unbounded)
    lines += ["", f"Peak RSS, defaults / baseline: {peak_b / MIB:.1f} / {peak_u / MIB:.1f} MiB = "
                  f"{peak_b / peak_u:.2f}x. With the defaults the flood holds every connection slot "
                  "(http.max.connections per address), so the produces sent during it are refused with 503 "
                  "and the process stays at its resting size; /healthz answers once the flood ends.", ""]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_http_flood")
    p.add_argument("--idle", type=int, default=2000)
    p.add_argument("--slow-headers", type=int, default=500)
    p.add_argument("--partial-bodies", type=int, default=300)
    p.add_argument("--full-bodies", type=int, default=32)
    p.add_argument("--declared-bytes", type=int, default=4 * MIB - 1024, help="Content-Length of a partial body")
    p.add_argument("--rounds", type=int, default=1, help="floods one after the other, on one sidecar")
    p.add_argument("--keep", default="", help="run in this directory and keep it (the sidecar's output)")
    p.add_argument("--sidecar", action="append", default=[], metavar="KEY=VALUE", help="a sidecar setting")
    p.add_argument("--results", action="store_true",
                   help=f"run the defaults and the same flood with the limits out of the way; write {RESULTS.name}")
    args = p.parse_args(argv)
    settings = dict(kv.split("=", 1) for kv in args.sidecar)
    if not args.results:
        run_one(settings, args)
        return 0
    write_results(args, run_one(settings, args), run_one({**settings, **UNBOUNDED}, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
