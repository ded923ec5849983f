"""Handlers of Produce, Fetch and ListOffsets: thin calls of the Sidecar's storage API.

Produce: each partition's record bytes go to ``Sidecar.produce`` as they came (validation,
offsets, idempotent producers' sequence checks happen in the log). acks 0, 1 and -1 (all) are
served; on one node "all" in-sync replicas is the leader, so 1 and all answer after the append,
without an fsync (flush.messages / flush.ms decide that, as in Kafka). acks 0 gets no response;
a failed acks-0 request closes the connection, as Kafka does, so the client notices.
Transactional produce (a transactional id) is refused with INVALID_REQUEST: there is no
transaction coordinator. Versions below 3 (message formats 0 and 1) get UNSUPPORTED_VERSION.
Internal topics (__consumer_offsets, __transaction_state) are written by the node alone (the
group coordinator appends through the Sidecar, not through Produce): a client's partitions of
them get INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic", as Kafka answers; the
request's other partitions are appended.

Fetch: sessionless (a request to open a fetch session is answered with session id 0, which
clients take as "no session"); per partition up to ``partition_max_bytes`` and up to
``max_bytes`` in all (capped by the sidecar's ``fetch.max.bytes``, as Kafka caps it by its own),
at least one batch for the first partition with data (as Kafka). As Kafka's, a partition's
records are a slice of its segment: the first batch whole, then up to the limit, so the last
batch may be partial (clients drop it and fetch it again): no batch header past the first is
read. A fetch read into memory (over TLS, below) that can answer at most INLINE_FETCH_BYTES is
read on the event loop when its bytes are in the page cache (RWF_NOWAIT), else on a thread, as
any larger one. The high
watermark is the log end offset (one replica). ``read_committed`` reads below the last stable
offset and lists the aborted transactions from the transaction indexes. With less than
``min_bytes`` the request waits up to ``max_wait_ms`` for an append to one of its partitions;
one naming no partition is answered at once, as Kafka answers it. On a plaintext connection
(``Connection.zero_copy``) a fetch's records are not read: the answer names their ranges of the
segment files (RecordsSlice) and the connection sends them from the page cache with sendfile, as
Kafka's broker does, so an answer its client is slow to read holds no memory; such a fetch is
answered on the event loop when its ranges are all in the page cache (page_cache.py), else on a
thread that first reads them into it. Over TLS the records are read into memory, so they count
against the listener's response pool (``kafka.queued.max.response.bytes``, memory_pool.py) from
the read until the connection has written the answer: such a fetch reads at most what the pool
grants it, and a waiting one holds none.

ListOffsets: -1 latest (the last stable offset under read_committed), -2 earliest, -3 the batch
holding the largest timestamp, -4 earliest local (= earliest: no tiered storage), a timestamp:
the first batch with a timestamp at or above it (-1 when none).
"""

from __future__ import annotations

import time
from typing import Any

from ..log.file_records import WouldBlock
from ..log.log import Log
from ..log.names import TopicPartition
from ..records.batch_format import ATTRIBUTES_OFFSET, CODEC_MASK
from . import error_codes as ec
from .context import BrokerContext, Connection
from .offsets_store import OFFSETS_TOPIC

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


class CloseConnection(Exception):
    """An acks-0 produce failed: the listener closes the connection instead of answering."""


# ----------------------------------------------------------------------------------- produce
# A request of one partition and at most this many bytes is appended on the event loop when the
# append is quick (no lock to wait for, no roll, no flush: Log.try_append): the hand-off to an I/O
# thread and back cost a third of the throughput of Kafka's producer perf tool with its default
# 16 KiB batches (bench/results/kafka_perf.md). Anything else goes to a thread, so that a disk
# stall or a held log lock holds up that request only.
INLINE_PRODUCE_BYTES = 1 << 20
# A compressed batch is decompressed to be validated (a 64 KiB gzip block can inflate to many
# MB): only small ones are taken on the loop, so that no decompression holds up other requests.
INLINE_COMPRESSED_BYTES = 64 << 10


def _inline(items: list[tuple[TopicPartition, bytes | None]]) -> bool:
    if len(items) != 1 or items[0][1] is None:
        return False
    data = items[0][1]
    # the first batch's codec: a producer's request for one partition holds one batch
    compressed = len(data) > ATTRIBUTES_OFFSET + 1 and data[ATTRIBUTES_OFFSET + 1] & CODEC_MASK != 0
    return len(data) <= (INLINE_COMPRESSED_BYTES if compressed else INLINE_PRODUCE_BYTES)


def _append_on_thread(ctx: BrokerContext, items: list[tuple[TopicPartition, bytes | None]]) -> list[dict[str, Any]]:
    out = _append_all(ctx, items)
    assert out is not None  # only a quick append gives up
    return out


