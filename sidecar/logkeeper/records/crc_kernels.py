"""CRC-32C inside compiled loops: the SSE4.2 ``crc32`` instruction called from numba.

Why: checking a segment means one CRC a batch; through the C-backed ``crc32c`` package that is
one Python call a batch, one chain at a time. Here the whole segment's batches are checked in
one compiled ``nogil`` call.

CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) as Kafka uses it: start from 0xFFFFFFFF,
update over the bytes, invert at the end. The instruction does the update 8 bytes at a time
with a 3-cycle latency, so three batches are checked at once as three independent chains
(faster than through the package: bench/results/design_figures.md: crc kernels). One long range is
cut in three parts run as three chains too, joined with zlib's crc32_combine arithmetic.

``HAVE_HW_CRC`` is False on CPUs without SSE4.2 (or not x86-64); callers then use the
``crc32c`` package, and kernels that must run everywhere call ``crc32c_any`` (a table lookup a
byte there). They all agree: tests compare them with the package on random data.
"""

from __future__ import annotations

import numpy as np

from .. import aot
from ..aot import kernel
from .batch_format import ATTRIBUTES_OFFSET

_crc32_u64 = aot.intrinsic("crc32_u64")
_crc32_u8 = aot.intrinsic("crc32_u8")
_load64 = aot.intrinsic("load64")
# the compiled modules are x86-64-v2 code or newer (SSE4.2 included), checked to run on this CPU
# before one is used
HAVE_HW_CRC = aot.mode() == "aot" or aot.intrinsic("host_has_sse42")()


@kernel(inline=True)
def _update(crc, buf, p, end):  # type: ignore[no-untyped-def]
    """Raw CRC update (no inversion) over buf[p:end], one stream."""
    c = np.uint64(crc)
    while p + 8 <= end:
        c = _crc32_u64(c, _load64(buf, p))
        p += 8
    c32 = np.uint32(c)
    while p < end:
        c32 = _crc32_u8(c32, buf[p])
        p += 1
    return c32


_POLY = 0x82F63B78
# Below this a range is one chain: joining three costs about what a chain does on 2 KiB.
_SPLIT_MIN_BYTES = 2048


def _mult_py(a: int, b: int) -> int:
    """a(x) * b(x) mod P(x) in the reflected representation (x^0 is bit 31), as zlib's multmodp."""
    product = 0
    for _ in range(32):
        if a & 0x80000000:
            product ^= b
        a = (a << 1) & 0xFFFFFFFF
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _x2n_table() -> np.ndarray:
    """x^(2^k) mod P(x) for k = 0..31 (zlib's x2n_table), from x^1 by squaring."""
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_mult_py(table[-1], table[-1]))
    return np.array(table, dtype=np.uint32)


_X2N = _x2n_table()


@kernel(inline=True)
def _mult(a, b):  # type: ignore[no-untyped-def]
    """``_mult_py`` compiled: 32 branch-free shift-and-xor steps (in 64-bit words, which is
    what numba's unsigned arithmetic gives; the mask keeps ``a`` to 32 bits)."""
    a = np.uint64(a)
    b = np.uint64(b)
    one = np.uint64(1)
    product = np.uint64(0)
    for _ in range(32):
        product ^= b & (np.uint64(0) - ((a >> np.uint64(31)) & one))
        a = (a << one) & np.uint64(0xFFFFFFFF)
        b = (b >> one) ^ (np.uint64(_POLY) & (np.uint64(0) - (b & one)))
    return np.uint32(product)


@kernel(inline=True)
def _x8n(n):  # type: ignore[no-untyped-def]
    """x^(8n) mod P(x): multiplying a raw CRC register by it runs the register over n zero bytes."""
    power = np.uint32(0x80000000)  # x^0
    k = 3
    while n:
        if n & 1:
            power = _mult(_X2N[k & 31], power)
        n >>= 1
        k += 1
    return power


def _shift_tables() -> tuple[np.ndarray, np.ndarray]:
    """x^(8 * 8j) and x^(8 * 512i) mod P(x) for i, j < 64: the shift of a part of n bytes
    (a multiple of 8 below 32 KiB) is one product of two entries, where ``_x8n`` multiplies once
    per set bit of n (six times for a 16 KiB batch; bench/results/design_figures.md: crc kernels)."""
    low, high = [0x80000000], [0x80000000]  # x^0
    for _ in range(63):
        low.append(_mult_py(low[-1], int(_X2N[6])))  # times x^64: 8 more bytes
        high.append(_mult_py(high[-1], int(_X2N[12])))  # times x^4096: 512 more bytes
    return np.array(low, dtype=np.uint32), np.array(high, dtype=np.uint32)


# Read only where numba compiles kernels (the compiled module holds them as constants): a
# process running the compiled module does not spend the time they take to compute
# (bench/results/design_figures.md: crc kernels).
_SHIFT_8, _SHIFT_512 = _shift_tables() if aot.mode() == "jit" else (_X2N[:0], _X2N[:0])
_SHIFT_TABLE_BYTES = 64 * 512


