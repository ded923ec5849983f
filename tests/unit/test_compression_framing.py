"""How each codec frames its stream, as Kafka's libraries do (snappy-java's xerial blocks,
lz4-java's frames and their xxHash32 checksums, Java's gzip members, zstd-jni's frames), and
reading what other producers write (tests/unit/test_compression.py: the codecs themselves)."""

from __future__ import annotations

import gzip
import io
import struct

import cramjam
import lz4.frame
import pytest

from logkeeper.errors import CompressionError
from logkeeper.records.compression import (
    LZ4_FRAME_HEADER,
    SNAPPY_BLOCK_SIZE,
    XERIAL_HEADER,
    Codec,
    compress,
    decompress,
)
from tests.codec_payloads import (
    HELLO,
    KAFKA_400_HELLO,
    compressible_bytes,
    random_bytes,
)


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
    data = compressible_bytes(size, size)
    blocks = _xerial_blocks(compress(Codec.SNAPPY, data))
    assert len(blocks) == -(-size // SNAPPY_BLOCK_SIZE)
    sizes = [len(cramjam.snappy.decompress_raw(b)) for b in blocks]
    assert sizes[:-1] == [SNAPPY_BLOCK_SIZE] * (len(blocks) - 1)
    assert sum(sizes) == size
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data


@pytest.mark.parametrize("size", [0, 1, 10, 16, 100, 100_000])
def test_snappy_reads_raw_unframed_block(size: int) -> None:
    data = compressible_bytes(size, 1)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw) == data


def test_snappy_reads_concatenated_xerial_streams() -> None:
    a, b = compressible_bytes(50_000, 1), random_bytes(40_000, 2)
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
    for data in (b"", b"a", HELLO, random_bytes(300_000)):
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
    data = random_bytes(100_000, 5)
    out = compress(Codec.LZ4, data)
    assert _lz4_blocks(out) == [(True, 65536), (True, 100_000 - 65536)]
    assert out[11 : 11 + 65536] == data[:65536]
    assert out[7:11] == bytes.fromhex("00000180")
    # Compressible input: one compressed block per 64 KiB of input.
    blocks = _lz4_blocks(compress(Codec.LZ4, compressible_bytes(200_000, 6)))
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
    data = compressible_bytes(300_000, 9)
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
    a, b = compressible_bytes(70_000, 1), random_bytes(5_000, 2)
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
    data = random_bytes(size, size)
    frame = _zstd_frame_without_content_size(data)
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == data


def test_zstd_reads_kafkas_streamed_frame() -> None:
    frame = KAFKA_400_HELLO[Codec.ZSTD]
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == HELLO


def test_zstd_reads_streaming_compressor_output_and_frame_sequences() -> None:
    data = compressible_bytes(500_000, 4)
    streamer = cramjam.zstd.Compressor(level=3)
    for i in range(0, len(data), 16 * 1024):  # as Kafka's 16 KiB BufferedOutputStream feeds it
        streamer.compress(data[i : i + 16 * 1024])
    frame = bytes(streamer.finish())
    assert not _zstd_has_content_size(frame)
    assert decompress(Codec.ZSTD, frame) == data
    assert decompress(Codec.ZSTD, compress(Codec.ZSTD, data) + frame) == data + data


