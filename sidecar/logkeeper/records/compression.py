"""Kafka's record-batch compression codecs, both ways (no file I/O).

A magic-2 record batch keeps its 61-byte header plain and compresses everything after it (the
records) as one block with the codec named by bits 0-2 of the batch attributes:

| id | codec  | ``compression.type`` | block format written                                   |
|----|--------|----------------------|--------------------------------------------------------|
| 0  | none   | none                 | the records as they are                                |
| 1  | gzip   | gzip                 | one gzip member (RFC 1952), deflate level 6 (zlib-ng)  |
| 2  | snappy | snappy               | xerial snappy-java stream framing of raw snappy blocks |
| 3  | lz4    | lz4                  | LZ4 frame (v1.5.1 format) as Kafka's Lz4BlockOutputStream |
| 4  | zstd   | zstd                 | one zstd frame (RFC 8878), level 3                     |

Ids 5, 6 and 7 are not codecs: :func:`codec_from_attributes` raises :class:`UnknownCodecError`.
The names are the producer's ``compression.type`` values (``CompressionType.forName``). The
topic/broker ``compression.type`` uses a different list (``uncompressed``, ``producer`` and the
four codec names) that the configuration layer maps onto these.

gzip (what Kafka's GzipOutputStream, a java.util.zip.GZIPOutputStream, writes on JDK >= 16)
-----------------------------------------------------------------------------------------------
| byte | field | value written                                     |
|------|-------|---------------------------------------------------|
| 0    | ID1 ID2 | ``1f 8b``                                       |
| 2    | CM    | 8 (deflate)                                       |
| 3    | FLG   | 0 (no name, comment, extra field or header CRC)   |
| 4    | MTIME | uint32 LE, 0                                      |
| 8    | XFL   | 0                                                 |
| 9    | OS    | 0xff (unknown)                                    |
| 10   | data  | raw deflate stream, level 6 (``Deflater.DEFAULT_COMPRESSION``) |
| end-8| CRC32 | uint32 LE, CRC-32 of the uncompressed bytes       |
| end-4| ISIZE | uint32 LE, uncompressed length mod 2**32          |

The deflate stream is zlib-ng's (the ``zlib-ng`` package), not zlib's as Java's Deflater writes:
the same format and level, so any gzip reader (Java's GZIPInputStream, librdkafka, zlib) reads
it, but not the same bytes. zlib-ng is faster both ways at the same level, for output within a
few percent of zlib's size (bench/results/codec_ceiling.md, the gzip batches alone); a
mixed-codec log's cleaning is bound by its codecs, gzip's compression the largest part (issue 23).

Reading accepts any gzip header flags and concatenated members. As Java's GZIPInputStream does,
bytes after a complete member that do not start with a gzip header (``1f 8b 08``) are ignored.

snappy (xerial snappy-java ``SnappyOutputStream``; all integers big-endian)
-----------------------------------------------------------------------------
| byte | field                | value                                               |
|------|----------------------|-----------------------------------------------------|
| 0    | magic                | ``82 53 4e 41 50 50 59 00`` (-126, "SNAPPY", 0)     |
| 8    | version              | int32, 1                                            |
| 12   | min compatible version | int32, 1                                          |
| 16   | block length         | int32, n = length of the raw snappy block that follows |
| 20   | block                | raw snappy block of at most 32 KiB (32768 bytes) of input |
| ...  | (length, block) pairs repeat until the input is used up; no end mark |      |

Empty input is the 16-byte header alone. Reading follows SnappyInputStream: a buffer of at least
16 bytes that starts with the 8-byte magic is a framed stream (the version fields are not
checked), anything else non-empty is one raw snappy block (``Snappy.compress`` output, which some
clients write). In a framed stream a length word equal to the first four magic bytes starts a
concatenated stream's 16-byte header, and 1-3 trailing bytes (too short for a length) end it.

lz4 (Kafka's ``Lz4BlockOutputStream``; a frame of the LZ4 frame format, little-endian words)
----------------------------------------------------------------------------------------------
| byte | field | value written                                                           |
|------|-------|-------------------------------------------------------------------------|
| 0    | magic | uint32 LE 0x184D2204 (bytes ``04 22 4d 18``)                            |
| 4    | FLG   | 0x60: bits 7-6 version 01, bit 5 block independence 1, bit 4 block checksum 0, |
|      |       | bit 3 content size 0, bit 2 content checksum 0, bits 1-0 reserved 00      |
| 5    | BD    | 0x40: block max size 4 = 64 KiB (bits 6-4), reserved bits 0             |
| 6    | HC    | ``(xxhash32(FLG, BD; seed 0) >> 8) & 0xff`` = 0x82                      |
| 7    | block size | uint32 LE: bit 31 set = block stored uncompressed; bits 0-30 = n   |
| 11   | block data | n bytes: an independent LZ4 block of at most 64 KiB of input       |
| ...  | (block size, data) pairs repeat                                                |
| end-4| end mark | uint32 LE 0                                                          |

So every frame starts ``04 22 4d 18 60 40 82``. (Magic-0 batches, never written here, carry the
pre-0.10 header checksum computed over the magic too.) Reading accepts any valid LZ4 frame: with
content size, block or content checksums, any block size, and also linked blocks (which Kafka's
reader rejects); bytes after the frame's end mark are ignored, as Kafka's reader ignores them.

zstd (Kafka's ``ZstdOutputStream``, level 3)
--------------------------------------------
| byte | field | value                                                                  |
|------|-------|------------------------------------------------------------------------|
| 0    | magic | uint32 LE 0xFD2FB528 (bytes ``28 b5 2f fd``)                           |
| 4    | frame header descriptor | content-size flag, single-segment, checksum, dictionary id flags |
| 5    | window descriptor / dictionary id / frame content size, as the descriptor says |
| ...  | blocks: 3-byte LE header (last-block bit, type raw/RLE/compressed, size) + data |
| end  | optional 4-byte content checksum                                       |

Kafka streams its zstd output, so its frames usually carry no content size; reading handles
frames with or without it, and several frames one after another.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any

from logkeeper.errors import CompressionError, UnknownCodecError
from logkeeper.records.batch_format import CODEC_MASK

# zlib-ng (gzip), cramjam (snappy, zstd) and lz4 are imported inside the codec functions: loading
# them takes a noticeable part of a process's start, and many processes never meet a compressed
# batch.

__all__ = [
    "GZIP_HEADER",
    "LZ4_FRAME_HEADER",
    "SNAPPY_BLOCK_SIZE",
    "XERIAL_HEADER",
    "XERIAL_MAGIC",
    "Codec",
    "codec_from_attributes",
    "codec_from_name",
    "compress",
    "decompress",
]

Buffer = bytes | bytearray | memoryview


class Codec(enum.IntEnum):
    """Compression codec ids as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: Attribute bits that hold the codec id.

