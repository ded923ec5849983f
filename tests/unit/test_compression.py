"""Unit tests for logkeeper.records.compression (Kafka's record-batch compression codecs).

Golden vectors below were produced by Apache Kafka 4.0.0's own classes
(``Compression.of(type).build().wrapForOutput(..., RecordBatch.MAGIC_VALUE_V2)``, with lz4-java
1.8.0, snappy-java 1.1.10.5 and zstd-jni 1.5.6-6 on OpenJDK 17) compressing ``b"hello" * 10``.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeeper.errors import CompressionError, CorruptRecordError, UnknownCodecError
from logkeeper.records.compression import (
    GZIP_HEADER,
    LZ4_FRAME_HEADER,
    SNAPPY_BLOCK_SIZE,
    XERIAL_HEADER,
    Codec,
    codec_from_attributes,
    codec_from_name,
    compress,
    decompress,
)
from tests.codec_payloads import (
    HELLO,
    KAFKA_400_EMPTY,
    KAFKA_400_HELLO,
    compressible_bytes,
    random_bytes,
)

CODECS = list(Codec)
COMPRESSING = [c for c in Codec if c != Codec.NONE]


# ---------------------------------------------------------------------------------------------
# codec ids and names
# ---------------------------------------------------------------------------------------------
def test_codec_ids_are_kafkas() -> None:
    assert [(c.name, int(c)) for c in Codec] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]


@pytest.mark.parametrize("codec_id", range(5))
@pytest.mark.parametrize("other_bits", [0, 0x08, 0x10, 0x20, 0x40, 0x78, 0xFF00])
def test_codec_from_attributes_known(codec_id: int, other_bits: int) -> None:
    assert codec_from_attributes(other_bits | codec_id) == Codec(codec_id)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_codec_from_attributes_unknown(codec_id: int) -> None:
    with pytest.raises(UnknownCodecError) as info:
        codec_from_attributes(0x10 | codec_id, position=4242)
    assert info.value.position == 4242
    assert isinstance(info.value, CorruptRecordError)
    assert f"codec id {codec_id}" in str(info.value)
    assert "position 4242" in str(info.value)


def test_codec_from_name() -> None:
    assert [codec_from_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == CODECS


@pytest.mark.parametrize("name", ["", "GZIP", "Gzip", "uncompressed", "producer", "lz4hc", "zstd "])
def test_codec_from_name_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="unknown compression type"):
        codec_from_name(name)


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------
ROUND_TRIP_SIZES = [
    0,
    1,
    15,
    16,
    17,
    SNAPPY_BLOCK_SIZE - 1,
    SNAPPY_BLOCK_SIZE,
    SNAPPY_BLOCK_SIZE + 1,
    65536,
    65537,
    3 * 65536 + 7,
    (1 << 20) + 12345,
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("size", ROUND_TRIP_SIZES)
@pytest.mark.parametrize("kind", ["random", "compressible"])
def test_round_trip_sizes(codec: Codec, size: int, kind: str) -> None:
    data = random_bytes(size, size) if kind == "random" else compressible_bytes(size, size)
    packed = compress(codec, data)
    assert type(packed) is bytes
    unpacked = decompress(codec, packed)
    assert type(unpacked) is bytes
    assert unpacked == data
    if codec != Codec.NONE and kind == "compressible" and size > 1000:
        assert len(packed) < len(data) * 3 // 4


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_round_trip_large(codec: Codec) -> None:
    data = compressible_bytes(3 << 20, 7) + random_bytes(1 << 20, 8)
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200_000))
def test_round_trip_hypothesis(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_accepts_bytearray_and_memoryview(codec: Codec) -> None:
    data = compressible_bytes(100_000, 3)
    expected = compress(codec, data)
    assert compress(codec, bytearray(data)) == expected
    window = memoryview(b"xx" + data + b"yy")[2:-2]
    assert compress(codec, window) == expected
    # A memoryview of another item size is taken as its bytes.
    assert compress(codec, memoryview(data[:99_996]).cast("I")) == compress(codec, data[:99_996])
    assert decompress(codec, bytearray(expected)) == data
    assert decompress(codec, memoryview(b"\x00" + expected + b"")[1:]) == data


# ---------------------------------------------------------------------------------------------
# Kafka's own output (golden vectors from Kafka 4.0.0)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name.lower())
def test_reads_kafka_output(codec: Codec) -> None:
    assert decompress(codec, KAFKA_400_HELLO[codec]) == HELLO
    assert decompress(codec, KAFKA_400_EMPTY[codec]) == b""


@pytest.mark.parametrize("codec", [Codec.SNAPPY, Codec.LZ4], ids=lambda c: c.name.lower())
def test_writes_what_kafka_writes(codec: Codec) -> None:
    # Same framing and the same block algorithm as snappy-java / lz4-java: identical bytes.
    assert compress(codec, HELLO) == KAFKA_400_HELLO[codec]
    assert compress(codec, b"") == KAFKA_400_EMPTY[codec]


def test_gzip_header_and_trailer_are_javas() -> None:
    assert bytes.fromhex("1f8b08000000000000ff") == GZIP_HEADER
    for data in (b"", HELLO, random_bytes(70_000)):
        out = compress(Codec.GZIP, data)
        assert out[:10] == GZIP_HEADER
        assert out[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
        assert zlib.decompress(out[10:-8], wbits=-15) == data
    assert compress(Codec.GZIP, b"") == KAFKA_400_EMPTY[Codec.GZIP]


def test_gzip_deflates_at_javas_level_with_zlib_ng() -> None:
    # Level 6 (Deflater.DEFAULT_COMPRESSION), through zlib-ng: the same format as Java's zlib
    # output (stdlib zlib and Kafka's golden vector read above), not the same bytes.
    from zlib_ng import zlib_ng

    for data in (HELLO, compressible_bytes(100_000, 13)):
        assert compress(Codec.GZIP, data)[10:-8] == zlib_ng.compress(data, 6, wbits=-15)
        assert decompress(Codec.GZIP, zlib.compress(data, 6, wbits=31)) == data  # zlib's, as Java writes


# ---------------------------------------------------------------------------------------------
# Cross-compatibility with kafka-python's codec functions
# ---------------------------------------------------------------------------------------------
CROSS_PAYLOADS = [b"x", HELLO, random_bytes(100_000, 11), compressible_bytes((1 << 20) + 99, 12)]


# kafka-python and the libraries its codecs need are in the dev extra (pyproject.toml): a missing
# one is a broken install, so these cross-checks fail rather than skip.
@pytest.fixture(name="kafka_codec")
def _kafka_codec() -> Any:
    import kafka.codec

    return kafka.codec


def _require(available: bool, library: str) -> None:
    assert available, f"kafka-python needs the {library} package for this codec (pip install -e '.[dev]')"


@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=lambda d: f"{len(d)}B")
def test_kafka_python_gzip(kafka_codec: Any, data: bytes) -> None:
    assert kafka_codec.gzip_decode(compress(Codec.GZIP, data)) == data
    assert decompress(Codec.GZIP, kafka_codec.gzip_encode(data)) == data


@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=lambda d: f"{len(d)}B")
def test_kafka_python_snappy(kafka_codec: Any, data: bytes) -> None:
    _require(kafka_codec.has_snappy(), "python-snappy")
    ours = compress(Codec.SNAPPY, data)
    assert kafka_codec.snappy_encode(data, xerial_compatible=True) == ours
    assert kafka_codec.snappy_decode(ours) == data
    assert decompress(Codec.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(Codec.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False)) == data


@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=lambda d: f"{len(d)}B")
def test_kafka_python_lz4(kafka_codec: Any, data: bytes) -> None:
    _require(kafka_codec.has_lz4(), "lz4")
    assert kafka_codec.lz4_decode(compress(Codec.LZ4, data)) == data
    theirs = kafka_codec.lz4_encode(data)  # kafka-python stores the content size
    assert decompress(Codec.LZ4, theirs) == data


@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=lambda d: f"{len(d)}B")
def test_kafka_python_zstd(kafka_codec: Any, data: bytes) -> None:
    _require(kafka_codec.has_zstd(), "zstandard")
    assert kafka_codec.zstd_decode(compress(Codec.ZSTD, data)) == data
    assert decompress(Codec.ZSTD, kafka_codec.zstd_encode(data)) == data


# ---------------------------------------------------------------------------------------------
# Corrupt input
# ---------------------------------------------------------------------------------------------
def _corruptions(codec: Codec) -> list[bytes]:
    good = compress(codec, compressible_bytes(100_000, 13))
    common = [b"", good[: len(good) // 2], good[:-5], b"\x01\x02\x03 definitely not compressed"]
    if codec == Codec.GZIP:
        bad_crc = bytearray(good)
        bad_crc[-8] ^= 0xFF
        return [*common, bytes(bad_crc), good[:10], GZIP_HEADER + b"\xff" * 40]
    if codec == Codec.SNAPPY:
        negative = XERIAL_HEADER + b"\xff\xff\xff\xf0" + b"\x00" * 20
        past_end = XERIAL_HEADER + struct.pack(">i", 1000) + b"\x00" * 20
        bad_block = XERIAL_HEADER + struct.pack(">i", 4) + b"\xff\xff\xff\xff"
        short_header = good + b"\x82SNAPPY"  # a concatenated stream's header cut short
        return [*common, negative, past_end, bad_block, short_header, b"\xff" * 10]
    if codec == Codec.LZ4:
        bad_hc = bytearray(good)
        bad_hc[6] ^= 0x01
        big_block = LZ4_FRAME_HEADER + struct.pack("<I", 0x7FFFFFF0) + b"\x00" * 64
        return [*common, bytes(bad_hc), good[:7], big_block, b"\x04\x22\x4d\x18\x60"]
    bad_magic = b"\x28\xb5\x2f\xfe" + good[4:]
    return [*common, bad_magic, good + b"garbage!", good[:4]]


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name.lower())
def test_corrupt_input_raises_compression_error(codec: Codec) -> None:
    name = codec.name.lower()
    for n, bad in enumerate(_corruptions(codec)):
        with pytest.raises(CompressionError) as info:
            decompress(codec, bad, position=1000 + n)
        err = info.value
        assert err.position == 1000 + n, bad[:32]
        assert err.detail.startswith(f"{name}: "), err.detail
        assert f"position {1000 + n}" in str(err)
        assert isinstance(err, CorruptRecordError)
        assert str(err.in_file("00000000000000000000.log", 61)).startswith(
            f"decompression failed at 00000000000000000000.log at position {1061 + n}: {name}: "
        )


def test_corrupt_error_default_position_is_zero() -> None:
    with pytest.raises(CompressionError) as info:
        decompress(Codec.ZSTD, b"nope")
    assert info.value.position == 0


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name.lower())
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_compression_error(codec: Codec, data: bytes) -> None:
    try:
        decompress(codec, data, position=7)
    except CompressionError as err:
        assert err.position == 7
        assert err.detail.startswith(codec.name.lower() + ": ")


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name.lower())
@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=1, max_size=5000), cut=st.integers(min_value=0), flip=st.integers(0, 255))
def test_damaged_streams_decode_or_raise_compression_error(
    codec: Codec, data: bytes, cut: int, flip: int
) -> None:
    packed = bytearray(compress(codec, data))
    packed[cut % len(packed)] ^= flip
    try:
        decompress(codec, bytes(packed), position=99)
    except CompressionError as err:
        assert err.position == 99


def test_none_codec_is_identity() -> None:
    data = os.urandom(1000)
    assert compress(Codec.NONE, data) == data
    assert decompress(Codec.NONE, memoryview(data), position=5) == data
    assert compress(Codec.NONE, b"") == b""
