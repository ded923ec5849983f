"""``logkeeper sidecar --config FILE``: the process, on top of both front ends (the HTTP API of
server/ and the Kafka listener of protocol/), which is why it is not inside either package.

1. The config file is loaded (config.py; exit 2 with one line naming the file and key when it
   is wrong), each log dir checked (log_dir_rule.py: a missing or empty one is made a log dir, a
   dir holding anything else is refused with exit 2 and left untouched unless
   ``--create-log-dirs``) and the token file read (exit 2 when unreadable or empty).
2. The HTTP server listens at once (``listening on http://HOST:PORT`` is printed per address,
   with the port taken when the config says 0), at most http.max.connections connections on
   each (http_limits.py): /healthz answers, /readyz and the data endpoints answer 503
   not_ready while
3. the Sidecar starts in a thread of its own (service.py: locks, recovery, cleaner threads).
   Then, when ``kafka.listen`` names addresses, the Kafka listener loads the committed offsets
   and listens (``listening on kafka://HOST:PORT`` per address; protocol/listener.py).
   ``ready`` is printed when it is done; a failure (e.g. a log directory locked by another
   process, or none usable) is printed and the process exits 1.
4. SIGTERM or SIGINT: not ready; the Kafka listener closes (requests in flight get up to half a
   second, then their connections are closed), the HTTP listeners close and requests in flight
   get up to a quarter of shutdown.timeout.ms to finish; the cleaner threads stop; every log is flushed and closed,
   the checkpoints and the clean-shutdown markers are written (``LogManager.shutdown``); exit 0.
   A watchdog bounds the whole at shutdown.timeout.ms: past it the process exits 3 without
   waiting (no marker is written, so the next start recovers: nothing flushed is lost).

After SIGKILL nothing of this runs: the next start finds no marker and recovers every
partition from its recovery point (LogManager); records acknowledged after a flush are kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web

from .errors import InvalidConfigError
from .log_dir_rule import NotALogDirError, check_sidecar_log_dir, prepare_sidecar_log_dir
from .protocol.listener import KafkaListener
from .protocol.listener_metrics import ListenerCollector
from .server.auth import TokenFile
from .server.config import SidecarConfig, load_config
from .server.heap import keep_large_buffers
from .server.http_api import Api, build_app
from .server.http_limits import READ_BUFSIZE, ConnectionLimit, LimitedSite
from .server.service import Sidecar

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_START_FAILED = 1
EXIT_BAD_CONFIG = 2
EXIT_SHUTDOWN_TIMEOUT = 3


def run(config_path: str, *, environ: Mapping[str, str] | None = None, out: TextIO | None = None,
        create_log_dirs: bool = False) -> int:
    out = out if out is not None else sys.stdout  # looked up now: a default bound at import goes stale
    try:
        config = load_config(config_path, environ)
        for d in config.log_dirs:  # every one before any is written: a wrong path is refused untouched
            check_sidecar_log_dir(Path(d), create=create_log_dirs)
    except (InvalidConfigError, NotALogDirError) as e:
        print(f"logkeeper sidecar: {e}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    token = TokenFile(config.sidecar.token_file)
    if not token.usable:
        print(f"logkeeper sidecar: {token.error}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    for d in config.log_dirs:  # only once every input is known good: a failed start touches nothing
        prepare_sidecar_log_dir(Path(d))
    log.info("allocator: %s", keep_large_buffers())  # before the buffers of fetches are made
    return asyncio.run(serve(config, token, out))


def _say(out: TextIO, text: str) -> None:
    out.write(f"logkeeper sidecar: {text}\n")
    out.flush()


def _watchdog(timeout_s: float, done: threading.Event) -> None:
    if not done.wait(timeout_s):
        log.critical("shutdown did not finish within %.1f s: exiting without the clean-shutdown marker", timeout_s)
        logging.shutdown()
        os._exit(EXIT_SHUTDOWN_TIMEOUT)


async def serve(config: SidecarConfig, token: TokenFile, out: TextIO) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    settings = config.sidecar
    sidecar = Sidecar(config)
    pool = ThreadPoolExecutor(settings.io_threads, thread_name_prefix="logkeeper-io")
    starter = ThreadPoolExecutor(1, thread_name_prefix="logkeeper-start")
    drain_s = settings.shutdown_timeout_ms / 4000.0
    # keepalive_timeout: aiohttp closes a connection that has no request in progress after it,
    # including one still sending its request line and headers (http_limits.py)
    api = Api(sidecar, settings, token, pool)
    runner = web.AppRunner(build_app(api), access_log=None, handle_signals=False,
                           shutdown_timeout=drain_s, keepalive_timeout=settings.http_connections_max_idle_ms / 1000.0,
                           read_bufsize=READ_BUFSIZE)
    await runner.setup()
    kafka = KafkaListener(sidecar, settings, pool) if settings.kafka_listen else None
    if kafka is not None:
        api.metrics.registry.register(ListenerCollector(kafka))
    try:
        for host, port in settings.listen_addresses:
            # a bound per address: a flood of the pod-network address leaves the loopback one
            # (the pod's own applications) its connections
            await LimitedSite(runner, host, port, ConnectionLimit(settings.http_max_connections)).start()
    except OSError as e:
        await runner.cleanup()
        print(f"logkeeper sidecar: cannot listen on {', '.join(settings.listen)}: {e}", file=sys.stderr)
        return EXIT_START_FAILED
    for addr in runner.addresses:
        host, port = addr[0], addr[1]
        _say(out, f"listening on http://{'[' + host + ']' if ':' in host else host}:{port}")
    started = loop.run_in_executor(starter, sidecar.start)
    stopping = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {started, stopping}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    code = EXIT_OK
    if started.done() and started.exception() is not None:
        err = started.exception()
        sidecar.start_error = f"{type(err).__name__}: {err}"
        print(f"logkeeper sidecar: cannot start: {err}", file=sys.stderr)
        code = EXIT_START_FAILED
    elif not stopping.done():
        if kafka is not None and not await _start_kafka(kafka, out):
            code = EXIT_START_FAILED
        else:
            _say(out, f"ready ({sidecar.partition_count} partitions)")
            await stopping
    stopping.cancel()
    _say(out, "stopping")
    done = threading.Event()
    threading.Thread(target=_watchdog, args=(settings.shutdown_timeout_ms / 1000.0, done), daemon=True,
                     name="logkeeper-shutdown-watchdog").start()
    begun = time.monotonic()
    sidecar.begin_stopping()
    if kafka is not None:
        await kafka.stop(drain_s)
    await runner.cleanup()
    await asyncio.to_thread(sidecar.shutdown)
    await _settle(started)  # a start still running sees the stop and returns
    pool.shutdown(wait=True)
    starter.shutdown(wait=True)
    done.set()
    _say(out, f"stopped in {time.monotonic() - begun:.2f} s")
    return code


async def _start_kafka(kafka: KafkaListener, out: TextIO) -> bool:
    """Load the committed offsets and open the Kafka listener (protocol/listener.py)."""
    try:
        addresses = await kafka.start()
    except OSError as e:
        print(f"logkeeper sidecar: cannot listen on kafka {', '.join(kafka.settings.kafka_listen)}: {e}",
              file=sys.stderr)
        return False
    except Exception as e:
        log.exception("the Kafka listener did not start")
        print(f"logkeeper sidecar: the Kafka listener did not start: {e}", file=sys.stderr)
        return False
    for host, port in addresses:
        _say(out, f"listening on kafka://{'[' + host + ']' if ':' in host else host}:{port}")
    return True


async def _settle(fut: asyncio.Future[None]) -> None:
    try:
        await fut
    except Exception:
        pass  # already reported
