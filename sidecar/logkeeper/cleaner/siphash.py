"""Keyed 128-bit key hashing for the offset map: SipHash-1-3 with a 128-bit output.

Kafka's cleaner identifies a key by its MD5 digest. MD5 is unkeyed, so a producer can craft
keys whose digests collide, and a colliding key silently removes another key's latest value.
logkeeper identifies a key by SipHash-1-3 (Aumasson and Bernstein's keyed pseudo-random
function; the variant Python and Rust use for their hash tables) under a 128-bit secret drawn
at random for every map: without the secret no key set can be crafted to collide, and two keys
collide by chance with probability 2^-128.

Algorithm (all words uint64, little-endian; ``rotl`` rotates left)::

    v0 = k0 ^ 0x736f6d6570736575        v1 = k1 ^ 0x646f72616e646f6d ^ 0xee
    v2 = k0 ^ 0x6c7967656e657261        v3 = k1 ^ 0x7465646279746573
    for each full 8-byte word m of the key:  v3 ^= m; 1 round; v0 ^= m
    b = (len << 56) | the 0-7 remaining bytes, little-endian
    v3 ^= b; 1 round; v0 ^= b
    v2 ^= 0xee; 3 rounds; h1 = v0 ^ v1 ^ v2 ^ v3
    v1 ^= 0xdd; 3 rounds; h2 = v0 ^ v1 ^ v2 ^ v3

    round: v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32)
           v2 += v3; v3 = rotl(v3, 16); v3 ^= v2
           v0 += v3; v3 = rotl(v3, 21); v3 ^= v0
           v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32)

``compression_rounds``/``final_rounds`` of 2 and 4 give the reference SipHash-2-4 (its published
test vectors check this code); the map uses 1 and 3. ``key_hash`` is inlined into the map's and the
cleaner's kernels with those rounds as constants, reading 8-byte words with one load each: much
faster than called out of line with the word assembled from 8 byte loads
(bench/results/design_figures.md: siphash).
"""

from __future__ import annotations

import os

import numpy as np

from .. import aot
from ..aot import kernel

_C0 = np.uint64(0x736F6D6570736575)
_C1 = np.uint64(0x646F72616E646F6D)
_C2 = np.uint64(0x6C7967656E657261)
_C3 = np.uint64(0x7465646279746573)
_EE = np.uint64(0xEE)
_DD = np.uint64(0xDD)
_FF = np.uint64(0xFF)
_load64 = aot.intrinsic("load64")
_U8 = np.uint64(8)
_U56 = np.uint64(56)

MAP_COMPRESSION_ROUNDS = 1
MAP_FINAL_ROUNDS = 3


@kernel(inline=True)
def _rotl(x, b):  # type: ignore[no-untyped-def]
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@kernel(inline=True)
def _rounds(v0, v1, v2, v3, n):  # type: ignore[no-untyped-def]
    for _ in range(n):
        v0 += v1
        v1 = _rotl(v1, 13)
        v1 ^= v0
        v0 = _rotl(v0, 32)
        v2 += v3
        v3 = _rotl(v3, 16)
        v3 ^= v2
        v0 += v3
        v3 = _rotl(v3, 21)
        v3 ^= v0
        v2 += v1
        v1 = _rotl(v1, 17)
        v1 ^= v2
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@kernel(inline=True)
def _siphash(buf, pos, length, k0, k1, c_rounds, d_rounds, wide):  # type: ignore[no-untyped-def]
    # inlined where it is called: the rounds are then constants, and the loops unroll
    v0 = k0 ^ _C0
    v1 = k1 ^ _C1
    v2 = k0 ^ _C2
    v3 = k1 ^ _C3
    if wide:
        v1 ^= _EE
    end = pos + length - (length & 7)
    p = pos
    while p < end:
        m = _load64(buf, p)  # SipHash reads little-endian words: one load (see aot.intrinsics)
        v3 ^= m
        v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, c_rounds)
        v0 ^= m
        p += 8
    b = np.uint64(length & 0xFF) << _U56
    shift = np.uint64(0)
    while p < pos + length:
        b |= np.uint64(buf[p]) << shift
        shift += _U8
        p += 1
    v3 ^= b
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, c_rounds)
    v0 ^= b
    v2 ^= _EE if wide else _FF
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, d_rounds)
    h1 = v0 ^ v1 ^ v2 ^ v3
    if not wide:
        return h1, np.uint64(0)
    v1 ^= _DD
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, d_rounds)
    return h1, v0 ^ v1 ^ v2 ^ v3


@kernel("u1[], i8, i8, u8, u8, i8, i8, b -> (u8, u8)")
def siphash(buf, pos, length, k0, k1, c_rounds, d_rounds, wide):  # type: ignore[no-untyped-def]
    """SipHash-c-d of buf[pos:pos+length] under (k0, k1): (h1, h2) for ``wide``, else (h, 0)."""
    return _siphash(buf, pos, length, k0, k1, c_rounds, d_rounds, wide)


@kernel(inline=True)
def key_hash(buf, pos, length, k0, k1):  # type: ignore[no-untyped-def]
    """The map's key identity: SipHash-1-3, 128-bit output, as two int64 words."""
    h1, h2 = _siphash(buf, pos, length, k0, k1, MAP_COMPRESSION_ROUNDS, MAP_FINAL_ROUNDS, True)
    return np.int64(h1), np.int64(h2)


def new_secret() -> tuple[np.uint64, np.uint64]:
    """A fresh random 128-bit SipHash key (from the OS's CSPRNG)."""
    raw = np.frombuffer(os.urandom(16), dtype="<u8")
    return np.uint64(raw[0]), np.uint64(raw[1])


def siphash_bytes(data: bytes, k0: int, k1: int, *, c_rounds: int = 2, d_rounds: int = 4,
                  wide: bool = False) -> tuple[int, int]:
    """SipHash-c-d of ``data`` (tests and tools; hot paths call the kernels)."""
    buf = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(1, dtype=np.uint8)
    h1, h2 = siphash(buf, 0, len(data), np.uint64(k0), np.uint64(k1), c_rounds, d_rounds, wide)
    return int(h1), int(h2)
