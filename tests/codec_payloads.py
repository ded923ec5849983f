"""Payloads of the codec tests: Kafka 4.0.0's own output for ``b"hello" * 10`` and for nothing
(how it was made: tests/unit/test_compression.py's docstring), and seeded random and
compressible bytes."""

from __future__ import annotations

import random

from logkeeper.records.compression import Codec

HELLO = b"hello" * 10

KAFKA_400_HELLO = {
    Codec.GZIP: bytes.fromhex("1f8b08000000000000ffcb48cdc9c9cf208500001a1cb48d32000000"),
    Codec.SNAPPY: bytes.fromhex("82534e415050590000000001000000010000000a321068656c6c6fb20500"),
    Codec.LZ4: bytes.fromhex("04224d186040820f0000005f68656c6c6f0500155068656c6c6f00000000"),
    # zstd-jni streams: no frame content size, and an empty last block at the end.
    Codec.ZSTD: bytes.fromhex("28b52ffd00585c00002868656c6c6f0100c22c5a010000"),
}
# What Kafka 4.0.0 writes for an empty input.
KAFKA_400_EMPTY = {
    Codec.GZIP: bytes.fromhex("1f8b08000000000000ff03000000000000000000"),
    Codec.SNAPPY: bytes.fromhex("82534e41505059000000000100000001"),
    Codec.LZ4: bytes.fromhex("04224d1860408200000000"),
    Codec.ZSTD: bytes.fromhex("28b52ffd2000010000"),
}


def random_bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def compressible_bytes(n: int, seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    words = [b"key-%d" % i for i in range(50)] + [b"value", b"\x00\x00\x00", b"timestamp"]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words)
        if rnd.random() < 0.1:
            out += rnd.randbytes(rnd.randrange(1, 12))
    return bytes(out[:n])

