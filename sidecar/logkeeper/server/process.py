"""A sidecar run as a subprocess, and a small blocking HTTP client for it (the demo, tests, benchmarks).

``SidecarProcess(root, config)`` writes ``root/sidecar.yaml`` (the given sections; the token file,
``listen: 127.0.0.1:0`` and, unless given, ``node.log.dirs = [root/data]`` filled in) and a random
token in ``root/token``, then ``start()`` runs ``python -m logkeeper.cli sidecar --config ...``
with its output in ``root/sidecar.out``, reads the port from the ``listening on`` line and waits
for ``ready``. ``stop()`` sends SIGTERM and waits (bounded); ``kill()`` sends SIGKILL.
Loopback only.

``SidecarClient(base_url, token)``: JSON requests with the bearer token; ``request`` returns
(status, headers, body bytes) and never raises on an HTTP status.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
KAFKA_LISTENING = re.compile(r"listening on kafka://(\S+)")


class SidecarError(RuntimeError):
    """The sidecar process did not start or stop as expected; the message has its output's tail."""


class SidecarClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: bytes | None = None, *, content_type: str | None = None,
                headers: dict[str, str] | None = None, auth: bool = True) -> tuple[int, dict[str, str], bytes]:
        h = dict(headers or {})
        if content_type is not None:
            h["Content-Type"] = content_type
        if auth and self.token is not None:
            h.setdefault("Authorization", f"Bearer {self.token}")
        req = urllib.request.Request(self.base_url + path, data=body, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()

    def json(self, method: str, path: str, doc: Any = None, *, expect: int | tuple[int, ...] = (200, 201, 204),
             auth: bool = True) -> Any:
        body = None if doc is None else json.dumps(doc).encode()
        status, _h, data = self.request(method, path, body, content_type="application/json" if body else None,
                                        auth=auth)
        wanted = (expect,) if isinstance(expect, int) else expect
        if status not in wanted:
            raise SidecarError(f"{method} {path} answered {status}: {data[:500]!r}")
        return json.loads(data) if data else None

    def produce(self, topic: str, partition: int, records: list[dict[str, Any]], *, flush: bool = False,
                encoding: str = "utf-8") -> dict[str, Any]:
        q = "?flush=true" if flush else ""
        result: dict[str, Any] = self.json("POST", f"/v1/topics/{topic}/partitions/{partition}/records{q}",
                                           {"records": records, "encoding": encoding})
        return result

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              encoding: str = "utf-8") -> dict[str, Any]:
        result: dict[str, Any] = self.json(
            "GET", f"/v1/topics/{topic}/partitions/{partition}/records?offset={offset}&max_bytes={max_bytes}"
                   f"&encoding={encoding}")
        return result

    def fetch_all(self, topic: str, partition: int, encoding: str = "utf-8") -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = self.json("GET", f"/v1/topics/{topic}/partitions/{partition}/offsets")["log_start_offset"]
        while True:
            page = self.fetch(topic, partition, offset, encoding=encoding)
            out.extend(page["records"])
            if page["next_offset"] >= page["log_end_offset"] or page["next_offset"] == offset:
                return out
            offset = page["next_offset"]

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json("GET", "/v1/status")
        return result


class SidecarProcess:
    def __init__(self, root: str | os.PathLike[str], config: dict[str, Any] | None = None, *,
                 env: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path = self.root / "sidecar.yaml"
        self.token_path = self.root / "token"
        self.out_path = self.root / "sidecar.out"
        self.token = secrets.token_hex(16)
        self.token_path.write_text(self.token + "\n")
        doc = json.loads(json.dumps(config or {}))  # a deep copy
        doc.setdefault("sidecar", {})
        doc["sidecar"].setdefault("listen", ["127.0.0.1:0"])
        doc["sidecar"]["token.file"] = str(self.token_path)
        doc.setdefault("node", {}).setdefault("log.dirs", [str(self.root / "data")])
        self.config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.client = SidecarClient("http://127.0.0.1:1", self.token)

    @property
    def log_dirs(self) -> list[Path]:
        doc = yaml.safe_load(self.config_path.read_text())
        return [Path(p) for p in doc["node"]["log.dirs"]]

    @property
    def kafka_bootstrap(self) -> str:
        """host:port of the Kafka listener (the latest start's), for clients' bootstrap.servers."""
        found = KAFKA_LISTENING.findall(self.output())
        if not found:
            raise self._fail("the sidecar printed no Kafka listener address (is kafka.listen set?)")
        return str(found[-1])

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _fail(self, why: str) -> SidecarError:
        return SidecarError(f"{why}; sidecar output:\n{self.output()[-4000:]}")

    def start(self, timeout_s: float = 120.0) -> SidecarProcess:
        start_mark = len(self.output())
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logkeeper.cli", "sidecar", "--config",
                                          str(self.config_path)], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env)
        self.base_url = ""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.output()[start_mark:]
            m = LISTENING.search(text)
            if m and not self.base_url:
                self.base_url = m.group(1)
                self.client = SidecarClient(self.base_url, self.token)
            if m and "logkeeper sidecar: ready" in text:
                return self
            if self.proc.poll() is not None:
                raise self._fail(f"the sidecar exited with status {self.proc.returncode} while starting")
            time.sleep(0.05)
        raise self._fail(f"the sidecar was not ready within {timeout_s} s")

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then wait; the exit status."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise self._fail(f"the sidecar did not stop within {timeout_s} s of SIGTERM") from None
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def rss_bytes(self) -> int:
        """Resident memory of the process (from /proc), 0 when not running."""
        if self.proc is None:
            return 0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return 0
        return 0

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None:
            try:
                self.stop()
            except SidecarError:
                pass
