"""protocol/handlers_data.py's produce: a one-partition request is appended on the event loop
when the append is quick (Log.try_append), and on an I/O thread otherwise; both answer alike."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from logkeeper.log.names import TopicPartition
from logkeeper.protocol import handlers_data
from logkeeper.protocol.listener_metrics import ListenerFigures
from logkeeper.records.batch_format import ATTRIBUTES_OFFSET
from logkeeper.records.compression import Codec
from logkeeper.server.service import ProduceResult

RESULT = ProduceResult(5, 7, 3, 1, 8, False, 0, log_start_offset=0)


class FakeSidecar:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.calls: list[str] = []

    def try_produce(self, tp: TopicPartition, data: bytes) -> ProduceResult | None:
        self.calls.append("quick")
        return RESULT if self.quick else None

    def produce(self, tp: TopicPartition, data: bytes, *, flush: bool) -> ProduceResult:
        self.calls.append("thread")
        return RESULT


class FakeContext:
    def __init__(self, sidecar: FakeSidecar) -> None:
        self.sidecar = sidecar
        self.figures = ListenerFigures()

    async def run(self, fn: Any, *args: Any) -> Any:
        self.sidecar.calls.append("run")
        return fn(*args)


def request(partitions: int, size: int = 100, codec: Codec = Codec.NONE) -> dict[str, Any]:
    records = bytearray(b"x" * size)
    records[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = int(codec).to_bytes(2, "big")  # the batch's codec bits
    return {"acks": 1, "transactional_id": None, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": p, "records": bytes(records)}
                                                            for p in range(partitions)]}]}


SMALL_COMPRESSED = handlers_data.INLINE_COMPRESSED_BYTES


@pytest.mark.parametrize(("quick", "partitions", "size", "codec", "calls"), [
    (True, 1, 100, Codec.NONE, ["quick"]),                                  # on the event loop
    (False, 1, 100, Codec.NONE, ["quick", "run", "thread"]),                # it would wait: on a thread
    (True, 2, 100, Codec.NONE, ["run", "thread", "thread"]),                # several partitions: a thread
    (True, 1, handlers_data.INLINE_PRODUCE_BYTES + 1, Codec.NONE, ["run", "thread"]),  # big: a thread
    (True, 1, SMALL_COMPRESSED, Codec.GZIP, ["quick"]),                     # small and compressed: the loop
    (True, 1, SMALL_COMPRESSED + 1, Codec.ZSTD, ["run", "thread"]),         # its inflation: a thread
])
def test_where_a_produce_is_appended(quick: bool, partitions: int, size: int, codec: Codec,
                                     calls: list[str]) -> None:
    sidecar = FakeSidecar(quick)
    ctx = FakeContext(sidecar)
    answer = asyncio.run(handlers_data.produce(ctx, None, request(partitions, size, codec), 9))  # type: ignore[arg-type]
    assert sidecar.calls == calls
    assert ctx.figures.bytes_in == {"t": partitions * size}  # /metrics' record bytes in, wherever appended
    parts = answer["responses"][0]["partition_responses"]  # type: ignore[index]
    assert [(p["index"], p["error_code"], p["base_offset"]) for p in parts] == [(p, 0, 5) for p in range(partitions)]
