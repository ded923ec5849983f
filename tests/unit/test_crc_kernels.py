"""The compiled CRC-32C agrees with the crc32c package on any bytes and any batch layout."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeeper.records import crc_kernels as C
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.scan import first_crc_mismatch, scan_batches

# On a CPU without SSE4.2 the kernels are never called (scan.py uses the package); these tests
# then check the package path of first_crc_mismatch only.


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 40))
def test_range_matches_package(data: bytes, start: int) -> None:
    start = min(start, len(data))
    buf = np.frombuffer(data, dtype=np.uint8)
    expected = crc32c.crc32c(data[start:])
    if C.HAVE_HW_CRC:
        assert int(C.crc32c_range(buf, start, len(data))) == expected


def test_shift_tables_hold_the_powers_x8n_computes() -> None:
    """The split's shift for a part of n bytes, one product of two table entries below 32 KiB,
    equals x^(8n) by repeated squaring (zlib's way), for every table entry and a few products."""
    low, high = C._shift_tables()

    def x8n(n: int) -> int:
        power, k = 0x80000000, 3
        while n:
            if n & 1:
                power = C._mult_py(int(C._X2N[k & 31]), power)
            n >>= 1
            k += 1
        return power

    assert [int(v) for v in low] == [x8n(8 * j) for j in range(64)]
    assert [int(v) for v in high] == [x8n(512 * i) for i in range(64)]
    for n in (8, 5576, 16_384, 32_760):
        assert C._mult_py(int(high[n >> 9]), int(low[(n >> 3) & 63])) == x8n(n)


@pytest.mark.parametrize("size", [2047, 2048, 2049, 2071, 2072, 2073, 16_753, 98_280, 98_304, 98_328, 1 << 20])
def test_split_range_and_table_match_package(size: int) -> None:
    """Ranges long enough to run as three joined chains, every tail length around the cut, parts
    on both sides of the shift tables' 32 KiB; the byte table (CPUs without the instruction) on
    the same bytes."""
    data = np.random.default_rng(size).integers(0, 256, size + 7, dtype=np.uint8)
    for start in range(0, 8):
        expected = crc32c.crc32c(data[start:size].tobytes())
        assert int(C.crc32c_table(data, start, size)) == expected
        assert int(C.crc32c_any(data, start, size)) == expected
        if C.HAVE_HW_CRC:
            assert int(C.crc32c_range(data, start, size)) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=12), st.data())
def test_first_bad_crc_finds_the_first_flipped_batch(sizes: list[int], data: st.DataObject) -> None:
    batches = [build_batch([Record(0, 1, b"k", b"x" * s)]) for s in sizes]
    raw = bytearray(b"".join(batches))
    table = scan_batches(np.frombuffer(bytes(raw), dtype=np.uint8))
    assert first_crc_mismatch(np.frombuffer(bytes(raw), dtype=np.uint8), table) == -1
    victim = data.draw(st.integers(0, len(batches) - 1))
    pos = int(table.position[victim]) + data.draw(st.integers(21, int(table.size[victim]) - 1))
    raw[pos] ^= 0x10
    buf = np.frombuffer(bytes(raw), dtype=np.uint8)
    assert first_crc_mismatch(buf, table) == victim
    if C.HAVE_HW_CRC:
        assert int(C.first_bad_crc(buf, table.position, table.size, table.crc, 0, len(table))) == victim
