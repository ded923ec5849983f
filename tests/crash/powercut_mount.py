"""Mounting the power-cut file system (powercut_fs.py) for the crash tests.

The daemon runs in a forked process (``Daemon``) so that libfuse's loop and signal handlers stay
out of the test process; it starts from the files of a real directory (all durable), and answers
one command on its pipe: ``cut SEED TORN OUTDIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import mfusepy

from tests.crash.powercut_fs import PowerCutFS, load_tree


class _FUSE(mfusepy.FUSE):
    """mfusepy's FUSE, with the file handle of an ``ftruncate`` passed on (libfuse 3 gives it;
    mfusepy drops it): the file may be unlinked, so its path would not find it."""

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        return self.operations.truncate(None if path is None else path.decode(self.encoding, self.errors),
                                        length, fh)


def fuse_available() -> str | None:
    """None when a FUSE mount can work here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if mfusepy.fuse_version_major != 3 and mfusepy.fuse_version_major != 2:
        return "no libfuse"
    if not any(os.path.exists(os.path.join(d, "fusermount3")) or os.path.exists(os.path.join(d, "fusermount"))
               for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)):
        return "no fusermount"
    return None


def _fusermount() -> str:
    for name in ("fusermount3", "fusermount"):
        for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    raise RuntimeError("no fusermount")


def _daemon_main(image: Path, mountpoint: Path, cmd_fd: int, reply_fd: int) -> None:  # pragma: no cover
    fs = PowerCutFS(load_tree(image), on_ready=lambda: os.write(reply_fd, b"ready\n"))

    def control() -> None:
        buf = b""
        while True:
            chunk = os.read(cmd_fd, 4096)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                _cmd, seed, torn, out = line.decode().split(" ", 3)
                try:
                    reply = fs.cut(int(seed), torn == "1", Path(out))
                except BaseException as e:  # report it: the test fails with it
                    reply = {"error": "".join(traceback.format_exception(e))}
                os.write(reply_fd, json.dumps(reply).encode() + b"\n")

    threading.Thread(target=control, daemon=True).start()
    # single-threaded loop: requests are handled in the order the kernel sends them;
    # zero timeouts: the kernel asks again rather than trusting what it saw
    _FUSE(fs, str(mountpoint), foreground=True, nothreads=True, hard_remove=True, attr_timeout=0,
          entry_timeout=0, negative_timeout=0, fsname="powercut")


class Daemon:
    """A forked FUSE daemon serving ``image`` (real files, all durable) at ``mountpoint``."""

    def __init__(self, image: Path, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        cmd_r, self._cmd_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the daemon
            code = 0
            try:
                os.close(self._cmd_w)
                os.close(self._reply_r)
                _daemon_main(image, mountpoint, cmd_r, reply_w)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                code = 3
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(reply_w)
        self._buf = b""
        self.mounted = False
        line = self._read_line(10.0)
        if line != "ready":
            self.stop()
            raise RuntimeError(f"FUSE daemon did not start: {line!r}")
        self.mounted = True

    def _read_line(self, timeout_s: float) -> str:
        import select

        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reply_r], [], [], left)[0]:
                return "timeout"
            chunk = os.read(self._reply_r, 65536)
            if not chunk:
                return "eof"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def cut(self, seed: int, torn: bool, out: Path) -> dict[str, Any]:
        """Cut the power now; the durable image goes to ``out``. Returns what the cut dropped."""
        os.write(self._cmd_w, f"cut {seed} {int(torn)} {out}\n".encode())
        line = self._read_line(120.0)
        reply: dict[str, Any] = json.loads(line) if line.startswith("{") else {"error": line}
        if "error" in reply:
            raise RuntimeError(f"cut failed: {reply['error']}")
        return reply

    def stop(self) -> None:
        """Unmount and reap the daemon (after every process using the mount is gone)."""
        subprocess.run([_fusermount(), "-u", "-z", str(self.mountpoint)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(self._cmd_w)
        deadline = time.monotonic() + 10
        while True:
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.002)
        os.close(self._reply_r)
        self.mounted = False
