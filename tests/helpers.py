"""Shared test helpers: building batches and logs, reading them back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from logkeeper.index.abstract_index import AbstractIndex
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.compression import Codec
from logkeeper.records.reader import iter_batches

NOW_MS = 1_700_000_000_000
IndexT = TypeVar("IndexT", bound=AbstractIndex[Any])


class ManualClock:
    """A clock for virtual time: ``clock()`` returns now; ``advance`` moves it."""

    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def records(n: int, *, start: int = 0, ts: int = NOW_MS, key_prefix: bytes = b"k",
            value: bytes = b"v" * 20) -> list[Record]:
    return [Record(start + i, ts + i, key_prefix + str(start + i).encode(), value) for i in range(n)]


def batch(n: int = 3, *, start: int = 0, ts: int = NOW_MS, codec: Codec = Codec.NONE,
          value: bytes = b"v" * 20, **kw: object) -> bytes:
    return build_batch(records(n, start=start, ts=ts, value=value), codec=codec, **kw)  # type: ignore[arg-type]


def make_log(tmp_path: Path, props: dict[str, object] | None = None, *, name: str = "topic-0",
             clock: ManualClock | None = None, **kw: object) -> Log:
    return Log(tmp_path / name, LogConfig.from_props(props or {}), clock_ms=clock or ManualClock(), **kw)  # type: ignore[arg-type]


def log_records(log: Log) -> list[Record]:
    """Every record of the log, read through its segments' files."""
    out: list[Record] = []
    for seg in log.segments.values():
        data = np.frombuffer(seg.log.read(0, seg.size_in_bytes), dtype=np.uint8)
        for b in iter_batches(data):
            out.extend(b.records)
    return out


def offsets_of(recs: Sequence[Record]) -> list[int]:
    return [r.offset for r in recs]


def index_in(cls: type[IndexT], path: Path, base_offset: int, max_entries: int) -> Iterator[IndexT]:
    """The body of an index test's fixture: a new ``cls`` index of ``max_entries`` slots at
    ``path``, its handles released after the test (as a crashed process leaves it, not trimmed)."""
    idx = cls(path, base_offset, max_entries * cls.entry_size)
    yield idx
    idx.close_handler()


def fresh_index(cls: type[IndexT], path: Path, base_offset: int, max_entries: int, warm_entries: int) -> IndexT:
    """A new index for one hypothesis example (the examples share the test's tmp_path: the last
    one's file goes) whose warm section is ``warm_entries`` long, so that both of the lookup's
    search branches run on a small index."""
    path.unlink(missing_ok=True)
    idx = cls(path, base_offset, max_entries * cls.entry_size)
    idx._warm_entries = warm_entries
    return idx
