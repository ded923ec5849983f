"""Workloads of the interop tests and the comparisons between Kafka's view and logkeeper's.

Keys, values and header keys are printable ASCII without spaces, so that DumpLogSegments' text
(``key: K payload: V``) compares exactly with logkeeper's bytes.
"""

from __future__ import annotations

import base64
import random
import shutil
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from logkeeper.log.checkpoint import OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.compression import codec_from_name

Headers = tuple[tuple[str, bytes | None], ...]

@dataclass(frozen=True)
class WorkItem:
    codec: str
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def keyed_workload(n: int, *, keys: int, seed: int, value_bytes: int = 60, tombstone_share: float = 0.03,
                   header_share: float = 0.1, codecs: Sequence[str] = ("none", "gzip", "snappy", "lz4", "zstd"),
                   run: int = 500) -> list[WorkItem]:
    """``n`` keyed records over ``keys`` keys; the codec changes every ``run`` records (cycling
    through ``codecs``); a share of tombstones (null values) and of records with headers."""
    rng = random.Random(seed)
    out: list[WorkItem] = []
    for i in range(n):
        codec = codecs[(i // run) % len(codecs)]
        key = b"key-%06d" % rng.randrange(keys)
        if rng.random() < tombstone_share:
            value = None
        else:  # printable: base64 of random bytes (the size is value_bytes rounded up to 4)
            value = b"v%d-" % i + base64.b64encode(rng.randbytes((value_bytes * 3 + 3) // 4))
        headers: Headers = ()
        if rng.random() < header_share:
            headers = (("trace", b"t-%d" % i), ("origin", None)) if i % 2 else (("trace", b"t-%d" % i),)
        out.append(WorkItem(codec, key, value, headers))
    return out


def append_workload(log: Log, items: Sequence[WorkItem], *, batch_records: int = 200, leader_epoch: int = -1,
                    now_ms: int | None = None) -> tuple[int, int]:
    """Append ``items`` through the Log API as a client would (offsets assigned by the log), in
    batches of up to ``batch_records`` consecutive records of one codec. Returns (first, last offset)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    first = log.log_end_offset
    i = 0
    while i < len(items):
        j = i + 1
        while j < len(items) and j - i < batch_records and items[j].codec == items[i].codec:
            j += 1
        recs = [Record(k - i, now - (len(items) - k), it.key, it.value, it.headers)
                for k, it in enumerate(items[i:j], start=i)]
        log.append(build_batch(recs, codec=codec_from_name(items[i].codec)), leader_epoch=leader_epoch)
        i = j
    return first, log.log_end_offset - 1


@dataclass(frozen=True)
class KV:
    offset: int
    key: bytes | None
    value: bytes | None

    def show(self) -> str:
        return f"{self.offset}:{self.key!r}={self.value!r}"


def diff_kv(left: Iterable[KV], right: Iterable[KV], left_name: str, right_name: str, limit: int = 15) -> str:
    """A short description of how two (offset, key, value) sequences differ ("" when equal)."""
    a = {r.offset: r for r in left}
    b = {r.offset: r for r in right}
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    changed = sorted(o for o in set(a) & set(b) if a[o] != b[o])
    if not (only_a or only_b or changed):
        return ""
    lines = [f"{len(a)} records in {left_name}, {len(b)} in {right_name}"]
    if only_a:
        lines.append(f"{len(only_a)} only in {left_name}: " + ", ".join(a[o].show() for o in only_a[:limit]))
    if only_b:
        lines.append(f"{len(only_b)} only in {right_name}: " + ", ".join(b[o].show() for o in only_b[:limit]))
    if changed:
        lines.append(f"{len(changed)} differ: " + "; ".join(f"{a[o].show()} vs {b[o].show()}" for o in changed[:limit]))
    return "\n".join(lines)


def _unb64(s: object) -> bytes | None:
    return None if s is None else base64.b64decode(str(s))


def committed_view(records: Sequence[Mapping[str, object]], *, open_ok: bool = False,
                   ) -> tuple[list[KV], list[KV], dict[str, int]]:
    """From ``logkeeper dump-log --json`` records: (every data record, the data records less those
    of aborted transactions, the number of COMMIT and ABORT markers). Raises if a transaction is
    left open (a read_committed consumer would stop at it), unless ``open_ok``."""
    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    markers = {"COMMIT": 0, "ABORT": 0}
    data: list[KV] = []
    for r in records:
        offset, pid = int(str(r["offset"])), int(str(r["producerId"]))
        if r["isControl"]:
            key = _unb64(r["key"])
            kind = "ABORT" if key is not None and struct.unpack(">hh", key[:4])[1] == 0 else "COMMIT"
            markers[kind] += 1
            if kind == "ABORT":
                aborted.update(pending.get(pid, []))
            pending.pop(pid, None)
            continue
        if r["isTransactional"]:
            pending.setdefault(pid, []).append(offset)
        data.append(KV(offset, _unb64(r["key"]), _unb64(r["value"])))
    if any(pending.values()) and not open_ok:
        raise AssertionError(f"a transaction is left open: {pending}")
    return data, [kv for kv in data if kv.offset not in aborted], markers


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def segment_files(partition_dir: Path) -> list[Path]:
    return sorted(p for p in partition_dir.iterdir() if p.name.endswith(SEGMENT_SUFFIXES))


def replace_segments(src: Path, dst: Path) -> list[str]:
    """Remove ``dst``'s segment and producer-snapshot files and copy ``src``'s in (partition.metadata
    and leader-epoch-checkpoint of ``dst`` stay). Returns the copied names."""
    for p in dst.iterdir():
        if p.name.endswith((*SEGMENT_SUFFIXES, ".snapshot")):
            p.unlink()
    copied = []
    for p in [*segment_files(src), *sorted(src.glob("*.snapshot"))]:
        shutil.copy2(p, dst / p.name)
        copied.append(p.name)
    return copied


def set_checkpoint(log_dir: Path, name: str, tp: TopicPartition, offset: int) -> None:
    """Set one partition's entry of a log directory's offset checkpoint file (kept otherwise)."""
    cp = OffsetCheckpointFile(log_dir / name)
    entries = cp.read()
    entries[tp] = offset
    cp.write(entries)