def _append_all(ctx: BrokerContext, items: list[tuple[TopicPartition, bytes | None]], *,
                quick: bool = False) -> list[dict[str, Any]] | None:
    """One answer per partition; with ``quick``, None (nothing appended) when an append would wait."""
    out = []
    for tp, data in items:
        entry: dict[str, Any] = {"index": tp.partition, "error_code": ec.NONE, "base_offset": -1,
                                 "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                                 "error_message": None}
        if not data:
            entry.update(error_code=ec.INVALID_RECORD, error_message="no records")
        else:
            try:
                result = ctx.sidecar.try_produce(tp, data) if quick else ctx.sidecar.produce(tp, data, flush=False)
                if result is None:
                    return None
                entry.update(base_offset=result.base_offset, log_append_time_ms=result.log_append_time_ms,
                             log_start_offset=result.log_start_offset)
            except Exception as e:  # every failure is answered per partition
                entry.update(error_code=ec.code_of(e), error_message=str(e)[:500])
                if entry["error_code"] == ec.UNKNOWN_SERVER_ERROR:
                    raise
        out.append(entry)
    return out


async def produce(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any] | None:
    acks = req["acks"]
    refuse = None
    if version < 3:
        refuse = (ec.UNSUPPORTED_VERSION, "Produce below v3 (message formats 0 and 1) is not supported")
    elif req["transactional_id"] is not None:
        refuse = (ec.INVALID_REQUEST, "transactions are not supported by logkeeper")
    elif acks not in (0, 1, -1):
        refuse = (ec.INVALID_REQUEST, f"acks must be 0, 1 or -1 (all), got {acks}")
    items = [(TopicPartition(t["name"], p["index"]), p["records"])
             for t in req["topic_data"] for p in t["partition_data"]]
    if refuse is not None:
        results = [{"index": tp.partition, "error_code": refuse[0], "base_offset": -1, "error_message": refuse[1]}
                   for tp, _ in items]
    else:
        allowed = [(tp, data) for tp, data in items if tp.topic not in INTERNAL_TOPICS]
        try:
            appended = _append_all(ctx, allowed, quick=True) if _inline(allowed) else None
            if appended is None:
                appended = await ctx.run(_append_on_thread, ctx, allowed) if allowed else []
        except Exception:
            if acks == 0:
                raise CloseConnection("an acks-0 produce failed") from None
            raise
        in_order = iter(appended)  # _append_all answers ``allowed`` in its order
        results = [next(in_order) if tp.topic not in INTERNAL_TOPICS else
                   {"index": tp.partition, "error_code": ec.INVALID_TOPIC_EXCEPTION, "base_offset": -1,
                    "error_message": f"Cannot append to internal topic {tp.topic}"} for tp, _ in items]
        for (tp, data), r in zip(items, results):
            if r["error_code"] == ec.NONE and data:
                ctx.figures.appended(tp.topic, len(data))
    if acks == 0:
        if any(r["error_code"] != ec.NONE for r in results):
            raise CloseConnection("an acks-0 produce failed: " + "; ".join(
                f"{tp}: {r.get('error_message')}" for (tp, _), r in zip(items, results) if r["error_code"]))
        return None
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (tp, _), r in zip(items, results):
        by_topic.setdefault(tp.topic, []).append(r)
    return {"responses": [{"name": t, "partition_responses": rs} for t, rs in by_topic.items()],
            "throttle_time_ms": 0}


# ------------------------------------------------------------------------------------- fetch
# A read_committed fetch on the event loop lists the aborted transactions of at most this many
# segments (its own and those up to the last stable offset, about a microsecond each: in memory);
# a consumer further behind goes to a thread, as Kafka does this on a request thread
INLINE_ABORTED_SEGMENTS = 64


def _aborted(lg: Log, start: int, upper: int) -> list[dict[str, Any]]:
    """The aborted transactions overlapping [start, upper)."""
    out = []
    for seg in lg.segments.values(start, upper):
        for t in seg.txn_index.collect_aborted(start, upper):
            out.append({"producer_id": t.producer_id, "first_offset": t.first_offset})
    return out


# A fetch that can answer at most this many bytes (the consumer's default max.partition.fetch.bytes,
# one partition) is first read on the event loop, from the page cache only: the hand-off to a
# thread and back cost as much as the read itself (a py-spy profile of ConsumerPerformance, the
# same finding as INLINE_PRODUCE_BYTES's). On the loop the read is one copy from the page cache
# and an index lookup; a larger fetch, or one whose bytes are not all cached, goes to a thread.
INLINE_FETCH_BYTES = 1 << 20
# A fetch waits for this many bytes of the response pool (kafka.queued.max.response.bytes) when
# fewer are free, rather than answer with less: the default max.message.bytes, so the first batch
# of an answer is rarely past its grant.
LEAST_ANSWER_BYTES = 1 << 20


def _answer_bound(wanted: list[tuple[TopicPartition, dict[str, Any]]], max_bytes: int) -> int:
    """The records bytes a fetch may answer, at least 1 (the first batch is answered whatever
    the limits)."""
    asked: int = sum(max(0, p["partition_max_bytes"]) for _, p in wanted)
    return max(1, min(max_bytes, asked))


def _fits_inline(wanted: list[tuple[TopicPartition, dict[str, Any]]], max_bytes: int, zero_copy: bool) -> bool:
    # A zero-copy answer of any size costs the loop index lookups and one page-cache query, not a
    # copy. read_committed (librdkafka's default) adds the search for the last stable offset's
    # position, from the page cache too, and the aborted transactions, which the segments hold in
    # memory (txn_index.py reads each file when its segment opens), of INLINE_ABORTED_SEGMENTS at most
    return zero_copy or _answer_bound(wanted, max_bytes) <= INLINE_FETCH_BYTES


def _read_partition(ctx: BrokerContext, tp: TopicPartition, p: dict[str, Any], budget: int, first: bool,
                    committed: bool, cached_only: bool, zero_copy: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition_index": tp.partition, "error_code": ec.NONE, "high_watermark": -1,
                             "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                             "preferred_read_replica": -1, "records": b""}
    try:
        lg = ctx.sidecar.partition_log(tp)
        leo, lso, start = lg.log_end_offset, lg.last_stable_offset, lg.log_start_offset
        entry.update(high_watermark=leo, last_stable_offset=lso, log_start_offset=start)
        offset = p["fetch_offset"]
        max_bytes = min(p["partition_max_bytes"], budget)
        if committed and cached_only and (behind := lg.segments.count(offset, lso)) > INLINE_ABORTED_SEGMENTS:
            # checked before the read, which the thread would do again
            raise WouldBlock(f"{lg.name}: the aborted transactions of {behind} segments to list")
        if max_bytes > 0 or first:
            entry["records"] = ctx.sidecar.manager.read(tp, offset, max(max_bytes, 1),
                                                        max_offset=lso if committed else None, min_one_batch=first,
                                                        whole_batches=False, cached_only=cached_only,
                                                        zero_copy=zero_copy).records
        elif not start <= offset <= leo:
            entry.update(error_code=ec.OFFSET_OUT_OF_RANGE)
        if committed:
            entry["aborted_transactions"] = _aborted(lg, offset, lso) if entry["records"] else []
    except WouldBlock:
        raise  # the whole fetch goes to a thread
    except Exception as e:
        code = ec.code_of(e)
        if code == ec.UNKNOWN_SERVER_ERROR:
            raise
        entry.update(error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"")
    return entry


def _read_all(ctx: BrokerContext, wanted: list[tuple[TopicPartition, dict[str, Any]]], max_bytes: int,
              committed: bool, cached_only: bool = False, zero_copy: bool = False) -> tuple[list[dict[str, Any]], int]:
    out, total = [], 0
    for tp, p in wanted:
        entry = _read_partition(ctx, tp, p, max_bytes - total, total == 0, committed, cached_only, zero_copy)
        total += len(entry["records"])
        out.append(entry)
    return out, total


def _read_inline(ctx: BrokerContext, wanted: list[tuple[TopicPartition, dict[str, Any]]],
                 max_bytes: int, committed: bool, zero_copy: bool) -> tuple[list[dict[str, Any]], int] | None:
    """``_read_all`` from the page cache, on the event loop; None when a read would wait."""
    try:
        return _read_all(ctx, wanted, max_bytes, committed, cached_only=True, zero_copy=zero_copy)
    except WouldBlock:
        return None


async def _read(ctx: BrokerContext, wanted: list[tuple[TopicPartition, dict[str, Any]]], max_bytes: int,
                committed: bool, inline: bool, zero_copy: bool) -> tuple[list[dict[str, Any]], int]:
    """``_read_all`` on the event loop from the page cache when ``inline``, else (or when that
    would wait for the disk) on a thread."""
    read = _read_inline(ctx, wanted, max_bytes, committed, zero_copy) if inline else None
    ctx.figures.read(on_loop=read is not None)
    return read if read is not None else await ctx.run(_read_all, ctx, wanted, max_bytes, committed, False, zero_copy)


async def _read_granted(ctx: BrokerContext, wanted: list[tuple[TopicPartition, dict[str, Any]]], max_bytes: int,
                        committed: bool, inline: bool, zero_copy: bool) -> tuple[list[dict[str, Any]], int, int]:
    """One read of the fetch's partitions within the bytes the response pool grants it: (entries,
    records bytes, bytes granted). What is granted is taken from the pool; the caller gives it
    back or hands it to the connection. A zero-copy read holds no memory: nothing is granted."""
    if zero_copy:
        results, total = await _read(ctx, wanted, max_bytes, committed, inline, True)
        return results, total, 0
    pool = ctx.responses
    bound = _answer_bound(wanted, max_bytes)
    least = min(bound, LEAST_ANSWER_BYTES)
    granted = pool.try_acquire_up_to(bound, least) or await pool.acquire_up_to(bound, least)
    try:
        limit = min(max_bytes, granted)
        results, total = await _read(ctx, wanted, limit, committed, inline, False)
    except BaseException:
        pool.release(granted)
        raise
    return results, total, granted


async def fetch(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    wanted = [(TopicPartition(t["topic"], p["partition"]), p) for t in req["topics"] for p in t["partitions"]]
    committed = req["isolation_level"] == 1
    results: list[dict[str, Any]]
    if version < 4:
        results = [{"partition_index": tp.partition, "error_code": ec.UNSUPPORTED_VERSION, "high_watermark": -1,
                    "records": b""} for tp, _ in wanted]
    else:
        deadline = time.monotonic() + max(0, req["max_wait_ms"]) / 1000.0
        fetch_max = ctx.settings.fetch_max_bytes
        max_bytes = max(0, min(req["max_bytes"], fetch_max))
        zero_copy = conn.zero_copy
        inline = _fits_inline(wanted, max_bytes, zero_copy)
        while True:
            results, total, granted = await _read_granted(ctx, wanted, max_bytes, committed, inline, zero_copy)
            left = deadline - time.monotonic()
            # no partitions: nothing to wait for, so Kafka answers at once. The wait on none
            # returned at once, and this loop spun, reading again, until max_wait_ms
            if total >= req["min_bytes"] or left <= 0 or not wanted or ctx.sidecar.stopping or \
                    any(r["error_code"] != ec.NONE for r in results):
                break
            ctx.responses.release(granted)  # a waiting fetch holds no bytes
            await ctx.notifier.wait([tp for tp, _ in wanted], left)
        if not zero_copy:  # the answer's records stay in memory until the connection has written them
            if total > granted:
                ctx.responses.take(total - granted)  # a first batch larger than the grant
            else:
                ctx.responses.release(granted - total)
            if total:
                conn.hold(total)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (tp, _), r in zip(wanted, results):
        by_topic.setdefault(tp.topic, []).append(r)
        ctx.figures.answered(tp.topic, len(r["records"]))
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "session_id": 0,
            "responses": [{"topic": t, "partitions": rs} for t, rs in by_topic.items()]}


# ------------------------------------------------------------------------------ list offsets
def _offset_for(lg: Log, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) answered for a ListOffsets target."""
    if timestamp == LATEST:
        return -1, lg.last_stable_offset if committed else lg.log_end_offset
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, lg.log_start_offset
    segments = lg.segments.values()
    if timestamp == MAX_TIMESTAMP:
        best = max((s for s in segments if s.size_in_bytes), key=lambda s: s.max_timestamp_so_far, default=None)
        if best is None or best.max_timestamp_so_far < 0:
            return -1, -1
        timestamp = best.max_timestamp_so_far
        segments = [best]
    for seg in segments:
        if seg.size_in_bytes and seg.largest_timestamp >= timestamp:
            found = seg.find_offset_by_timestamp(timestamp, lg.log_start_offset)
            if found is not None:
                return found
    return -1, -1


def _list_offsets(ctx: BrokerContext, wanted: list[tuple[TopicPartition, int]], committed: bool,
                  version: int) -> list[dict[str, Any]]:
    out = []
    for tp, ts in wanted:
        entry: dict[str, Any] = {"partition_index": tp.partition, "error_code": ec.NONE, "old_style_offsets": [],
                                 "timestamp": -1, "offset": -1, "leader_epoch": -1}
        try:
            lg = ctx.sidecar.partition_log(tp)
            found_ts, offset = _offset_for(lg, ts, committed)
            entry.update(timestamp=found_ts, offset=offset, old_style_offsets=[offset] if offset >= 0 else [])
        except Exception as e:
            entry["error_code"] = ec.code_of(e)
            if entry["error_code"] == ec.UNKNOWN_SERVER_ERROR:
                raise
        out.append(entry)
    return out


async def list_offsets(ctx: BrokerContext, conn: Connection, req: dict[str, Any], version: int) -> dict[str, Any]:
    wanted = [(TopicPartition(t["name"], p["partition_index"]), p["timestamp"])
              for t in req["topics"] for p in t["partitions"]]
    results = await ctx.run(_list_offsets, ctx, wanted, req["isolation_level"] == 1, version)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (tp, _), r in zip(wanted, results):
        by_topic.setdefault(tp.topic, []).append(r)
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": rs} for t, rs in by_topic.items()]}
