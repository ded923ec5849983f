"""The standard error of the Spark JVM the job starts, relayed, with its last lines kept.

Why: pyspark starts its JVM (spark-submit) with this process's standard error, and when the JVM
exits before it starts (a bad ``spark.driver.memory``, no Java, a class path that does not load)
pyspark says only "Java gateway process exited before sending its port number". The JVM's own
words ("Invalid maximum heap size: -Xmxlots") went to the log alone, so the failure reason the
job leaves (failure.json, and from there the sidecar's status and the CompactionJob's) did not
say what to fix. The JVM now writes to a pipe whose bytes a thread copies to this process's
standard error as they come, unchanged, keeping the last lines for that reason.
"""

from __future__ import annotations

import collections
import os
import threading

KEPT_LINES = 20


class SparkStartError(RuntimeError):
    """Spark's JVM exited before it started; the message ends with its last lines."""


class JvmOutput:
    """``write_fd`` goes to the JVM as its standard error; ``close_writer()`` once it has been
    started (the JVM holds its own copy); ``last_lines()`` after it exited."""

    def __init__(self, relay_to: int = 2) -> None:
        self._read_fd, self.write_fd = os.pipe()
        self._relay_to = relay_to
        self._lines: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._partial = b""
        self._thread = threading.Thread(target=self._relay, name="spark-jvm-stderr", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _relay(self) -> None:
        try:
            while chunk := os.read(self._read_fd, 65536):
                self._write(chunk)
                *whole, partial = (self._partial + chunk).split(b"\n")
                self._partial = partial[-4096:]  # a line that never ends is kept bounded
                self._lines.extend(line.decode("utf-8", "replace").rstrip() for line in whole)
        finally:
            os.close(self._read_fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._relay_to, view):]
        except OSError:
            pass  # a closed standard error must not stall the JVM: keep reading

    def last_lines(self, n: int = 5, timeout_s: float = 5.0) -> list[str]:
        """The last ``n`` non-blank lines, once the JVM's end of the pipe closed (it exited)."""
        self.close_writer()
        self._thread.join(timeout_s)
        lines = [*self._lines, self._partial.decode("utf-8", "replace").rstrip()]
        return [line for line in lines if line.strip()][-n:]
