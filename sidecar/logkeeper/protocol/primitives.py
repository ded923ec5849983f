"""The primitive types of Kafka's protocol: a bounds-checked reader and an appending writer.

All integers are big-endian. Two encodings exist for every variable-length type: the classic one
and the "compact" one of flexible message versions::

    type        classic                                compact (flexible versions)
    int8..64    1, 2, 4, 8 bytes, signed               same
    uint16      2 bytes unsigned                       same
    float64     8 bytes IEEE 754                       same
    bool        1 byte, 0 = false                      same
    uuid        16 bytes                               same
    string      int16 length (-1 = null) + UTF-8       uvarint (length + 1; 0 = null) + UTF-8
    bytes       int32 length (-1 = null) + bytes       uvarint (length + 1; 0 = null) + bytes
    array       int32 count (-1 = null) + elements     uvarint (count + 1; 0 = null) + elements
    uvarint     -                                      LEB128: 7 bits a byte, low group first,
                                                       high bit = more (at most 5 bytes)
    tagged      -                                      uvarint count, then per field: uvarint
    fields                                             tag, uvarint size, size bytes (tags
                                                       ascending); at the end of every struct

Every read checks its bounds: a length past the end of the frame, a negative length other
than -1, a varint longer than 5 bytes or bad UTF-8 raise ``MalformedError`` (the listener then
closes the connection).
"""

from __future__ import annotations

import struct

from ..log.file_records import RecordsSlice

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = bytes(16)


class MalformedError(ValueError):
    """Bytes that do not decode as the expected message: the connection is closed."""


class Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise MalformedError(f"{n} bytes needed at position {pos}, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return int(_I8.unpack_from(self.buf, self._need(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self.buf, self._need(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._need(8))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self.buf, self._need(8))[0])

    def boolean(self) -> bool:
        return self.buf[self._need(1)] != 0

    def uuid(self) -> bytes:
        pos = self._need(16)
        return bytes(self.buf[pos:pos + 16])

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte: nearly every length and tag count
            self.pos = pos + 1
            return self.buf[pos]
        value = shift = 0
        for _ in range(5):
            b = self.buf[self._need(1)]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
        raise MalformedError(f"unsigned varint longer than 5 bytes at position {self.pos}")

    def raw(self, n: int) -> bytes:
        pos = self._need(n)
        return bytes(self.buf[pos:pos + n])

    def _text(self, n: int) -> str:
        pos = self._need(n)
        try:
            return bytes(self.buf[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedError(f"string at position {pos} is not UTF-8: {e.reason}") from None

    def _length(self, n: int, what: str) -> int | None:
        if n == -1:
            return None
        if n < -1:
            raise MalformedError(f"{what} length {n} at position {self.pos}")
        return n

    def string(self) -> str | None:
        n = self._length(self.int16(), "string")
        return None if n is None else self._text(n)

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def bytes_(self) -> bytes | None:
        n = self._length(self.int32(), "bytes")
        return None if n is None else self.raw(n)

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n)

    def array_length(self, compact: bool) -> int | None:
        n = self.uvarint() - 1 if compact else self._length(self.int32(), "array")
        if n is None or n < 0:
            return None
        if n > self.end - self.pos:  # every element takes at least one byte
            raise MalformedError(f"array of {n} elements at position {self.pos} is longer than the frame")
        return n

    def skip_tagged_fields(self) -> dict[int, bytes]:
        """Read a tagged-field section; returns the raw fields by tag."""
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out


class Writer:
    """Encodes into ``buf``. A RecordsSlice written as bytes is not copied: its length is written
    and ``holes`` notes where its bytes go (framing.SplicedFrame), to be sent from its file."""

    __slots__ = ("buf", "holes")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.holes: list[tuple[int, RecordsSlice]] = []

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: bytes) -> None:
        if len(v) != 16:
            raise ValueError(f"a uuid is 16 bytes, got {len(v)}")
        self.buf += v

    def uvarint(self, v: int) -> None:
        if v < 0:
            raise ValueError(f"unsigned varint of a negative value {v}")
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
            return
        data = v.encode("utf-8")
        self.int16(len(data))
        self.buf += data

    def compact_string(self, v: str | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        data = v.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.buf += data

    def bytes_(self, v: bytes | bytearray | memoryview | RecordsSlice | None) -> None:
        if v is None:
            self.int32(-1)
            return
        self.int32(len(v))
        self._body(v)

    def compact_bytes(self, v: bytes | bytearray | memoryview | RecordsSlice | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        self.uvarint(len(v) + 1)
        self._body(v)

    def _body(self, v: bytes | bytearray | memoryview | RecordsSlice) -> None:
        if isinstance(v, RecordsSlice):
            if v.size:
                self.holes.append((len(self.buf), v))
        else:
            self.buf += v

    def array_length(self, n: int | None, compact: bool) -> None:
        if compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)
