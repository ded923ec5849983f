"""A connection flood on the sidecar's Kafka listener over loopback; the sidecar's RSS from /proc
before, during and after (issue 17 point 5).

The sidecar runs as a subprocess (server/process.py) with ``kafka.listen: 127.0.0.1:0`` and the
listener's limits at their defaults unless ``--max-connections`` is given. Each phase opens
``--connections`` non-blocking TCP connections as fast as loopback takes them, then, for
``--seconds`` seconds, keeps them open while it samples the RSS every 0.1 s:

- ``idle``: connections that send nothing;
- ``partial``: each sends a frame header claiming ``--claim-mib`` MiB and then as much of the
  body as the socket accepts, up to ``--body-mib`` MiB a connection (the attack of issue 17 point 5;
  what it cost before and after the fix: bench/results/kafka_flood.md);
- ``oversized``: each sends a header of 200 MiB (above socket.request.max.bytes) and 1 MiB of body.

Between phases every connection is closed and the RSS is read after 2 s. After the last phase
a Produce and a Fetch over a fresh connection show that the listener still serves. Every loop is
bounded in count and time; loopback only. Results: bench/results/kafka_flood.md (command, date,
machine, figures). ``--pythonpath DIR`` runs the sidecar from another copy of the package (e.g.
``git archive`` of an older commit) to compare, written to the same file under its label.

Run: ``.venv/bin/python bench/bench_kafka_flood.py [--connections 1000] [--seconds 5]``
"""

from __future__ import annotations

import argparse
import datetime
import errno
import os
import platform
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from logkeeper.records.builder import Record, build_batch
from logkeeper.server.process import KAFKA_LISTENING, SidecarProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.kafka_wire import WireClient, fetch_body

RESULTS = Path(__file__).parent / "results" / "kafka_flood.md"
MIB = 1 << 20


def open_many(host: str, port: int, count: int, deadline: float) -> list[socket.socket]:
    out: list[socket.socket] = []
    while len(out) < count and time.monotonic() < deadline:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            time.sleep(0.01)
            continue
        out.append(s)
    return out


def push(socks: list[socket.socket], first: bytes, body_bytes: int, deadline: float) -> int:
    """Send ``first`` then up to ``body_bytes`` of zeros on each socket, without blocking; bytes sent."""
    chunk = b"\0" * (256 * 1024)
    sent = dict.fromkeys(range(len(socks)), 0)
    header_left = {i: first for i in range(len(socks))}
    total = 0
    while time.monotonic() < deadline:
        progress = False
        for i, s in enumerate(socks):
            try:
                if header_left[i]:
                    n = s.send(header_left[i])
                    header_left[i] = header_left[i][n:]
                    total += n
                    progress = progress or n > 0
                    continue
                want = min(len(chunk), body_bytes - sent[i])
                if want <= 0:
                    continue
                n = s.send(chunk[:want])
                sent[i] += n
                total += n
                progress = progress or n > 0
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                header_left[i] = b""
                sent[i] = body_bytes  # closed by the server
        if not progress:
            time.sleep(0.05)
            if all(not h for h in header_left.values()) and all(v >= body_bytes for v in sent.values()):
                break
    return total


def closed_by_server(socks: list[socket.socket]) -> int:
    closed = 0
    for s in socks:
        try:
            data = s.recv(1)
            closed += data == b""
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            closed += 1
    return closed


def sample(proc: SidecarProcess, seconds: float) -> list[int]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(proc.rss_bytes())
        time.sleep(0.1)
    return out


