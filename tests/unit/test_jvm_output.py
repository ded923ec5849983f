"""JvmOutput: the Spark JVM's standard error relayed as it comes, its last lines kept for the
failure reason of a JVM that exits before it starts (the real JVM: tests/spark/test_spark_start.py)."""

from __future__ import annotations

import os
import subprocess

from logkeeper.spark.jvm_output import KEPT_LINES, JvmOutput


def test_relays_every_byte_and_keeps_the_last_lines() -> None:
    read_end, relay_end = os.pipe()
    output = JvmOutput(relay_to=relay_end)
    script = 'for i in $(seq 1 30); do echo "line $i" >&2; done; echo >&2; printf "no newline" >&2; exit 1'
    proc = subprocess.Popen(["sh", "-c", script], stderr=output.write_fd)
    output.close_writer()  # the child holds its own copy
    assert proc.wait(10) == 1
    assert output.last_lines(3) == ["line 29", "line 30", "no newline"]  # blank lines skipped
    assert len(output.last_lines(100)) <= KEPT_LINES + 1
    os.close(relay_end)
    relayed = b""
    while chunk := os.read(read_end, 65536):
        relayed += chunk
    os.close(read_end)
    assert relayed == b"".join(b"line %d\n" % i for i in range(1, 31)) + b"\nno newline"


def test_a_silent_process_leaves_no_lines() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        output = JvmOutput(relay_to=devnull)
        subprocess.run(["true"], stderr=output.write_fd, check=True)
        assert output.last_lines() == []
    finally:
        os.close(devnull)
