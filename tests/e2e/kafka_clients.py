"""A stock Kafka client (confluent-kafka: librdkafka) against the sidecar's Kafka listener in its
pod, as an application in the cluster would reach it: the pod's address on the node's bridge,
which is also what the listener advertises in its metadata answers."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka as ck

TIMEOUT_S = 60.0


def produce(bootstrap: str, topic: str, partition: int, records: list[tuple[str, str]]) -> None:
    """Produce ``records`` (key, value) with acks=all and idempotence; raise on any record the
    listener did not acknowledge. Batches stay small: the step's topic has 16 KiB segments, and a
    batch must fit in one (as in Kafka)."""
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.key()!r}: {err}")

    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "batch.num.messages": 50, "message.timeout.ms": int(TIMEOUT_S * 1000)})
    for key, value in records:
        producer.produce(topic, value=value.encode(), key=key.encode(), partition=partition, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    assert left == 0 and not failed, f"{left} records unacknowledged, failed: {failed[:5]}"


def read_partition(bootstrap: str, topic: str, partition: int, group: str) -> tuple[list[tuple[str, str]], int]:
    """Every record of ``topic``-``partition`` from its start up to its high watermark, read with
    Fetch requests, as (key, value); the group's offset is committed at the end and read back
    (the listener's group coordinator). Returns the records and the committed offset."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    try:
        tp = ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)
        high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)[1]
        consumer.assign([tp])
        out: list[tuple[str, str]] = []
        last = -1
        deadline = time.monotonic() + TIMEOUT_S
        while last < high - 1:
            assert time.monotonic() < deadline, f"read to offset {last} of {topic}-{partition}, high watermark {high}"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.key().decode(), msg.value().decode()))
            last = msg.offset()
        consumer.commit(offsets=[ck.TopicPartition(topic, partition, last + 1)], asynchronous=False)
        committed = consumer.committed([ck.TopicPartition(topic, partition)], timeout=TIMEOUT_S)[0].offset
        assert committed == last + 1, f"committed {last + 1} for group {group}, read back {committed}"
        return out, committed
    finally:
        consumer.close()
