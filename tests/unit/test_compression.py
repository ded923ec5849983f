"""Unit tests for logkeeper.records.compression (Kafka's record-batch compression codecs).

Golden vectors below were produced by Apache Kafka 4.0.0's own classes
(``Compression.of(type).build().wrapForOutput(..., RecordBatch.MAGIC_VALUE_V2)``, with lz4-java
1.8.0, snappy-java 1.1.10.5 and zstd-jni 1.5.6-6 on OpenJDK 17) compressing ``b"hello" * 10``.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import zlib
from typing import Any

import cramjam
import lz4.frame
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

CODECS = list(Codec)
COMPRESSING = [c for c in Codec if c != Codec.NONE]
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


def _random_bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _compressible_bytes(n: int, seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    words = [b"key-%d" % i for i in range(50)] + [b"value", b"\x00\x00\x00", b"timestamp"]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words)
        if rnd.random() < 0.1:
            out += rnd.randbytes(rnd.randrange(1, 12))
    return bytes(out[:n])


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
    data = _random_bytes(size, size) if kind == "random" else _compressible_bytes(size, size)
    packed = compress(codec, data)
    assert type(packed) is bytes
    unpacked = decompress(codec, packed)
    assert type(unpacked) is bytes
    assert unpacked == data
    if codec != Codec.NONE and kind == "compressible" and size > 1000:
        assert len(packed) < len(data) * 3 // 4


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_round_trip_large(codec: Codec) -> None:
    data = _compressible_bytes(3 << 20, 7) + _random_bytes(1 << 20, 8)
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200_000))
def test_round_trip_hypothesis(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_accepts_bytearray_and_memoryview(codec: Codec) -> None:
    data = _compressible_bytes(100_000, 3)
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
    for data in (b"", HELLO, _random_bytes(70_000)):
        out = compress(Codec.GZIP, data)
        assert out[:10] == GZIP_HEADER
        assert out[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
        assert zlib.decompress(out[10:-8], wbits=-15) == data
    assert compress(Codec.GZIP, b"") == KAFKA_400_EMPTY[Codec.GZIP]
    # Level 6 (Deflater.DEFAULT_COMPRESSION): the deflate data equals zlib's level 6.
    assert compress(Codec.GZIP, HELLO)[10:-8] == zlib.compress(HELLO, 6, wbits=-15)


# ---------------------------------------------------------------------------------------------
# xerial snappy framing
# ---------------------------------------------------------------------------------------------
def _xerial_blocks(stream: bytes) -> list[bytes]:
    assert stream[:16] == XERIAL_HEADER
    blocks, pos = [], 16
    while pos < len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)
        blocks.append(stream[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert pos == len(stream)
    return blocks


def test_xerial_header_bytes() -> None:
    assert XERIAL_HEADER == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    assert XERIAL_HEADER.hex() == "82534e41505059000000000100000001"
    assert compress(Codec.SNAPPY, b"") == XERIAL_HEADER
    assert SNAPPY_BLOCK_SIZE == 32 * 1024


@pytest.mark.parametrize("size", [1, SNAPPY_BLOCK_SIZE, SNAPPY_BLOCK_SIZE + 1, 160_000, 1 << 20])
def test_xerial_blocks_of_32_kib(size: int) -> None:
    data = _compressible_bytes(size, size)
    blocks = _xerial_blocks(compress(Codec.SNAPPY, data))
    assert len(blocks) == -(-size // SNAPPY_BLOCK_SIZE)
    sizes = [len(cramjam.snappy.decompress_raw(b)) for b in blocks]
    assert sizes[:-1] == [SNAPPY_BLOCK_SIZE] * (len(blocks) - 1)
    assert sum(sizes) == size
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data


@pytest.mark.parametrize("size", [0, 1, 10, 16, 100, 100_000])
def test_snappy_reads_raw_unframed_block(size: int) -> None:
    data = _compressible_bytes(size, 1)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw) == data


def test_snappy_reads_concatenated_xerial_streams() -> None:
    a, b = _compressible_bytes(50_000, 1), _random_bytes(40_000, 2)
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, a) + compress(Codec.SNAPPY, b)) == a + b
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, b"") + compress(Codec.SNAPPY, a)) == a


def test_snappy_ignores_what_snappy_java_ignores() -> None:
    stream = compress(Codec.SNAPPY, HELLO)
    for tail in (b"\x00", b"\x00\x00", b"\x12\x34\x56"):  # shorter than a block length word
        assert decompress(Codec.SNAPPY, stream + tail) == HELLO
    # A length word equal to the magic's head whose header is not a xerial header ends the stream.
    assert decompress(Codec.SNAPPY, stream + b"\x82SNAxxxxyyyyzzzz" + b"junk") == HELLO
    # The version fields of the first header are not checked (redpanda writes them little-endian).
    odd = b"\x82SNAPPY\x00" + b"\x01\x00\x00\x00" * 2 + stream[16:]
    assert decompress(Codec.SNAPPY, odd) == HELLO


# ---------------------------------------------------------------------------------------------
# Kafka's LZ4 frame
# ---------------------------------------------------------------------------------------------
def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of a short input (< 16 bytes), written from the xxHash specification."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + word * p3) & mask, 17) * p4) & mask
        i += 4
    for byte in data[i:]:
        h = (rotl((h + byte * p5) & mask, 11) * p1) & mask
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


def test_xxh32_helper_matches_lz4_library() -> None:
    # The lz4 C library writes HC = (xxh32(descriptor) >> 8) & 0xff for any descriptor.
    for kwargs in (
        {"store_size": True},
        {"store_size": True, "content_checksum": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"store_size": False, "block_checksum": True},
    ):
        frame = lz4.frame.compress(b"x" * 1000, **kwargs)
        descriptor_len = 2 + (8 if frame[4] & 0x08 else 0)
        descriptor = frame[4 : 4 + descriptor_len]
        assert frame[4 + descriptor_len] == (_xxh32(descriptor) >> 8) & 0xFF


def test_lz4_frame_header_is_kafkas() -> None:
    assert bytes.fromhex("04224d18604082") == LZ4_FRAME_HEADER
    magic, flg, bd, hc = struct.unpack("<IBBB", LZ4_FRAME_HEADER)
    assert magic == 0x184D2204
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # block independence
    assert not flg & (0x10 | 0x08 | 0x04 | 0x03)  # no block checksum, size, content checksum
    assert bd == 4 << 4  # 64 KiB blocks, reserved bits clear
    assert hc == (_xxh32(bytes([flg, bd])) >> 8) & 0xFF
    for data in (b"", b"a", HELLO, _random_bytes(300_000)):
        out = compress(Codec.LZ4, data)
        assert out[:7] == LZ4_FRAME_HEADER
        assert out[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum


def _lz4_blocks(frame: bytes) -> list[tuple[bool, int]]:
    """(stored uncompressed, length) for each block of a frame with Kafka's header."""
    assert frame[:7] == LZ4_FRAME_HEADER
    blocks, pos = [], 7
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        blocks.append((bool(word & 0x80000000), word & 0x7FFFFFFF))
        pos += word & 0x7FFFFFFF
    assert pos == len(frame)
    return blocks


