"""Kafka's file and directory names inside a log directory.

A partition directory is ``<topic>-<partition>``; special forms append ``.<uuid hex>-delete``
(queued for deletion), ``-stray`` or ``-future``. Segment files are named by their base offset
zero-padded to 20 digits with the suffixes below; a temporary suffix (``.cleaned``, ``.swap``,
``.deleted``) is appended after the file's own suffix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SEGMENT_SUFFIXES = (LOG_SUFFIX, *INDEX_SUFFIXES)
TEMP_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
FUTURE_DIR_SUFFIX = "-future"

_TOPIC_PARTITION = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SPECIAL = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uuid>[0-9a-f]{32})(?P<kind>-delete|-stray|-future)$")
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def segment_file(directory: Path, offset: int, suffix: str, temp_suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{suffix}{temp_suffix}"


def log_file(directory: Path, offset: int, temp_suffix: str = "") -> Path:
    return segment_file(directory, offset, LOG_SUFFIX, temp_suffix)


def offset_from_file_name(name: str) -> int:
    """The base offset a segment file name starts with."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not a segment file name")
    return int(prefix)


def strip_temp_suffix(name: str) -> str:
    for suffix in TEMP_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class TopicPartition(NamedTuple):
    """A topic's partition: ``topic-partition`` in names and lines."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return str(self)

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        m = _TOPIC_PARTITION.match(text)
        if not m:
            raise ValueError(f"{text!r} is not of the form <topic>-<partition>")
        return cls(m.group("topic"), int(m.group("partition")))


def validate_topic(topic: str) -> None:
    if topic in (".", "..") or not _LEGAL_TOPIC.match(topic):
        raise ValueError(
            f"illegal topic name {topic!r}: 1-249 characters of ASCII letters, digits, '.', '_', '-'"
        )


class PartitionDirName(NamedTuple):
    """A parsed partition directory name: plain, or a -delete/-stray/-future form."""

    topic_partition: TopicPartition
    kind: str  # "", "-delete", "-stray" or "-future"

    @classmethod
    def parse(cls, name: str) -> PartitionDirName:
        m = _SPECIAL.match(name)
        if m:
            tp = TopicPartition(m.group("topic"), int(m.group("partition")))
            return cls(tp, m.group("kind"))
        return cls(TopicPartition.parse(name), "")


def special_dir_name(tp: TopicPartition, kind: str) -> str:
    """``<topic>-<partition>.<uuid hex><kind>`` for kind -delete, -stray or -future."""
    import uuid  # only here: its import (platform probing) costs more than every other use of this module

    return f"{tp}.{uuid.uuid4().hex}{kind}"
