"""Offset checkpoint files of a log directory.

``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint`` share one text format::

    0                      <- version
    2                      <- number of entries
    my-topic 0 1234        <- topic, partition, offset (one line an entry)
    my-topic 1 99

Written crash-safely (fileio.replace_file_durably): to ``<name>.tmp``, fsynced, renamed over the old
file, directory fsynced.
A file that does not parse raises CorruptCheckpointError naming the file and line. As in Kafka's
CheckpointFile, an empty file (a broker creates ``cleaner-offset-checkpoint`` so) or one with only
the version line holds no entries.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from ..errors import LogkeeperError
from ..fileio import replace_file_durably
from .names import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
VERSION = 0


class CorruptCheckpointError(LogkeeperError):
    pass


class OffsetCheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(VERSION), str(len(offsets))]
        lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in offsets.items()]
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            replace_file_durably(self.path, data)

    def read(self) -> dict[TopicPartition, int]:
        """The entries; an empty dict when the file does not exist."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        lines = text.splitlines()

        def bad(line_no: int, why: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"checkpoint {self.path} line {line_no}: {why}")

        if not lines:
            return {}  # as Kafka reads it: a broker creates cleaner-offset-checkpoint empty
        if lines[0].strip() != str(VERSION):
            raise bad(1, f"unsupported version {lines[0].strip()!r}")
        if len(lines) == 1:
            return {}  # a version and no count: Kafka reads no entries too
        try:
            count = int(lines[1])
        except (IndexError, ValueError):
            raise bad(2, "missing or bad entry count") from None
        entries = lines[2:]
        if len(entries) != count:
            raise bad(2, f"says {count} entries, the file has {len(entries)}")
        out: dict[TopicPartition, int] = {}
        for i, line in enumerate(entries, start=3):
            parts = line.split()
            if len(parts) != 3:
                raise bad(i, f"expected 'topic partition offset', got {line!r}")
            try:
                out[TopicPartition(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise bad(i, f"bad partition or offset in {line!r}") from None
        return out