def still_serves(bootstrap: str) -> bool:
    """A Produce to ``flood``-0 and a Fetch of that record, on a fresh connection."""
    wire = WireClient(bootstrap, timeout_s=10)
    try:
        now = int(time.time() * 1000)
        got = wire.call(0, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [{"name": "flood", "partition_data": [
            {"index": 0, "records": build_batch([Record(0, now, b"k", b"after the flood")])}]}]})
        produced = got["responses"][0]["partition_responses"][0]
        fetched = wire.call(1, 11, fetch_body("flood", MIB, offset=max(0, produced["base_offset"]), min_bytes=0))
        return produced["error_code"] == 0 and b"after the flood" in fetched["responses"][0]["partitions"][0]["records"]
    except (OSError, ConnectionError):
        return False
    finally:
        wire.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long each phase holds its connections")
    ap.add_argument("--claim-mib", type=int, default=100)
    ap.add_argument("--body-mib", type=int, default=4)
    ap.add_argument("--max-connections", type=int, default=0, help="kafka.max.connections (0: the default)")
    ap.add_argument("--pythonpath", default="", help="run the sidecar from this copy of the package")
    ap.add_argument("--label", default="this commit")
    ap.add_argument("--tls", action="store_true", help="flood an SSL:// listener (connections that never "
                    "finish the handshake); needs the openssl command")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.connections <= 5000 or args.seconds > 60:
        ap.error("--connections 1-5000 and --seconds up to 60: the flood stays bounded")
    sidecar_keys: dict[str, Any] = {"kafka.listen": ["127.0.0.1:0"]}
    if args.max_connections:
        sidecar_keys["kafka.max.connections"] = args.max_connections
    env = {"PYTHONPATH": args.pythonpath} if args.pythonpath else None
    rows: list[tuple[str, int, int, int, int, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", f"{tmp}/key.pem", "-out", f"{tmp}/cert.pem", "-days", "1",
                            "-subj", "/CN=localhost"], check=True, capture_output=True, timeout=60)
            sidecar_keys.update({"kafka.listen": ["127.0.0.1:0", "SSL://127.0.0.1:0"],
                                 "kafka.ssl.certificate.location": f"{tmp}/cert.pem",
                                 "kafka.ssl.key.location": f"{tmp}/key.pem"})
        proc = SidecarProcess(Path(tmp) / "sidecar", {"sidecar": sidecar_keys, "topics": {"flood": {"partitions": 1}}},
                              env=env)
        with proc:
            rows, serves, out = flood(args, proc)
    if not args.no_write:
        write_results(args, rows, serves, out)
    return 0


def flood(args: argparse.Namespace, proc: SidecarProcess) -> tuple[list[tuple[str, int, int, int, int, str]],
                                                                      bool, str]:
    rows: list[tuple[str, int, int, int, int, str]] = []
    found = KAFKA_LISTENING.findall(proc.output())
    plain, target = found[0], found[-1]  # with --tls the flood goes to the SSL listener
    host, port_text = target.rsplit(":", 1)
    port = int(port_text)
    time.sleep(1.0)
    base = proc.rss_bytes()
    print(f"RSS at rest: {base / MIB:.1f} MiB", flush=True)
    phases = [
        ("idle", b"", 0),
        ("partial", struct.pack(">i", args.claim_mib * MIB), args.body_mib * MIB),
        ("oversized", struct.pack(">i", 200 * MIB), MIB),
    ]
    for name, first, body in phases:
        t0 = time.monotonic()
        socks = open_many(host, port, args.connections, t0 + 20)
        sent = push(socks, first, body, t0 + args.seconds) if first else 0
        during = sample(proc, max(0.5, args.seconds - (time.monotonic() - t0)))
        closed = closed_by_server(socks)
        for s in socks:
            s.close()
        time.sleep(2.0)
        after = proc.rss_bytes()
        note = f"{len(socks)} opened, {closed} closed by the sidecar, {sent / MIB:.0f} MiB sent"
        rows.append((name, len(socks), base, max(during), after, note))
        print(f"{name}: RSS max during {max(during) / MIB:.1f} MiB, after {after / MIB:.1f} MiB ({note})",
              flush=True)
    serves = still_serves(plain)
    print(f"serves after the flood: {serves}")
    return rows, serves, proc.output()


def write_results(args: argparse.Namespace, rows: list[tuple[str, int, int, int, int, str]], serves: bool,
                  output: str) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cmd = shlex.join(["bench/bench_kafka_flood.py", *(sys.argv[1:])])
    lines = [
        f"## {args.label}: {args.connections} connections a phase, {args.seconds:.0f} s each",
        "",
        f"- command: `.venv/bin/python {cmd}`",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, tip {commit}",
        f"- machine: nproc {os.cpu_count()}, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}",
        f"- kafka.max.connections: {args.max_connections or 'default'}; listener flooded: "
        f"{'SSL (connections that never finish the TLS handshake)' if args.tls else 'PLAINTEXT'}",
        "",
        "| phase | connections | RSS before MiB | RSS max during MiB | RSS after MiB | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, n, base, during, after, note in rows:
        lines.append(f"| {name} | {n} | {base / MIB:.1f} | {during / MIB:.1f} | {after / MIB:.1f} | {note} |")
    refused = output.count("refusing connections")
    lines += ["", f"Produce and Fetch on a fresh connection after the flood: {'served' if serves else 'FAILED'}. "
              f"Refusal lines logged (at most one a second): {refused}.", "", ""]
    title = "# bench_kafka_flood: connection floods on the Kafka listener\n\n"
    text = RESULTS.read_text() if RESULTS.exists() else title
    RESULTS.write_text(text + "\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