_CODEC_BY_NAME = {codec.name.lower(): codec for codec in Codec}

# gzip: Java's GZIPOutputStream header (JDK 16+ writes OS = 255 "unknown").
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_LEVEL = 6  # Deflater.DEFAULT_COMPRESSION is zlib's level 6
_GZIP_MEMBER_START = b"\x1f\x8b\x08"
_GZIP_MIN_HEADER = 10

# snappy: xerial snappy-java stream framing.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
SNAPPY_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
_XERIAL_HEADER_LEN = len(XERIAL_HEADER)
_XERIAL_MAGIC_HEAD = struct.unpack(">i", XERIAL_MAGIC[:4])[0]  # a length word that starts a header
_INT32_BE = struct.Struct(">i")

# lz4: the 7 bytes every frame Kafka writes starts with (magic, FLG 0x60, BD 0x40, HC 0x82).
LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"

_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_SIZED_HEADER_LEN = 15  # magic, FLG, BD, 8-byte content size, HC
_LZ4_MAX_EXPANSION = 256

_ZSTD_LEVEL = 3  # CompressionType.ZSTD.defaultLevel() (ZSTD_CLEVEL_DEFAULT)


def codec_from_attributes(attributes: int, position: int = 0) -> Codec:
    """The codec named by bits 0-2 of batch ``attributes``; ids 5-7 raise UnknownCodecError."""
    codec_id = attributes & CODEC_MASK
    if codec_id > Codec.ZSTD:
        raise UnknownCodecError(
            position, f"compression codec id {codec_id} in batch attributes 0x{attributes & 0xFFFF:04x}"
        )
    return Codec(codec_id)


