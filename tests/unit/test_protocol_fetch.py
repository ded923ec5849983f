"""protocol/handlers_data.py's fetch: when it waits for data and when it answers at once; and the
append notifier that wakes a waiting fetch."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from logkeeper.log import page_cache
from logkeeper.log.file_records import FileRecords, RecordsSlice, WouldBlock
from logkeeper.log.names import TopicPartition
from logkeeper.log.segment import FetchData
from logkeeper.protocol import handlers_data
from logkeeper.protocol import messages as m
from logkeeper.protocol.context import AppendNotifier, Connection
from logkeeper.protocol.framing import SplicedFrame, answer_frame, response_frame
from logkeeper.protocol.listener_metrics import ListenerFigures
from logkeeper.protocol.memory_pool import MemoryPool
from logkeeper.records.builder import Record, build_batch

BATCH = build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * 100)])


class FakeManager:
    def __init__(self, records: FileRecords) -> None:
        self.records = records

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, *, max_offset: int | None,
             min_one_batch: bool, whole_batches: bool, cached_only: bool, zero_copy: bool) -> FetchData:
        assert not whole_batches  # the listener reads slices, as Kafka's LogSegment.read
        if zero_copy:
            return FetchData(0, self.records.slice(0, max_bytes, cached_only=cached_only))
        if cached_only:
            return FetchData(0, self.records.read_cached(0, max_bytes, 1))
        return FetchData(0, self.records.read(0, max_bytes))


class FakeNotifier:
    def __init__(self) -> None:
        self.waits = 0

    async def wait(self, tps: list[TopicPartition], timeout_s: float) -> None:
        self.waits += 1
        await asyncio.sleep(0)


class FakeContext:
    def __init__(self, records: FileRecords) -> None:
        log = SimpleNamespace(log_end_offset=1, last_stable_offset=1, log_start_offset=0,
                              segments=SimpleNamespace(values=lambda start, end: [], count=lambda start, end: 0))
        self.sidecar = SimpleNamespace(partition_log=lambda tp: log, manager=FakeManager(records), stopping=False)
        self.settings = SimpleNamespace(fetch_max_bytes=1 << 20)
        self.notifier = FakeNotifier()
        self.responses = MemoryPool(64 << 20)
        self.figures = ListenerFigures()
        self.runs = 0

    async def run(self, fn: Any, *args: Any) -> Any:
        self.runs += 1
        return fn(*args)


given_to_connection: list[int] = []  # what the fetches gave the connection to release once written
CONN = Connection("client", "127.0.0.1", 9092, None, hold=given_to_connection.append)


def request(partitions: int, max_wait_ms: int = 500) -> dict[str, Any]:
    return {"isolation_level": 0, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "t", "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                                      for p in range(partitions)]}] if partitions else []}


@pytest.fixture
def records(tmp_path: Path) -> Iterator[FileRecords]:
    f = FileRecords(tmp_path / "00000000000000000000.log")
    f.append(BATCH)
    yield f
    f.close()


def test_a_fetch_of_no_partitions_answers_at_once(records: FileRecords) -> None:
    """Regression: with nothing to wait on, the wait returned at once and the loop spun, reading
    again and again until max_wait_ms (Kafka's consumer sends such a fetch; Kafka answers it at
    once). It cost a ConsumerPerformance run most of the sidecar's CPU."""
    ctx = FakeContext(records)
    answer = asyncio.run(handlers_data.fetch(ctx, CONN, request(0, max_wait_ms=60_000), 12))  # type: ignore[arg-type]
    assert answer["responses"] == []
    assert ctx.notifier.waits == 0 and ctx.runs == 0  # nothing to read: answered on the loop


def test_a_fetch_of_records_answers_at_once(records: FileRecords) -> None:
    ctx = FakeContext(records)
    answer = asyncio.run(handlers_data.fetch(ctx, CONN, request(1, max_wait_ms=60_000), 12))  # type: ignore[arg-type]
    assert [bytes(p["records"]) for t in answer["responses"] for p in t["partitions"]] == [BATCH]
    assert ctx.notifier.waits == 0
    assert ctx.runs == 0  # cached and at most INLINE_FETCH_BYTES: read on the event loop


