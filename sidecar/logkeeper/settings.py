"""One definition per setting: key, type, default, validator, doc.

Config objects (LogConfig, the broker-level config, the cleaner config) are built from these
definitions, and so are the CRD schema and the chart values later on; a test checks that every
definition has its field and that they agree. Keys are Kafka's dotted names; a value may be given
as its type or as a string (config files, ``--config key=value``), and a bad one raises
InvalidConfigError naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

Validator = Callable[[Any], str | None]  # returns a complaint, or None when the value is fine


class Check:
    """A validator that also states its rule as OpenAPI schema keywords (``minimum``, ``enum``...),
    so that the CRD schema is generated from the same definition (operator/logkeeper_operator/crdgen.py)."""

    def __init__(self, fn: Callable[[Any], str | None], schema: Mapping[str, Any]) -> None:
        self._fn = fn
        self.schema: dict[str, Any] = dict(schema)

    def __call__(self, value: Any) -> str | None:
        return self._fn(value)


def schema_of(validator: Validator | None) -> dict[str, Any]:
    """The OpenAPI keywords a validator states ({} for a plain callable)."""
    return dict(validator.schema) if isinstance(validator, Check) else {}


def at_least(minimum: float) -> Validator:
    return Check(lambda v: None if v >= minimum else f"must be at least {minimum}", {"minimum": minimum})


def between(low: float, high: float) -> Validator:
    return Check(lambda v: None if low <= v <= high else f"must be between {low} and {high}",
                 {"minimum": low, "maximum": high})


def one_of(*choices: str) -> Validator:
    return Check(lambda v: None if v in choices else f"must be one of {', '.join(choices)}", {"enum": list(choices)})


def subset_of(*choices: str) -> Validator:
    def check(v: list[str]) -> str | None:
        bad = [x for x in v if x not in choices]
        return f"has unknown entries {bad}; allowed: {', '.join(choices)}" if bad else None

    return Check(check, {"items": {"type": "string", "enum": list(choices)}})


class Setting(NamedTuple):
    """One config key: its type, default, documentation, validator and unit."""

    key: str
    type: type
    default: Any
    doc: str
    validator: Validator | None = None
    unit: str = ""

    @property
    def attr(self) -> str:
        """The Python attribute name: dots become underscores."""
        return self.key.replace(".", "_").replace("-", "_")

    def parse(self, raw: Any) -> Any:
        value = self._coerce(raw)
        if self.validator is not None:
            complaint = self.validator(value)
            if complaint:
                raise InvalidConfigError(f"invalid value {raw} for config {self.key}: {complaint}")
        return value

    def _coerce(self, raw: Any) -> Any:
        try:
            if self.type is bool:
                if isinstance(raw, bool):
                    return raw
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    raise ValueError("expected true or false")
                return text == "true"
            if self.type is int:
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError("expected an integer")
                return int(raw) if not isinstance(raw, str) else int(raw.strip())
            if self.type is float:
                if isinstance(raw, bool):
                    raise ValueError("expected a number")
                return float(raw)
            if self.type is list:
                items = raw.split(",") if isinstance(raw, str) else list(raw)
                return [str(x).strip() for x in items if str(x).strip()]
            return str(raw)
        except (TypeError, ValueError):
            # Python's own words ("invalid literal for int() with base 10") are not the user's
            expected = {bool: "true or false", int: "an integer", float: "a number"}.get(self.type, "a string")
            raise InvalidConfigError(f"invalid value {raw} for config {self.key}: expected {expected}") from None


@dataclass(frozen=True)
class SettingGroup:
    """An ordered set of settings with lookups by key."""

    name: str
    settings: tuple[Setting, ...]
    by_key: dict[str, Setting] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_key", {s.key: s for s in self.settings})

    def __iter__(self) -> Iterable[Setting]:  # type: ignore[override]
        return iter(self.settings)

    def defaults(self) -> dict[str, Any]:
        return {s.key: s.default for s in self.settings}

    def resolve(self, overrides: Mapping[str, Any] | None = None, *, strict: bool = True) -> dict[str, Any]:
        """Defaults overlaid with validated overrides, as ``{attr: value}``.

        ``strict`` rejects keys this group does not define (a typo must not pass silently).
        """
        values = {s.attr: s.default for s in self.settings}
        for key, raw in (overrides or {}).items():
            setting = self.by_key.get(key)
            if setting is None:
                if strict:
                    raise InvalidConfigError(f"unknown {self.name} config key {key!r}")
                continue
            values[setting.attr] = setting.parse(raw)
        return values