@kernel(inline=True)
def _shift(n):  # type: ignore[no-untyped-def]
    """``_x8n(n)`` for n a multiple of 8: from the tables below 32 KiB."""
    if n < _SHIFT_TABLE_BYTES:
        return _mult(_SHIFT_512[n >> 9], _SHIFT_8[(n >> 3) & 63])
    return _x8n(n)


@kernel("u1[], i8, i8 -> u8")
def crc32c_range(buf, start, end):  # type: ignore[no-untyped-def]
    """CRC-32C of buf[start:end] (Kafka's: initial 0xFFFFFFFF, final inversion).

    A long range runs as three chains over three equal parts (the second and third from a zero
    register); the register is linear, so the whole range's is
    ``((c0 * x^8L) ^ c1) * x^8L ^ c2`` for parts of L bytes, and the tail goes on from there.
    """
    if end - start < _SPLIT_MIN_BYTES:
        return _update(np.uint32(0xFFFFFFFF), buf, start, end) ^ np.uint32(0xFFFFFFFF)
    third = ((end - start) // 24) * 8  # a multiple of 8 bytes: whole words per chain
    c0 = np.uint64(0xFFFFFFFF)
    c1 = np.uint64(0)
    c2 = np.uint64(0)
    p1 = start + third
    p2 = p1 + third
    for k in range(0, third, 8):
        c0 = _crc32_u64(c0, _load64(buf, start + k))
        c1 = _crc32_u64(c1, _load64(buf, p1 + k))
        c2 = _crc32_u64(c2, _load64(buf, p2 + k))
    shift = _shift(third)
    joined = _mult(shift, _mult(shift, np.uint32(c0)) ^ np.uint32(c1)) ^ np.uint32(c2)
    return _update(joined, buf, p2 + third, end) ^ np.uint32(0xFFFFFFFF)


def _byte_table() -> np.ndarray:
    """The CRC register after one byte of each value, from zero (the table of crc32c_table)."""
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table[n] = c
    return table


_BYTE_TABLE = _byte_table()


@kernel("u1[], i8, i8 -> u4")
def crc32c_table(buf, start, end):  # type: ignore[no-untyped-def]
    """CRC-32C of buf[start:end] a byte at a time by table, for CPUs without the instruction."""
    c = np.uint32(0xFFFFFFFF)
    for p in range(start, end):
        c = np.uint32(_BYTE_TABLE[(c ^ buf[p]) & 0xFF] ^ (c >> np.uint32(8)))
    return c ^ np.uint32(0xFFFFFFFF)


# The CRC for kernels that must compile on any CPU: a kernel calling crc32c_range cannot.
crc32c_any = crc32c_range if HAVE_HW_CRC else crc32c_table


@kernel()
def batch_crcs3(buf, p0, e0, p1, e1, p2, e2):  # type: ignore[no-untyped-def]
    """CRC-32C of three ranges at once: three independent chains interleaved word by word,
    which hides the instruction's latency without the shift-and-combine of one split range."""
    c0 = np.uint64(0xFFFFFFFF)
    c1 = np.uint64(0xFFFFFFFF)
    c2 = np.uint64(0xFFFFFFFF)
    common = min(e0 - p0, e1 - p1, e2 - p2) & ~7
    for k in range(0, common, 8):
        c0 = _crc32_u64(c0, _load64(buf, p0 + k))
        c1 = _crc32_u64(c1, _load64(buf, p1 + k))
        c2 = _crc32_u64(c2, _load64(buf, p2 + k))
    r0 = _update(np.uint32(c0), buf, p0 + common, e0) ^ np.uint32(0xFFFFFFFF)
    r1 = _update(np.uint32(c1), buf, p1 + common, e1) ^ np.uint32(0xFFFFFFFF)
    r2 = _update(np.uint32(c2), buf, p2 + common, e2) ^ np.uint32(0xFFFFFFFF)
    return r0, r1, r2


@kernel("u1[], i8[], i4[], u4[], i8, i8 -> i8")
def first_bad_crc(buf, positions, sizes, crcs, lo, hi):  # type: ignore[no-untyped-def]
    """Row of the first batch in [lo, hi) whose stored CRC differs from its bytes', or -1.

    Batches go three at a time (``batch_crcs3``); the CRC covers bytes ATTRIBUTES_OFFSET..size of a batch.
    """
    row = lo
    while row + 3 <= hi:
        p0, p1, p2 = positions[row], positions[row + 1], positions[row + 2]
        a = ATTRIBUTES_OFFSET  # the CRC'd range starts here
        r0, r1, r2 = batch_crcs3(buf, p0 + a, p0 + sizes[row], p1 + a, p1 + sizes[row + 1],
                                 p2 + a, p2 + sizes[row + 2])
        if r0 != crcs[row]:
            return row
        if r1 != crcs[row + 1]:
            return row + 1
        if r2 != crcs[row + 2]:
            return row + 2
        row += 3
    while row < hi:
        p = positions[row]
        crc = _update(np.uint32(0xFFFFFFFF), buf, p + ATTRIBUTES_OFFSET, p + sizes[row]) ^ np.uint32(0xFFFFFFFF)
        if crc != crcs[row]:
            return row
        row += 1
    return -1

