"""Schema-driven encoder and decoder of Kafka messages.

A message is written once as an indented text (messages.py), one field a line::

    name  type  [versions]  [null=VERSIONS]  [tag=N]  [default=VALUE]

- ``type``: int8 int16 int32 int64 uint16 float64 bool uuid string bytes records; ``[]`` (an
  array of the structs indented below), ``[]int32`` / ``[]string`` / ``[]int64`` (arrays of a
  primitive), ``{}`` (one struct indented below);
- ``versions``: ``N+``, ``N-M`` or ``N`` (default ``0+``): the field is on the wire in these
  versions only; outside them a decoder yields the default and an encoder writes nothing;
- ``null=VERSIONS``: the versions where it may be null (``null`` alone: wherever present);
- ``tag=N``: a tagged field (flexible versions only; written only when not at its default);
- ``default=VALUE``: an integer, ``true``/``false``, ``null`` or a word (string); otherwise 0,
  false, empty string, empty array, the zero uuid or a struct of defaults.

The message's first line names it and the first flexible version (``flex=N`` or ``flex=none``).
In flexible versions strings, bytes and arrays use the compact encodings and every struct ends
with a tagged-field section (primitives.py). Decoded messages are dicts keyed by field name;
decoders and encoders are built once per (message, version) and cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .primitives import ZERO_UUID, MalformedError, Reader, Writer

MAX_VERSION = 0x7FFF
Versions = tuple[int, int]
Decode = Callable[[Reader], Any]
Encode = Callable[[Writer, Any], None]

PRIMITIVES = ("int8", "int16", "int32", "int64", "uint16", "float64", "bool", "uuid", "string", "bytes", "records")


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # a primitive, "[]" (struct array), "[]PRIM", "{}" (struct)
    versions: Versions
    nullable: Versions | None
    tag: int | None
    default: Any
    fields: tuple[Field, ...]

    def present(self, v: int) -> bool:
        return self.versions[0] <= v <= self.versions[1]

    def nullable_at(self, v: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= v <= self.nullable[1]

    def default_value(self) -> Any:
        if self.type == "{}":
            return {f.name: f.default_value() for f in self.fields}
        if self.type.startswith("[]"):
            return None if self.default is None and self.nullable is not None else []
        return self.default


def parse_versions(text: str) -> Versions:
    if text == "none":
        return (MAX_VERSION + 1, MAX_VERSION + 1)
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    lo, _, hi = text.partition("-")
    return (int(lo), int(hi or lo))


def _type_default(type_: str) -> Any:
    if type_ in ("string",):
        return ""
    if type_ == "bool":
        return False
    if type_ == "uuid":
        return ZERO_UUID
    if type_ in ("bytes", "records"):
        return b""
    if type_ == "float64":
        return 0.0
    return 0


def _parse_default(text: str, type_: str) -> Any:
    if text == "null":
        return None
    if type_ == "bool":
        return text == "true"
    if type_.startswith("int") or type_ == "uint16":
        return int(text, 0)
    return text


@dataclass(frozen=True)
class Message:
    name: str
    flexible_from: int
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return version >= self.flexible_from

    def decoder(self, version: int) -> Decode:
        return _compiled(self, version)[0]

    def encoder(self, version: int) -> Encode:
        return _compiled(self, version)[1]

    def decode(self, reader: Reader, version: int) -> dict[str, Any]:
        out: dict[str, Any] = self.decoder(version)(reader)
        return out

    def encode(self, writer: Writer, value: dict[str, Any], version: int) -> None:
        self.encoder(version)(writer, value)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default_value() for f in self.fields}


def parse_message(text: str) -> Message:
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines() if ln.strip() and not ln.strip().startswith("#")]
    head = lines[0].split()
    name, flex = head[0], head[1]
    if not flex.startswith("flex="):
        raise ValueError(f"{name}: first line must be 'Name flex=N|none'")
    flexible_from = parse_versions(flex[5:])[0]
    fields, rest = _parse_fields(lines[1:], 0, name)
    if rest:
        raise ValueError(f"{name}: unexpected indentation at {rest[0]!r}")
    return Message(name, flexible_from, fields)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _parse_fields(lines: list[str], _depth: int, where: str) -> tuple[tuple[Field, ...], list[str]]:
    out: list[Field] = []
    if not lines:
        return (), []
    level = _indent(lines[0])
    while lines and _indent(lines[0]) == level:
        parts = lines[0].split()
        lines = lines[1:]
        fname, ftype = parts[0], parts[1]
        versions: Versions = (0, MAX_VERSION)
        nullable: Versions | None = None
        tag: int | None = None
        default_text: str | None = None
        for p in parts[2:]:
            if p == "null":
                nullable = (0, MAX_VERSION)
            elif p.startswith("null="):
                nullable = parse_versions(p[5:])
            elif p.startswith("tag="):
                tag = int(p[4:])
            elif p.startswith("default="):
                default_text = p[8:]
            else:
                versions = parse_versions(p)
        sub: tuple[Field, ...] = ()
        if ftype in ("[]", "{}"):
            if not lines or _indent(lines[0]) <= level:
                raise ValueError(f"{where}.{fname}: a struct needs fields indented below it")
            sub, lines = _parse_fields(lines, _depth + 1, f"{where}.{fname}")
        elif ftype.startswith("[]"):
            if ftype[2:] not in PRIMITIVES:
                raise ValueError(f"{where}.{fname}: unknown element type {ftype[2:]!r}")
        elif ftype not in PRIMITIVES:
            raise ValueError(f"{where}.{fname}: unknown type {ftype!r}")
        default = _type_default(ftype) if default_text is None else _parse_default(default_text, ftype)
        out.append(Field(fname, ftype, versions, nullable, tag, default, sub))
    if lines and _indent(lines[0]) > level:
        raise ValueError(f"{where}: unexpected indentation at {lines[0]!r}")
    return tuple(out), lines


# ------------------------------------------------------------------------------ compilation
_CACHE: dict[tuple[int, int], tuple[Decode, Encode]] = {}


def _compiled(message: Message, version: int) -> tuple[Decode, Encode]:
    key = (id(message), version)
    got = _CACHE.get(key)
    if got is None:
        flex = message.is_flexible(version)
        got = (_struct_decoder(message.fields, version, flex, message.name),
               _struct_encoder(message.fields, version, flex, message.name))
        _CACHE[key] = got
    return got


# Each primitive type of the schemas and how it is read and written. Strings and bytes (records
# are bytes) have a classic encoding and a flexible (compact) one; the other types have one.
_FIXED_WIDTH: dict[str, tuple[Decode, Encode]] = {
    "int8": (Reader.int8, Writer.int8), "int16": (Reader.int16, Writer.int16),
    "int32": (Reader.int32, Writer.int32), "int64": (Reader.int64, Writer.int64),
    "uint16": (Reader.uint16, Writer.uint16), "float64": (Reader.float64, Writer.float64),
    "bool": (Reader.boolean, Writer.boolean), "uuid": (Reader.uuid, Writer.uuid),
}
# flexible? -> (reader, writer)
_STRING: dict[bool, tuple[Decode, Encode]] = {False: (Reader.string, Writer.string),
                                              True: (Reader.compact_string, Writer.compact_string)}
_BYTES: dict[bool, tuple[Decode, Encode]] = {False: (Reader.bytes_, Writer.bytes_),
                                             True: (Reader.compact_bytes, Writer.compact_bytes)}


def _primitive(type_: str, flex: bool) -> tuple[Decode, Encode]:
    if type_ == "string":
        return _STRING[flex]
    if type_ in ("bytes", "records"):
        return _BYTES[flex]
    return _FIXED_WIDTH[type_]


def _prim_reader(type_: str, flex: bool) -> Decode:
    return _primitive(type_, flex)[0]


def _prim_writer(type_: str, flex: bool) -> Encode:
    return _primitive(type_, flex)[1]


def _field_decoder(f: Field, v: int, flex: bool, where: str) -> Decode:
    nullable = f.nullable_at(v)
    path = f"{where}.{f.name}"
    if f.type == "{}":
        return _struct_decoder(f.fields, v, flex, path)
    if f.type.startswith("[]"):
        elem = _struct_decoder(f.fields, v, flex, path) if f.type == "[]" else _prim_reader(f.type[2:], flex)

        def read_array(r: Reader) -> list[Any] | None:
            n = r.array_length(flex)
            if n is None:
                if not nullable:
                    raise MalformedError(f"{path}: null array where none is allowed")
                return None
            return [elem(r) for _ in range(n)]
        return read_array
    prim = _prim_reader(f.type, flex)
    if f.type in ("string", "bytes", "records") and not nullable:
        def read_not_null(r: Reader) -> Any:
            value = prim(r)
            if value is None:
                raise MalformedError(f"{path}: null where none is allowed")
            return value
        return read_not_null
    return prim


def _struct_decoder(fields: tuple[Field, ...], v: int, flex: bool, where: str) -> Decode:
    plain: list[tuple[str, Decode]] = []
    tagged: dict[int, tuple[str, Decode]] = {}
    absent: list[tuple[str, Any]] = []
    for f in fields:
        if not f.present(v):
            absent.append((f.name, f.default_value()))
        elif f.tag is not None and flex:
            tagged[f.tag] = (f.name, _field_decoder(f, v, flex, where))
            absent.append((f.name, f.default_value()))
        else:
            plain.append((f.name, _field_decoder(f, v, flex, where)))

    def decode(r: Reader) -> dict[str, Any]:
        out = {name: (dict(d) if isinstance(d, dict) else list(d) if isinstance(d, list) else d) for name, d in absent}
        for name, read in plain:
            out[name] = read(r)
        if flex:
            for tag, raw in r.skip_tagged_fields().items():
                known = tagged.get(tag)
                if known is not None:
                    sub = Reader(raw)
                    out[known[0]] = known[1](sub)
        return out
    return decode


def _field_encoder(f: Field, v: int, flex: bool, where: str) -> Encode:
    nullable = f.nullable_at(v)
    path = f"{where}.{f.name}"
    if f.type == "{}":
        return _struct_encoder(f.fields, v, flex, path)
    if f.type.startswith("[]"):
        elem = _struct_encoder(f.fields, v, flex, path) if f.type == "[]" else _prim_writer(f.type[2:], flex)

        def write_array(w: Writer, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise ValueError(f"{path}: null array where none is allowed")
                w.array_length(None, flex)
                return
            w.array_length(len(value), flex)
            for item in value:
                elem(w, item)
        return write_array
    prim = _prim_writer(f.type, flex)
    if f.type in ("string", "bytes", "records") and not nullable:
        def write_not_null(w: Writer, value: Any) -> None:
            prim(w, "" if value is None and f.type == "string" else b"" if value is None else value)
        return write_not_null
    return prim


def _struct_encoder(fields: tuple[Field, ...], v: int, flex: bool, where: str) -> Encode:
    plain: list[tuple[str, Any, Encode]] = []
    tagged: list[tuple[int, str, Any, Encode]] = []
    for f in fields:
        if not f.present(v):
            continue
        enc = _field_encoder(f, v, flex, where)
        if f.tag is not None and flex:
            tagged.append((f.tag, f.name, f.default_value(), enc))
        else:
            plain.append((f.name, f.default_value(), enc))
    tagged.sort(key=lambda t: t[0])

    def encode(w: Writer, value: Any) -> None:
        get = value.get
        for name, default, enc in plain:
            enc(w, get(name, default))
        if flex:
            present = [(tag, enc, get(name)) for tag, name, default, enc in tagged
                       if get(name, default) != default]
            w.uvarint(len(present))
            for tag, enc, v_ in present:
                sub = Writer()
                enc(sub, v_)
                if sub.holes:
                    raise ValueError(f"{where}: records in a tagged field cannot be sent from their file")
                w.uvarint(tag)
                w.uvarint(len(sub.buf))
                w.raw(sub.buf)
    return encode
