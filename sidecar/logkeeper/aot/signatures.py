"""The kernels' signature notation, read without numba (guards) and with it (the build).

``"u1[], i8[], i8[][], i8, b -> (i8, i8)"``: arguments, then the result. A scalar is ``i1 i2 i4 i8
u1 u4 u8 b`` (int8 ... uint64, bool); ``X[]`` a 1-D and ``X[][]`` a 2-D C-contiguous array of X;
the result is one of those, ``none``, or a tuple of them in parentheses.

A type may also be a record (a numpy structured dtype) registered with :func:`record` under a
name: ``slot[]`` is then a 1-D C-contiguous array of those records. A kernel takes a few such
typed views (a table of rows, a one-row array of its state) instead of dozens of loose arrays and
scalars; inside the kernel a row's fields are read and written by name (``rows[r].count``), and a
one-row state array is how a kernel hands back what it changed.

An argument may also be ``bytes``: a Python ``bytes`` object, read by the kernel as a read-only
1-D uint8 array. It saves the caller an ``np.frombuffer`` (which costs about as much as the rest
of a call: bench/results/design_figures.md: aot, bytes arguments) on a hot path whose data arrives
as ``bytes`` (a produce request's records).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

SCALARS = {"i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64", "u1": "uint8", "u4": "uint32",
           "u8": "uint64", "b": "bool"}


class Type(NamedTuple):
    dtype: str  # numpy's name, a record's registered name, or "bytes"
    ndim: int  # 0 for a scalar; 1 for bytes


BYTES = Type("bytes", 1)

# name -> the structured dtype of a record type (see record())
RECORDS: dict[str, np.dtype[Any]] = {}


def record(name: str, fields: list[tuple[str, str]]) -> np.dtype[Any]:
    """Register the record type ``name`` (fields as numpy spells them, in order, each aligned as
    a C struct's) for kernel signatures, and return its dtype. One name, one layout: registering it again with
    other fields is an error, not a silent change of what compiled kernels read."""
    dtype = np.dtype(fields, align=True)
    if RECORDS.setdefault(name, dtype) != dtype:
        raise ValueError(f"record type {name!r} is already registered with other fields")
    if name in SCALARS or name == "bytes":
        raise ValueError(f"record type {name!r} shadows a scalar type")
    return dtype


def dtype_of(t: Type) -> np.dtype[Any]:
    """The numpy dtype of an array or scalar type (not bytes)."""
    return RECORDS[t.dtype] if t.dtype in RECORDS else np.dtype(t.dtype)


class Signature(NamedTuple):
    args: tuple[Type, ...]
    result: tuple[Type, ...] | Type | None  # a tuple's items, one type, or none


def _type(token: str, text: str) -> Type:
    token = token.strip()
    if token == "bytes":
        return BYTES
    base, bracket, dims = token.partition("[")
    ndim = (bracket + dims).count("[]")
    if len(bracket + dims) != 2 * ndim or ndim > 2:
        raise ValueError(f"kernel signature {text!r}: cannot read type {token!r}")
    if base in RECORDS:
        if ndim != 1:
            raise ValueError(f"kernel signature {text!r}: a record type is passed as a 1-D array ({token!r})")
        return Type(base, 1)
    if base not in SCALARS:
        raise ValueError(f"kernel signature {text!r}: cannot read type {token!r}")
    return Type(SCALARS[base], ndim)


def parse(text: str) -> Signature:
    args_text, arrow, result_text = text.partition("->")
    if not arrow:
        raise ValueError(f"kernel signature {text!r}: no '->' before the result")
    args = tuple(_type(t, text) for t in args_text.split(",")) if args_text.strip() else ()
    result_text = result_text.strip()
    result: tuple[Type, ...] | Type | None
    if result_text == "none":
        result = None
    elif result_text.startswith("(") and result_text.endswith(")"):
        result = tuple(_type(t, text) for t in result_text[1:-1].split(","))
    else:
        result = _type(result_text, text)
    if BYTES in ((result,) if isinstance(result, Type) else result or ()):
        raise ValueError(f"kernel signature {text!r}: bytes is an argument type only")
    return Signature(args, result)


def numba_signature(sig: Signature) -> Any:
    """The numba signature object (the build only: imports numba)."""
    from numba import from_dtype, types

    def nb(t: Type) -> Any:
        if t == BYTES:
            return types.Bytes(types.uint8, 1, "C", readonly=True)
        if t.dtype in RECORDS:
            return types.Array(from_dtype(RECORDS[t.dtype]), 1, "C")
        scalar = types.boolean if t.dtype == "bool" else getattr(types, t.dtype)
        return types.Array(scalar, t.ndim, "C") if t.ndim else scalar

    if sig.result is None:
        result = types.none
    elif isinstance(sig.result, Type):
        result = nb(sig.result)
    else:
        result = types.Tuple([nb(t) for t in sig.result])
    return result(*[nb(t) for t in sig.args])