def test_lz4_blocks_like_kafka() -> None:
    # Incompressible input: 64 KiB blocks stored as they are, flagged by bit 31 (as Kafka does).
    data = _random_bytes(100_000, 5)
    out = compress(Codec.LZ4, data)
    assert _lz4_blocks(out) == [(True, 65536), (True, 100_000 - 65536)]
    assert out[11 : 11 + 65536] == data[:65536]
    assert out[7:11] == bytes.fromhex("00000180")
    # Compressible input: one compressed block per 64 KiB of input.
    blocks = _lz4_blocks(compress(Codec.LZ4, _compressible_bytes(200_000, 6)))
    assert len(blocks) == 4
    assert all(not stored and length < 65536 for stored, length in blocks)


@pytest.mark.parametrize(
    "options",
    [
        {"store_size": True},
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": True, "content_checksum": True, "block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX256KB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "compression_level": 16},
        {"block_linked": True},
        {"block_linked": False, "compression_level": lz4.frame.COMPRESSIONLEVEL_MINHC},
    ],
    ids=repr,
)
def test_lz4_reads_other_producers_frames(options: dict[str, object]) -> None:
    data = _compressible_bytes(300_000, 9)
    assert decompress(Codec.LZ4, lz4.frame.compress(data, **options)) == data