def codec_from_name(name: str) -> Codec:
    """The codec for a producer ``compression.type`` name (none, gzip, snappy, lz4, zstd)."""
    try:
        return _CODEC_BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}: expected one of {', '.join(_CODEC_BY_NAME)}"
        ) from None


# ---------------------------------------------------------------------------------------------
# Compression
# ---------------------------------------------------------------------------------------------
def _gzip_compress(data: memoryview) -> bytes:
    from zlib_ng import zlib_ng

    deflated = zlib_ng.compress(data, _GZIP_LEVEL, wbits=-zlib_ng.MAX_WBITS)
    trailer = struct.pack("<II", zlib_ng.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((GZIP_HEADER, deflated, trailer))


def _snappy_compress(data: memoryview) -> bytes:
    import cramjam

    parts: list[Any] = [XERIAL_HEADER]  # bytes and cramjam.Buffer objects (buffer protocol)
    for start in range(0, len(data), SNAPPY_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(data[start : start + SNAPPY_BLOCK_SIZE])
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data: memoryview) -> bytes:
    import lz4.frame

    out: bytes = lz4.frame.compress(
        data,
        # level 0 = LZ4_compress_default, the algorithm of lz4-java's fast compressor that
        # Kafka uses at its default lz4 level
        compression_level=lz4.frame.COMPRESSIONLEVEL_MIN,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        block_checksum=False,
        content_checksum=False,
        store_size=False,
        return_bytearray=False,
    )
    return out


def _zstd_compress(data: memoryview) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))


def compress(codec: Codec, data: Buffer) -> bytes:
    """``data`` compressed as Kafka writes a batch's records with ``codec``."""
    view = _as_bytes_view(data)
    if codec == Codec.NONE:
        return bytes(view)
    return _COMPRESSORS[Codec(codec)](view)


_COMPRESSORS: dict[Codec, Callable[[memoryview], bytes]] = {
    Codec.GZIP: _gzip_compress,
    Codec.SNAPPY: _snappy_compress,
    Codec.LZ4: _lz4_compress,
    Codec.ZSTD: _zstd_compress,
}


# ---------------------------------------------------------------------------------------------
# Decompression. Each helper raises _Corrupt(reason); decompress() adds codec and position.
# ---------------------------------------------------------------------------------------------
class _Corrupt(Exception):
    pass


def _gzip_decompress(data: memoryview) -> bytes:
    from zlib_ng import zlib_ng

    if not data:
        raise _Corrupt("empty input")
    members: list[bytes] = []
    start = 0
    while True:
        inflater = zlib_ng.decompressobj(wbits=16 + zlib_ng.MAX_WBITS)  # gzip wrapper only
        try:
            members.append(inflater.decompress(data[start:]))
        except zlib_ng.error as exc:  # type: ignore[misc]  # the stub types it as an instance
            raise _Corrupt(f"member at byte {start}: {exc}") from None
        if not inflater.eof:
            raise _Corrupt(f"member at byte {start} is truncated")
        rest = inflater.unused_data
        # Another member follows only if a gzip header does; anything else is ignored (as Java does).
        if len(rest) < _GZIP_MIN_HEADER or not rest.startswith(_GZIP_MEMBER_START):
            break
        start = len(data) - len(rest)
    return members[0] if len(members) == 1 else b"".join(members)


