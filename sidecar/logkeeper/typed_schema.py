"""OpenAPI 3.0 schemas generated from typed dicts: one definition of a document's shape, which
mypy checks where the document is built and read, and from which its published schemas are made
(the sidecar's status contract, server/status_schema.py; the operator's CRD status schemas,
logkeeper_operator/crdgen.py). Low in the floors, so that the owner of any part of a document
(the cleaner's hand-off, the Spark job's progress) can type its part where it lives.

``schema_of`` turns a typed dict into a schema: int, float, str, bool, ``Literal`` (an enum),
``list``, ``X | None`` (nullable), a nested typed dict (a ``$ref`` to a component of its name when
``refs`` is given, inline otherwise: a CRD admits no ``$ref``), ``dict[str, Any]`` and ``Any`` (an
object the schema leaves open). ``NotRequired`` keys (or every key of a ``total=False`` class)
are optional, every other key required, and no other key is allowed. ``Annotated[T, Doc("...")]``
gives a field its description, ``Annotated[T, Also(format="date-time")]`` more keywords.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin, get_type_hints

Schema = dict[str, Any]


@dataclass(frozen=True)
class Doc:
    """A field's description in the generated schemas."""

    text: str


@dataclass(frozen=True)
class Also:
    """Keywords merged into a field's generated schema (a format, a CRD's list-map keys)."""

    keywords: tuple[tuple[str, Any], ...]

    def __init__(self, **keywords: Any) -> None:
        object.__setattr__(self, "keywords", tuple(keywords.items()))


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _nullable(schema: Schema) -> Schema:
    if "$ref" in schema:
        return {"allOf": [schema], "nullable": True}
    return {**schema, "nullable": True}


def _field(tp: Any, refs: bool, crd: bool) -> Schema:
    doc, also = None, {}
    if get_origin(tp) is Annotated:
        tp, *extras = get_args(tp)
        doc = next((e.text for e in extras if isinstance(e, Doc)), None)
        also = {k: v for e in extras if isinstance(e, Also) for k, v in e.keywords}
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        assert len(rest) == 1, tp
        schema = _nullable(_field(rest[0], refs, crd))
    elif _is_typed_dict(tp):
        schema = {"$ref": f"#/components/schemas/{tp.__name__}"} if refs else _object(tp, refs, crd)
    elif origin is Literal:
        schema = {"type": "string", "enum": list(args)}
    elif origin is list:
        schema = {"type": "array", "items": _field(args[0], refs, crd)}
    elif origin is dict or tp is Any:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True} if crd else {"type": "object"}
    elif tp is bool:
        schema = {"type": "boolean"}
    elif tp is int:
        schema = {"type": "integer", "format": "int64"}
    elif tp is float:
        schema = {"type": "number"}
    elif tp is str:
        schema = {"type": "string"}
    else:
        raise TypeError(f"no schema for {tp!r}")
    if also:
        schema = {**schema, **also}
    if doc:
        schema = {**schema, "description": doc}
    return schema


def typed_dicts_in(root: type) -> tuple[type, ...]:
    """``root`` and every typed dict its fields name, at any depth (each once, inner ones first):
    the components a document's ``$ref`` schemas need."""
    found: list[type] = []

    def visit(tp: Any) -> None:
        if _is_typed_dict(tp):
            if tp in found:
                return
            for hint in get_type_hints(tp, include_extras=True).values():
                visit(hint)
            found.append(tp)
        else:
            for arg in get_args(tp):
                visit(arg)

    visit(root)
    return tuple(found)


def schema_of(cls: type, *, refs: bool = False, crd: bool = False) -> Schema:
    """The OpenAPI 3.0 schema of the typed dict ``cls``. ``refs``: nested typed dicts as
    ``$ref``s to components of their names (else inline). ``crd``: a CRD's
    structural schema (every object inline, an open one ``x-kubernetes-preserve-unknown-fields``,
    no ``additionalProperties``: the API server prunes unknown keys instead)."""
    return _object(cls, refs and not crd, crd)


def _object(cls: type, refs: bool, crd: bool) -> Schema:
    hints = get_type_hints(cls, include_extras=True)
    props: dict[str, Schema] = {}
    required = []
    for name, tp in hints.items():
        # read from the hints: Python 3.11's __required_keys__ misses NotRequired written as a string
        if get_origin(tp) in (NotRequired, Required):
            wrapper, tp = get_origin(tp), get_args(tp)[0]
        else:
            wrapper = Required if cls.__total__ else NotRequired  # type: ignore[attr-defined]
        props[name] = _field(tp, refs, crd)
        if wrapper is Required:
            required.append(name)
    out: Schema = {"type": "object", "properties": props}
    if not crd:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out