def test_lz4_declared_content_size_is_bounded() -> None:
    # The most compressible input (zeros, 4 MiB blocks) expands ~255x: still accepted.
    zeros = bytes(20 << 20)
    dense = lz4.frame.compress(zeros, store_size=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    assert decompress(Codec.LZ4, dense) == zeros
    # A header (with a valid checksum) claiming 1 TiB is refused before anything is allocated.
    frame = bytearray(lz4.frame.compress(b"abc", store_size=True))
    frame[6:14] = struct.pack("<Q", 1 << 40)
    frame[14] = (_xxh32(bytes(frame[4:14])) >> 8) & 0xFF
    with pytest.raises(CompressionError, match="lz4: frame declares 1099511627776 content bytes"):
        decompress(Codec.LZ4, bytes(frame), position=12)


def test_lz4_ignores_bytes_after_end_mark() -> None:
    # Kafka's Lz4BlockInputStream stops at the end mark.
    assert decompress(Codec.LZ4, compress(Codec.LZ4, HELLO) + b"trailing") == HELLO


# ---------------------------------------------------------------------------------------------
# gzip and zstd framing details
# ---------------------------------------------------------------------------------------------
def test_gzip_reads_concatenated_members_and_optional_fields() -> None:
    a, b = _compressible_bytes(70_000, 1), _random_bytes(5_000, 2)
    assert decompress(Codec.GZIP, compress(Codec.GZIP, a) + compress(Codec.GZIP, b)) == a + b
    three = compress(Codec.GZIP, a) + gzip.compress(b, compresslevel=1) + compress(Codec.GZIP, b"")
    assert decompress(Codec.GZIP, three) == a + b
    # FNAME, MTIME set by another writer
    buf = io.BytesIO()
    with gzip.GzipFile(filename="records.bin", mode="wb", fileobj=buf, mtime=1_700_000_000) as f:
        f.write(a)
    assert buf.getvalue()[3] & 0x08
    assert decompress(Codec.GZIP, buf.getvalue()) == a


def test_gzip_ignores_non_member_trailing_bytes() -> None:
    # java.util.zip.GZIPInputStream ignores bytes after a member that are not a gzip header.
    out = compress(Codec.GZIP, HELLO)
    assert decompress(Codec.GZIP, out + b"\x00" * 8) == HELLO
    assert decompress(Codec.GZIP, out + b"garbage after the member") == HELLO


def _zstd_frame_without_content_size(data: bytes, block_size: int = 1000) -> bytes:
    """A zstd frame built by hand from raw blocks: no content size, no checksum."""
    assert block_size <= 128 * 1024
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out.append(0x00)  # FHD: no content size field, not single-segment, no checksum, no dict id
    out.append(7 << 3)  # window descriptor: exponent 7 -> 128 KiB window, mantissa 0
    chunks = [data[i : i + block_size] for i in range(0, len(data), block_size)] or [b""]
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        header = (len(chunk) << 3) | (0 << 1) | int(last)  # block type 0 = raw
        out += header.to_bytes(3, "little") + chunk
    return bytes(out)


def _zstd_has_content_size(frame: bytes) -> bool:
    fhd = frame[4]
    return bool(fhd >> 6) or bool(fhd & 0x20)  # FCS flag, or single segment (implies FCS)


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 300_000])
def test_zstd_reads_frames_without_content_size(size: int) -> None:
    data = _random_bytes(size, size)
    frame = _zstd_frame_without_content_size(data)
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == data


def test_zstd_reads_kafkas_streamed_frame() -> None:
    frame = KAFKA_400_HELLO[Codec.ZSTD]
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == HELLO


def test_zstd_reads_streaming_compressor_output_and_frame_sequences() -> None:
    data = _compressible_bytes(500_000, 4)
    streamer = cramjam.zstd.Compressor(level=3)
    for i in range(0, len(data), 16 * 1024):  # as Kafka's 16 KiB BufferedOutputStream feeds it
        streamer.compress(data[i : i + 16 * 1024])
    frame = bytes(streamer.finish())
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == data
    assert decompress(Codec.ZSTD, compress(Codec.ZSTD, data) + frame) == data + data


# ---------------------------------------------------------------------------------------------
# Cross-compatibility with kafka-python's codec functions
# ---------------------------------------------------------------------------------------------
CROSS_PAYLOADS = [b"x", HELLO, _random_bytes(100_000, 11), _compressible_bytes((1 << 20) + 99, 12)]


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
    good = compress(codec, _compressible_bytes(100_000, 13))
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
