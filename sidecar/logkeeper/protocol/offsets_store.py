"""Committed consumer-group offsets, kept in the compacted internal topic ``__consumer_offsets``.

Records are Kafka's own (so Kafka's tools can read the topic)::

    key    version int16 = 1  · group string · topic string · partition int32
    value  version int16 = 3  · offset int64 · leader_epoch int32 · metadata string ·
           commit_timestamp int64
    (a null value, a tombstone, removes the key; keys of version 2, group metadata written by a
    Kafka broker, are skipped when loading)

A group's records go to partition ``abs(java_hash(group)) % partitions`` (Kafka's choice), one
batch a commit. The topic is created at the listener's start when missing, with
``offsets.topic.num.partitions`` partitions, ``cleanup.policy=compact`` and 100 MiB segments
(Kafka's offsets.topic.segment.bytes); the cleaner keeps the latest commit of every key.
``load()`` reads every partition from its start at the listener's start (latest record wins,
tombstones delete). Commits are not fsynced one by one (as in Kafka: flush.ms decides).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import numpy as np

from ..log.names import TopicPartition
from ..records.builder import Record, build_batch
from ..records.reader import iter_batches
from ..server.service import Sidecar
from .group_messages import OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE
from .primitives import MalformedError, Reader, Writer

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": ["compact"], "segment.bytes": 100 * 1024 * 1024}
KEY_VERSION = 1
VALUE_VERSION = 3
READ_CHUNK_BYTES = 4 * 1024 * 1024
_VERSION = struct.Struct(">h")

OffsetKey = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    return (java_string_hash(group) & 0x7FFFFFFF) % partitions


def encode_key(group: str, topic: str, partition: int) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    OFFSET_COMMIT_KEY.encode(w, {"group": group, "topic": topic, "partition": partition}, KEY_VERSION)
    return bytes(w.buf)


def encode_value(c: CommittedOffset) -> bytes:
    w = Writer()
    w.int16(VALUE_VERSION)
    OFFSET_COMMIT_VALUE.encode(w, {"offset": c.offset, "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                                   "commit_timestamp": c.commit_timestamp}, VALUE_VERSION)
    return bytes(w.buf)


def decode_record(key: bytes, value: bytes | None) -> tuple[OffsetKey, CommittedOffset | None] | None:
    """The offset key and value (None: a tombstone) of a record; None for other record kinds."""
    r = Reader(key)
    version = r.int16()
    if version not in (0, 1):
        return None
    k = OFFSET_COMMIT_KEY.decode(r, version)
    okey = (k["group"], k["topic"], k["partition"])
    if value is None:
        return okey, None
    vr = Reader(value)
    vversion = vr.int16()
    if not 0 <= vversion <= 4:
        raise MalformedError(f"offset commit value version {vversion}")
    v = OFFSET_COMMIT_VALUE.decode(vr, vversion)
    return okey, CommittedOffset(v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])


class OffsetsStore:
    """Blocking: call from the I/O pool."""

    def __init__(self, sidecar: Sidecar, num_partitions: int) -> None:
        self.sidecar = sidecar
        self.num_partitions = num_partitions

    def ensure_topic(self) -> int:
        """Create the topic when missing; return its partition count (the one on disk wins)."""
        existing = self.sidecar.manager.logs_by_topic(OFFSETS_TOPIC)
        for tp in self.sidecar.manager.offline_partitions():
            if tp.topic == OFFSETS_TOPIC:  # never made again elsewhere: the commits are there
                self.sidecar.manager.raise_if_offline(tp)
        if not existing:
            self.sidecar.create_topic(OFFSETS_TOPIC, self.num_partitions, OFFSETS_TOPIC_CONFIGS)
            log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
            return self.num_partitions
        self.num_partitions = len(existing)
        return self.num_partitions

    def load(self) -> dict[OffsetKey, CommittedOffset]:
        self.ensure_topic()
        out: dict[OffsetKey, CommittedOffset] = {}
        skipped = 0
        for lg in sorted(self.sidecar.manager.logs_by_topic(OFFSETS_TOPIC), key=lambda x: x.topic_partition.partition):
            tp = lg.topic_partition
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                data = self.sidecar.manager.read(tp, offset, READ_CHUNK_BYTES).read_bytes
                if not data:
                    break
                for batch in iter_batches(np.frombuffer(data, dtype=np.uint8)):
                    offset = max(offset, batch.header.base_offset + batch.header.last_offset_delta + 1)
                    if batch.header.is_control:
                        continue
                    for rec in batch.records:
                        if rec.offset < lg.log_start_offset or rec.key is None:
                            continue
                        try:
                            got = decode_record(rec.key, rec.value)
                        except MalformedError as e:
                            skipped += 1
                            log.warning("%s offset %d: undecodable offset record skipped: %s", tp, rec.offset, e)
                            continue
                        if got is None:
                            continue
                        okey, committed = got
                        if committed is None:
                            out.pop(okey, None)
                        else:
                            out[okey] = committed
        log.info("loaded %d committed offsets from %s (%d records skipped)", len(out), OFFSETS_TOPIC, skipped)
        return out

    def append(self, group: str, entries: list[tuple[str, int, CommittedOffset | None]], now_ms: int) -> None:
        """Write one batch of commits (None: a tombstone) of ``group``."""
        if not entries:
            return
        records = [Record(i, now_ms, encode_key(group, topic, partition),
                          None if c is None else encode_value(c))
                   for i, (topic, partition, c) in enumerate(entries)]
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, self.num_partitions))
        self.sidecar.produce(tp, build_batch(records), flush=False)
