"""Zigzag varints as Kafka's v2 records use them (plain Python, for building records).

A value is zigzag-mapped (``(n << 1) ^ (n >> 63)``, so small negatives stay short) and then
written in LEB128: 7 bits a byte, lowest group first, the high bit set on every byte but the
last. A varint (int32) takes at most 5 bytes, a varlong (int64) at most 10.

Decoding on hot paths happens in the compiled walkers of ``records.scan``; these helpers serve
the builder and tools.
"""

from __future__ import annotations

from ..errors import BadVarintError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def encode_varint(n: int, out: bytearray) -> None:
    """Append the zigzag LEB128 form of ``n`` (int32 or int64 range) to ``out``."""
    z = zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = MAX_VARINT_BYTES) -> tuple[int, int]:
    """Return ``(value, next_position)``; raise BadVarintError naming ``pos`` if malformed."""
    shift = 0
    z = 0
    for i in range(max_bytes):
        if pos + i >= len(buf):
            raise BadVarintError(pos, "varint runs past the end of the buffer")
        b = buf[pos + i]
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return unzigzag(z), pos + i + 1
        shift += 7
    raise BadVarintError(pos, f"varint longer than {max_bytes} bytes")