def _records_of(answer: dict[str, Any]) -> list[bytes]:
    return [bytes(p["records"]) for t in answer["responses"] for p in t["partitions"]]


def test_a_fetch_that_would_wait_for_the_disk_is_read_on_a_thread(records: FileRecords,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def not_cached(position: int, size: int, at_least: int) -> memoryview:
        raise WouldBlock("not cached")

    monkeypatch.setattr(records, "read_cached", not_cached)
    ctx = FakeContext(records)
    answer = asyncio.run(handlers_data.fetch(ctx, CONN, request(1, max_wait_ms=60_000), 12))  # type: ignore[arg-type]
    assert _records_of(answer) == [BATCH] and ctx.runs == 1


@pytest.mark.parametrize(("partitions", "partition_max"), [
    (1, handlers_data.INLINE_FETCH_BYTES + 1),  # could answer more than a MiB
    (2, handlers_data.INLINE_FETCH_BYTES),  # two partitions of a MiB each
])
def test_a_large_fetch_read_into_memory_is_read_on_a_thread(records: FileRecords, partitions: int,
                                                            partition_max: int) -> None:
    ctx = FakeContext(records)
    ctx.settings.fetch_max_bytes = 64 << 20
    req = request(partitions, max_wait_ms=60_000)
    req["max_bytes"] = 64 << 20
    for p in req["topics"][0]["partitions"]:
        p["partition_max_bytes"] = partition_max
    asyncio.run(handlers_data.fetch(ctx, CONN, req, 12))  # type: ignore[arg-type]
    assert ctx.runs == 1 and ctx.figures.fetch_reads == {"loop": 0, "thread": 1}


@pytest.mark.parametrize("zero_copy", [False, True])
def test_a_read_committed_fetch_in_the_page_cache_is_answered_on_the_loop(records: FileRecords,
                                                                          zero_copy: bool) -> None:
    """librdkafka's consumers fetch read_committed by default: their fetches went to a thread
    each (make e2e step 6b counted 5 of 5 there), for transaction indexes the segments hold in memory."""
    ctx = FakeContext(records)
    req = request(1, max_wait_ms=60_000)
    req["isolation_level"] = 1
    conn = Connection("client", "127.0.0.1", 9092, None, hold=given_to_connection.append, zero_copy=zero_copy)
    answer = asyncio.run(handlers_data.fetch(ctx, conn, req, 12))  # type: ignore[arg-type]
    part = answer["responses"][0]["partitions"][0]
    assert part["aborted_transactions"] == [] and len(part["records"]) == len(BATCH)
    assert ctx.runs == 0 and ctx.figures.fetch_reads == {"loop": 1, "thread": 0}
    assert ctx.figures.bytes_out == {"t": len(BATCH)}


@pytest.mark.parametrize(("segments", "runs"), [(handlers_data.INLINE_ABORTED_SEGMENTS, 0),
                                               (handlers_data.INLINE_ABORTED_SEGMENTS + 1, 1)])
def test_a_read_committed_fetch_far_behind_lists_its_aborted_transactions_on_a_thread(
        records: FileRecords, segments: int, runs: int) -> None:
    """Listing the aborted transactions costs a pass over every segment up to the last stable
    offset: a consumer that many segments behind does not stall the event loop for it."""
    ctx = FakeContext(records)
    seg = SimpleNamespace(txn_index=SimpleNamespace(collect_aborted=lambda start, upper: []))
    log = ctx.sidecar.partition_log(None)
    log.name = "t-0"
    log.segments = SimpleNamespace(values=lambda start, end: [seg] * segments, count=lambda start, end: segments)
    reads = []
    manager_read = ctx.sidecar.manager.read
    ctx.sidecar.manager.read = lambda *a, **kw: reads.append(kw["cached_only"]) or manager_read(*a, **kw)
    req = request(1, max_wait_ms=60_000)
    req["isolation_level"] = 1
    answer = asyncio.run(handlers_data.fetch(ctx, CONN, req, 12))  # type: ignore[arg-type]
    assert answer["responses"][0]["partitions"][0]["aborted_transactions"] == []
    assert ctx.runs == runs
    assert reads == ([True] if runs == 0 else [False])  # the bound is checked before the loop reads


def test_a_fetch_with_no_data_waits_for_an_append(tmp_path: Path) -> None:
    empty = FileRecords(tmp_path / "empty.log")  # below min_bytes
    ctx = FakeContext(empty)
    asyncio.run(handlers_data.fetch(ctx, CONN, request(1, max_wait_ms=50), 12))  # type: ignore[arg-type]
    empty.close()
    assert ctx.notifier.waits >= 1


def test_an_answer_holds_its_records_bytes_of_the_response_pool_until_written(records: FileRecords) -> None:
    """What the fetch read stays taken from the pool, given to the connection to release once the
    answer is written; the rest of its grant goes back at once."""
    ctx = FakeContext(records)
    given_to_connection.clear()
    answer = asyncio.run(handlers_data.fetch(ctx, CONN, request(1), 12))  # type: ignore[arg-type]
    assert _records_of(answer) == [BATCH]
    assert given_to_connection == [len(BATCH)] and ctx.responses.used == len(BATCH)


def test_a_fetch_reads_no_more_than_the_pool_grants(records: FileRecords) -> None:
    ctx = FakeContext(records)
    asked: list[int] = []
    real = ctx.sidecar.manager.read

    def read(tp: TopicPartition, offset: int, max_bytes: int, **kw: Any) -> FetchData:
        asked.append(max_bytes)
        got: FetchData = real(tp, offset, max_bytes, **kw)
        return got

    ctx.sidecar.manager.read = read
    free = 3 << 20
    ctx.responses.take(ctx.responses.capacity - free)  # other answers hold all but 3 MiB
    req = request(1)
    req["max_bytes"] = req["topics"][0]["partitions"][0]["partition_max_bytes"] = 8 << 20
    ctx.settings.fetch_max_bytes = 8 << 20
    given_to_connection.clear()
    asyncio.run(handlers_data.fetch(ctx, CONN, req, 12))  # type: ignore[arg-type]
    assert asked == [free]
    assert given_to_connection == [len(BATCH)] and ctx.responses.available == free - len(BATCH)


def test_a_fetch_waiting_for_data_holds_none_of_the_pool(tmp_path: Path) -> None:
    empty = FileRecords(tmp_path / "empty.log")
    ctx = FakeContext(empty)
    held_while_waiting: list[int] = []

    async def wait(tps: list[TopicPartition], timeout_s: float) -> None:
        held_while_waiting.append(ctx.responses.used)
        await asyncio.sleep(0)

    ctx.notifier.wait = wait  # type: ignore[method-assign]
    given_to_connection.clear()
    asyncio.run(handlers_data.fetch(ctx, CONN, request(1, max_wait_ms=50), 12))  # type: ignore[arg-type]
    empty.close()
    assert held_while_waiting and set(held_while_waiting) == {0}
    assert given_to_connection == [] and ctx.responses.used == 0  # nothing read, nothing held


def test_an_append_on_the_event_loop_wakes_a_waiting_fetch_directly() -> None:
    """The inline produce path notifies on the loop's own thread: the waiter is woken there and
    then, not through the loop's self-pipe (a write, two reads and a loop turn a produce)."""
    tp = TopicPartition("t", 0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        notifier = AppendNotifier(loop)
        waiting = asyncio.create_task(notifier.wait([tp], 60.0))
        await asyncio.sleep(0)  # the wait is registered

        def no_self_pipe(*args: Any) -> None:
            raise AssertionError("call_soon_threadsafe from the loop's own thread")

        loop.call_soon_threadsafe = no_self_pipe  # type: ignore[method-assign,assignment]
        notifier.notify([tp])
        await asyncio.wait_for(waiting, 5.0)
        del loop.call_soon_threadsafe
        # from another thread it still goes through the loop
        waiting = asyncio.create_task(notifier.wait([tp], 60.0))
        await asyncio.sleep(0)
        await asyncio.to_thread(notifier.notify, [tp])
        await asyncio.wait_for(waiting, 5.0)

    asyncio.run(main())


# ------------------------------------------------------------------ zero copy (plaintext connections)
ZERO_COPY = Connection("client", "127.0.0.1", 9092, None, hold=given_to_connection.append, zero_copy=True)


def test_a_zero_copy_fetch_answers_slices_of_the_file_and_holds_none_of_the_pool(records: FileRecords) -> None:
    ctx = FakeContext(records)
    given_to_connection.clear()
    answer = asyncio.run(handlers_data.fetch(ctx, ZERO_COPY, request(1, max_wait_ms=60_000), 12))  # type: ignore[arg-type]
    [piece] = [p["records"] for t in answer["responses"] for p in t["partitions"]]
    assert isinstance(piece, RecordsSlice) and piece.read() == BATCH
    assert ctx.runs == 0  # in the page cache: on the event loop
    assert given_to_connection == [] and ctx.responses.used == 0


def test_a_large_zero_copy_fetch_in_the_page_cache_is_answered_on_the_loop(records: FileRecords) -> None:
    """A slice costs the loop index lookups and one page-cache query whatever its size (a read
    into memory of more than INLINE_FETCH_BYTES goes to a thread)."""
    ctx = FakeContext(records)
    ctx.settings.fetch_max_bytes = 64 << 20
    req = request(2, max_wait_ms=60_000)
    req["max_bytes"] = 64 << 20
    for p in req["topics"][0]["partitions"]:
        p["partition_max_bytes"] = 32 << 20
    asyncio.run(handlers_data.fetch(ctx, ZERO_COPY, req, 12))  # type: ignore[arg-type]
    assert ctx.runs == 0


def test_a_zero_copy_fetch_outside_the_page_cache_goes_to_a_thread_that_reads_it_in(
        records: FileRecords, monkeypatch: pytest.MonkeyPatch) -> None:
    warmed: list[tuple[int, int]] = []
    monkeypatch.setattr(page_cache, "cached", lambda fd, position, size: False)
    monkeypatch.setattr(page_cache, "warm", lambda fd, position, size: warmed.append((position, size)))
    ctx = FakeContext(records)
    answer = asyncio.run(handlers_data.fetch(ctx, ZERO_COPY, request(1, max_wait_ms=60_000), 12))  # type: ignore[arg-type]
    assert _records_of_slices(answer) == [BATCH] and ctx.runs == 1
    assert warmed == [(0, len(BATCH))]  # the thread brought the range into the page cache


def _records_of_slices(answer: dict[str, Any]) -> list[bytes]:
    return [p["records"].read() for t in answer["responses"] for p in t["partitions"]]


def test_a_spliced_frame_is_the_frame_with_its_records_copied_in(records: FileRecords) -> None:
    """answer_frame leaves the records of a RecordsSlice out and counts them in the frame's size:
    its head with each slice's bytes put in at its hole is, byte for byte, the frame encoded with
    the records read into memory (the classic and the flexible encodings)."""
    for version in (11, 12):
        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 1, "last_stable_offset": 1, "log_start_offset": 0,
             "aborted_transactions": None, "preferred_read_replica": -1, "records": records.slice(0, 1 << 20,
                                                                                                  cached_only=False)}
            for p in range(3)]}]}
        spliced = answer_frame(7, 1 if version >= 12 else 0, m.FETCH_RESPONSE, body, version)
        assert isinstance(spliced, SplicedFrame) and len(spliced.holes) == 3
        joined, start = bytearray(), 0
        for at, piece in spliced.holes:
            joined += spliced.head[start:at] + piece.read()
            start = at
        joined += spliced.head[start:]
        for part in body["responses"][0]["partitions"]:  # type: ignore[index]
            part["records"] = BATCH
        assert joined == response_frame(7, 1 if version >= 12 else 0, m.FETCH_RESPONSE, body, version)


def test_a_slice_of_a_closed_segment_cannot_be_opened(tmp_path: Path) -> None:
    """Its segment closed (deleted, cleaned away) before the answer was sent: no descriptor, so
    the connection closes rather than send another file's bytes under a reused number."""
    f = FileRecords(tmp_path / "00000000000000000000.log")
    f.append(BATCH)
    piece = f.slice(0, len(BATCH), cached_only=False)
    fd = piece.open()
    try:
        assert os.pread(fd, len(BATCH), 0) == BATCH
    finally:
        os.close(fd)
    f.close()
    with pytest.raises(FileNotFoundError, match="closed"):
        piece.open()
