"""The cleaner's small parts: SipHash, the offset map, the config, the stats line, the throttler,
producers still active, transaction state and the backlog estimate."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest

from logkeeper.cleaner.backlog import estimate_distinct_keys
from logkeeper.cleaner.config import CLEANER_SETTINGS, CleanerConfig
from logkeeper.cleaner.offset_map import BYTES_PER_SLOT, OffsetMap, SipHashOffsetMap
from logkeeper.cleaner.producers import LastRecord, last_records_of_active_producers
from logkeeper.cleaner.siphash import siphash_bytes
from logkeeper.cleaner.stats import CleanerStats, format_stats, java_f1
from logkeeper.cleaner.txn import CleanedTransactionMetadata
from logkeeper.errors import InvalidConfigError
from logkeeper.index.txn_index import AbortedTxn
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.builder import ControlType
from tests.cleaner_logs import TxnProducer, append_kvs, append_marker

MASK = (1 << 64) - 1
KEY0 = int.from_bytes(bytes(range(8)), "little")
KEY1 = int.from_bytes(bytes(range(8, 16)), "little")


# ------------------------------------------------------------------------------------------------ SipHash
def reference_siphash(data: bytes, k0: int, k1: int, c: int, d: int, wide: bool) -> tuple[int, int]:
    """SipHash from its paper, in plain Python."""

    def rotl(x: int, b: int) -> int:
        return ((x << b) | (x >> (64 - b))) & MASK

    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]
    if wide:
        v[1] ^= 0xEE

    def rounds(n: int) -> None:
        for _ in range(n):
            v[0] = (v[0] + v[1]) & MASK
            v[1] = rotl(v[1], 13) ^ v[0]
            v[0] = rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & MASK
            v[3] = rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & MASK
            v[3] = rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & MASK
            v[1] = rotl(v[1], 17) ^ v[2]
            v[2] = rotl(v[2], 32)

    full = len(data) - len(data) % 8
    for i in range(0, full, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v[3] ^= m
        rounds(c)
        v[0] ^= m
    b = ((len(data) & 0xFF) << 56) | int.from_bytes(data[full:], "little")
    v[3] ^= b
    rounds(c)
    v[0] ^= b
    v[2] ^= 0xEE if wide else 0xFF
    rounds(d)
    h1 = v[0] ^ v[1] ^ v[2] ^ v[3]
    if not wide:
        return h1, 0
    v[1] ^= 0xDD
    rounds(d)
    return h1, v[0] ^ v[1] ^ v[2] ^ v[3]


def test_siphash_matches_the_published_vectors() -> None:
    assert siphash_bytes(bytes(range(15)), KEY0, KEY1)[0] == 0xA129CA6149BE45E5
    assert siphash_bytes(b"", KEY0, KEY1)[0] == 0x726FDB47DD0E0E31
    h1, h2 = siphash_bytes(b"", KEY0, KEY1, wide=True)
    assert (h1.to_bytes(8, "little") + h2.to_bytes(8, "little")).hex() == "a3817f04ba25a8e66df67214c7550293"


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 15, 16, 17, 100])
def test_siphash_1_3_wide_matches_the_reference(length: int) -> None:
    rng = random.Random(length)
    data = rng.randbytes(length)
    k0, k1 = rng.getrandbits(64), rng.getrandbits(64)
    assert siphash_bytes(data, k0, k1, c_rounds=1, d_rounds=3, wide=True) == \
        reference_siphash(data, k0, k1, 1, 3, True)
    assert siphash_bytes(data, k0, k1) == reference_siphash(data, k0, k1, 2, 4, False)


# ------------------------------------------------------------------------------------------------ offset map
def test_offset_map_capacity_and_slot_size() -> None:
    m = SipHashOffsetMap(128 * 1024 * 1024)
    assert isinstance(m, OffsetMap)
    assert BYTES_PER_SLOT == 24
    assert m.capacity_slots == 128 * 1024 * 1024 // 24
    assert m.max_entries == int(m.capacity_slots * 0.9)
    m.prepare(1 << 40)  # more keys than fit: the full table
    assert m.views()[0].shape[0] == m.capacity_slots
    assert m.memory_bytes == m.capacity_slots * 24 <= 128 * 1024 * 1024
    assert m.views()[0].dtype == np.int64 and m.views()[0].shape[1] == 3


def test_offset_map_grows_within_its_bound() -> None:
    m = SipHashOffsetMap(24 * 1_000_000)
    m.prepare(50_000)
    assert m.views()[0].shape[0] < 200_000 and m.slots_limit * 3 // 2 <= m.capacity_slots
    for i in range(50_000):
        if m.size >= m.grow_at:
            assert m.grow()
        m.put(i.to_bytes(8, "big"), i)
    assert m.size == 50_000 and m.latest_offset == 49_999
    assert all(m.get(i.to_bytes(8, "big")) == i for i in range(0, 50_000, 997))
    assert m.get(b"absent") == -1
    assert m.utilization == pytest.approx(50_000 / 1_000_000)


def test_a_warmed_offset_map_takes_its_table_in_full_mode_and_drops_it_otherwise() -> None:
    """``warm`` makes the full table ahead (touched on its own thread); a full-mode ``prepare``
    uses that very table, cleared; a growing one drops it and allocates its small table."""
    m = SipHashOffsetMap(24 * 100_000)
    m.warm()
    m.warm()  # a second call while warming changes nothing
    m._warming.join()  # type: ignore[union-attr]
    warmed = m._warm
    assert warmed is not None and warmed.shape == (m.capacity_slots, 3)
    m.prepare(1 << 40)
    table = m.views()[0]
    assert table is warmed and m._warm is None
    assert (table[:, 2] == -1).all()
    m.put(b"k", 7)
    assert (m.get(b"k"), m.size) == (7, 1)

    m.warm()
    m.prepare(1_000)  # growing: the warmed table is released, not kept beside the small one
    assert m.views()[0].shape[0] < m.capacity_slots and m._warm is None and m._warming is None
    m.put(b"k", 9)
    assert m.get(b"k") == 9


def test_logkeeper_clean_warms_the_map_only_for_a_log_as_large_as_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from logkeeper.cleaner.clean_command import _segment_bytes, run_clean
    from logkeeper.log.log import Log
    from logkeeper.log.log_config import LogConfig
    from tests.cleaner_logs import append_kvs

    warmed: list[int] = []
    monkeypatch.setattr(SipHashOffsetMap, "warm", lambda self: warmed.append(self.capacity_slots))
    for d in ("small-map", "large-map"):
        log = Log(tmp_path / d / "t-0", LogConfig.from_props({"segment.bytes": 2048, "cleanup.policy": "compact"}))
        for i in range(200):
            append_kvs(log, [(b"k%d" % (i % 5), b"v" * 40)])
        log.flush()
        log.close()
    size = _segment_bytes(tmp_path / "large-map")
    assert size > 10_000
    large = str(24 * (size // 24 + 1))  # one slot more than the log's bytes
    assert run_clean(tmp_path / "large-map", {"log.cleaner.dedupe.buffer.size": large}, io.StringIO(), lambda: 0) == 0
    assert warmed == []
    small = str(24 * (size // 24))
    assert run_clean(tmp_path / "small-map", {"log.cleaner.dedupe.buffer.size": small}, io.StringIO(), lambda: 0) == 0
    assert warmed == [size // 24]


def test_offset_map_updates_and_latest_offset() -> None:
    m = SipHashOffsetMap(slots=8)
    m.put(b"a", 1)
    m.put(b"a", 5)
    m.put(b"b", 3)
    assert (m.size, m.get(b"a"), m.get(b"b"), m.latest_offset) == (2, 5, 3, 3)
    m.update_latest_offset(10)
    assert m.latest_offset == 10
    m.clear()
    assert (m.size, m.get(b"a"), m.latest_offset) == (0, -1, -1)
    for i in range(8):
        m.put(bytes([i]), i)
    with pytest.raises(ValueError):
        m.put(b"one too many", 9)


@pytest.mark.parametrize("slots", [4000, 8, 26])
def test_the_map_marks_the_offsets_it_superseded(tmp_path: Path, slots: int) -> None:
    """Each put that replaces a key's offset sets the replaced offset's bit: the cleaning pass
    decides those records by the bitmap instead of a lookup. Covered: a whole map, a partial map
    (it fills mid-section) and a bitmap shorter than the section (its tail falls to lookups)."""
    from logkeeper.cleaner.cleaner import Cleaner
    from logkeeper.cleaner.stats import CleanerStats

    log = Log(tmp_path / "t-0", LogConfig.from_props({"segment.bytes": 600}), clock_ms=lambda: 0)
    rng = random.Random(slots)
    keys: list[bytes | None] = []
    for _ in range(100):
        batch = [(None if rng.random() < 0.1 else str(rng.randrange(12)).encode(), b"v")
                 for _ in range(rng.randrange(1, 6))]
        keys += [k for k, _ in batch]
        append_kvs(log, batch)
    log.roll()
    m = SipHashOffsetMap(slots=slots, load_factor=0.5)  # 26 slots: all 12 keys fit, 208 offsets of bitmap
    Cleaner(0, m, clock_ms=lambda: 0, load_factor=0.5).build_offset_map(log, 0, len(keys), m, CleanerStats())
    later: set[int] = set()
    latest_of: dict[bytes, int] = {}
    for offset, key in enumerate(keys[:m.latest_offset + 1]):
        if key is not None:
            if key in latest_of:
                later.add(latest_of[key])
            latest_of[key] = offset
    bits = np.unpackbits(m.superseded, bitorder="little")
    assert m.superseded_base == 0 and m.superseded.shape[0] == min((len(keys) + 7) // 8, slots)
    assert set(np.flatnonzero(bits).tolist()) == {o for o in later if o < bits.shape[0]}
    if slots == 8:
        assert m.latest_offset < len(keys) - 1  # the map filled: a partial map
    if slots == 26:
        assert m.latest_offset == len(keys) - 1 and bits.shape[0] < len(keys)
    m.put(b"by hand", 99)
    assert m.superseded.shape[0] == 0  # a map filled key by key has no bitmap
    log.close()


def test_each_map_and_each_round_draws_its_own_secret() -> None:
    a, b = SipHashOffsetMap(slots=16), SipHashOffsetMap(slots=16)
    assert a.secret != b.secret
    before = a.secret
    a.clear()
    assert a.secret != before


def test_md5_colliding_keys_do_not_collide() -> None:
    # Two different messages with the same MD5 digest (Wang and Yu's collision, as published by
    # Marc Stevens): Kafka's map cannot tell them apart, logkeeper's can.
    one = bytes.fromhex(
        "d131dd02c5e6eec4693d9a0698aff95c2fcab58712467eab4004583eb8fb7f89"
        "55ad340609f4b30283e488832571415a085125e8f7cdc99fd91dbdf280373c5b"
        "d8823e3156348f5bae6dacd436c919c6dd53e2b487da03fd02396306d248cda0"
        "e99f33420f577ee8ce54b67080a80d1ec69821bcb6a8839396f9652b6ff72a70")
    two = bytes.fromhex(
        "d131dd02c5e6eec4693d9a0698aff95c2fcab50712467eab4004583eb8fb7f89"
        "55ad340609f4b30283e4888325f1415a085125e8f7cdc99fd91dbd7280373c5b"
        "d8823e3156348f5bae6dacd436c919c6dd53e23487da03fd02396306d248cda0"
        "e99f33420f577ee8ce54b67080280d1ec69821bcb6a8839396f965ab6ff72a70")
    import hashlib

    assert one != two and hashlib.md5(one).digest() == hashlib.md5(two).digest()
    m = SipHashOffsetMap(slots=16)
    m.put(one, 1)
    m.put(two, 2)
    assert (m.size, m.get(one), m.get(two)) == (2, 1, 2)


# ------------------------------------------------------------------------------------------------ config
def test_config_defaults_are_kafkas_and_agree_with_the_fields() -> None:
    c = CleanerConfig.from_props()
    assert {f.name for f in dataclasses.fields(CleanerConfig)} == {s.attr for s in CLEANER_SETTINGS.settings}
    assert (c.log_cleaner_threads, c.log_cleaner_dedupe_buffer_size, c.log_cleaner_io_buffer_size) == \
        (1, 128 * 1024 * 1024, 512 * 1024)
    assert (c.log_cleaner_io_buffer_load_factor, c.log_cleaner_backoff_ms, c.log_cleaner_enable) == (0.9, 15000, True)
    assert not c.throttled
    c2 = CleanerConfig.from_props({"log.cleaner.threads": "4", "log.cleaner.io.max.bytes.per.second": "1e6"})
    assert c2.dedupe_buffer_per_thread == 32 * 1024 * 1024 and c2.io_buffer_per_cleaner == 64 * 1024
    assert c2.throttled
    with pytest.raises(InvalidConfigError):
        CleanerConfig.from_props({"log.cleaner.io.buffer.load.factor": "1.5"})
    with pytest.raises(InvalidConfigError):
        CleanerConfig.from_props({"log.cleaner.thread": "2"})


# ------------------------------------------------------------------------------------------------ stats
@pytest.mark.parametrize(("value", "text"), [(0.25, "0.3"), (0.15, "0.2"), (1234567.05, "1,234,567.1"),
                                             (math.inf, "Infinity"), (math.nan, "NaN"), (-0.04, "-0.0")])
def test_java_formatting(value: float, text: str) -> None:
    assert java_f1(value, grouping=True) == text


def test_stats_line_wording_and_figures() -> None:
    times = iter([1000, 1250, 2000])
    s = CleanerStats(lambda: next(times))
    s.read_messages(1_000_000, 118_000_000)
    s.index_messages_read(1_000_000)
    s.index_bytes_read(118_000_000)
    s.index_done()
    s.recopy_messages(100_000, 11_800_000)
    s.buffer_utilization = 0.0179
    s.all_done()
    assert format_stats(0, "bench-0", 0, 1_000_000, s) == (
        "\n\tLog cleaner thread 0 cleaned log bench-0 (dirty section = [0, 1000000])\n"
        "\t112.5 MB of log processed in 1.0 seconds (112.5 MB/sec).\n"
        "\tIndexed 112.5 MB in 0.3 seconds (450.1 Mb/sec, 25.0% of total time)\n"
        "\tBuffer utilization: 1.8%\n"
        "\tCleaned 112.5 MB in 0.8 seconds (150.0 Mb/sec, 75.0% of total time)\n"
        "\tStart size: 112.5 MB (1,000,000 messages)\n"
        "\tEnd size: 11.3 MB (100,000 messages)\n"
        "\t90.0% size reduction (90.0% fewer messages)\n")


# ------------------------------------------------------------------------------------------------ producers and txns
def make_log(tmp_path: Path) -> Log:
    now = 1_700_000_000_000
    return Log(tmp_path / "t-0", LogConfig.from_props({"cleanup.policy": "compact"}), clock_ms=lambda: now)


def test_active_producers_from_headers(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    now = log.now_ms()
    append_kvs(log, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)  # offset 0
    append_kvs(log, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=1)  # offset 1
    p = TxnProducer(log, 8, 3)
    p.append([1])  # offset 2: an open transaction
    append_marker(log, ControlType.COMMIT, 9, 5)  # a marker with no data: epoch only
    append_kvs(log, [(b"b", b"1")], producer_id=10, producer_epoch=0, base_sequence=0, timestamp=now - 10_000)
    got = last_records_of_active_producers(log, now, 5_000)
    assert got == {7: LastRecord(1, 0), 8: LastRecord(2, 3), 9: LastRecord(None, 5)}  # 10 expired
    append_marker(log, ControlType.ABORT, 7, 1)  # an epoch bump forgets producer 7's data batches
    assert last_records_of_active_producers(log, now, 5_000)[7] == LastRecord(None, 1)


def test_transaction_metadata() -> None:
    t = CleanedTransactionMetadata()
    t.add_aborted_transactions([AbortedTxn(1, 10, 20, 21)])
    assert not t.on_batch_read(1, 5, True)  # before the aborted transaction: committed data
    assert not t.on_control_batch_read(1, 6, 1)  # its COMMIT must stay
    assert t.on_control_batch_read(1, 7, 1)  # a COMMIT with no data seen may go
    assert t.on_batch_read(1, 12, True)  # aborted data
    assert not t.on_batch_read(2, 13, False)
    assert not t.on_control_batch_read(1, 20, 0)  # the ABORT marker stays: its data was seen
    assert t.on_control_batch_read(3, 30, None)  # an emptied control batch
    assert not t.on_control_batch_read(3, 31, 5)  # an unknown control type is kept


# ------------------------------------------------------------------------------------------------ backlog
@pytest.mark.parametrize("keys", [50, 5000, 40000])
def test_distinct_key_estimate(tmp_path: Path, keys: int) -> None:
    log = make_log(tmp_path)
    rng = random.Random(keys)
    records = [(str(rng.randrange(keys)).encode(), b"v") for _ in range(60000)]
    distinct = len({k for k, _v in records})
    for i in range(0, len(records), 500):
        append_kvs(log, records[i:i + 500])
    est = estimate_distinct_keys(log, 0, log.log_end_offset)
    assert abs(est - distinct) <= max(2, 0.04 * distinct)