def _snappy_raw(block: memoryview, where: str) -> Any:
    """One raw snappy block decoded (a cramjam.Buffer)."""
    import cramjam

    try:
        return cramjam.snappy.decompress_raw(block)
    except cramjam.DecompressionError as exc:
        reason = str(exc).removeprefix("snappy: ")
        raise _Corrupt(f"{where}: {reason}") from None


def _snappy_decompress(data: memoryview) -> bytes:
    size = len(data)
    if size == 0:
        raise _Corrupt("empty input")
    if size < _XERIAL_HEADER_LEN or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(_snappy_raw(data, "raw block"))
    parts: list[Any] = []
    pos = _XERIAL_HEADER_LEN
    while size - pos >= 4:
        (length,) = _INT32_BE.unpack_from(data, pos)
        if length == _XERIAL_MAGIC_HEAD:  # a concatenated stream: another 16-byte header
            if size - pos < _XERIAL_HEADER_LEN:
                raise _Corrupt(f"truncated stream header at byte {pos}")
            if data[pos : pos + len(XERIAL_MAGIC)] != XERIAL_MAGIC:
                break  # snappy-java ends the stream here
            (version,) = _INT32_BE.unpack_from(data, pos + len(XERIAL_MAGIC))
            if version < 1:
                raise _Corrupt(f"stream header at byte {pos} has incompatible version {version}")
            pos += _XERIAL_HEADER_LEN
            continue
        if length < 0:
            raise _Corrupt(f"negative block length {length} at byte {pos}")
        pos += 4
        if length > size - pos:
            raise _Corrupt(f"block length {length} at byte {pos - 4} runs past the end ({size} bytes)")
        parts.append(_snappy_raw(data[pos : pos + length], f"block at byte {pos - 4}"))
        pos += length
    return b"".join(parts)


def _lz4_decompress(data: memoryview) -> bytes:
    import lz4.frame

    if not data:
        raise _Corrupt("empty input")
    # lz4.frame allocates the content size a frame declares before it decodes a block; refuse a
    # size that no frame of this length can hold (an LZ4 block expands at most ~255 times).
    if len(data) >= _LZ4_SIZED_HEADER_LEN and data[4] & _LZ4_FLG_CONTENT_SIZE:
        (content_size,) = struct.unpack_from("<Q", data, 6)
        if content_size > _LZ4_MAX_EXPANSION * len(data):
            raise _Corrupt(f"frame declares {content_size} content bytes in {len(data)} bytes")
    try:
        out: bytes = lz4.frame.decompress(data, return_bytearray=False)
    except RuntimeError as exc:
        raise _Corrupt(str(exc)) from None
    return out


def _zstd_decompress(data: memoryview) -> bytes:
    import cramjam

    if not data:
        raise _Corrupt("empty input")
    try:
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise _Corrupt(str(exc)) from None


_DECOMPRESSORS: dict[Codec, Callable[[memoryview], bytes]] = {
    Codec.GZIP: _gzip_decompress,
    Codec.SNAPPY: _snappy_decompress,
    Codec.LZ4: _lz4_decompress,
    Codec.ZSTD: _zstd_decompress,
}


def decompress(codec: Codec, data: Buffer, position: int = 0) -> bytes:
    """The records block ``data`` decompressed with ``codec``.

    ``position`` is where the compressed block starts in the caller's buffer or file; a block
    the codec cannot decode raises ``CompressionError(position, "<codec>: <reason>")``.
    """
    view = _as_bytes_view(data)
    if codec == Codec.NONE:
        return bytes(view)
    codec = Codec(codec)
    try:
        return _DECOMPRESSORS[codec](view)
    except _Corrupt as exc:
        raise CompressionError(position, f"{codec.name.lower()}: {exc}") from None


def _as_bytes_view(data: Buffer) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1 or not view.contiguous:
        view = memoryview(view.tobytes())
    return view
