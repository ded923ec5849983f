"""The manifest a Spark compaction leaves in its staging directory (no pyspark here).

``<staging>/manifest.json`` is written last (to ``manifest.json.tmp``, fsynced, renamed, the
directory fsynced): while it is absent the staging directory holds no usable result. The cleaned
segments are in ``<staging>/segments/``, named as live segments. Format (JSON, one object)::

    key                  type     meaning
    format               str      "logkeeper-spark-compact"
    version              int      1
    partition            str      "<topic>-<partition>"
    partition_dir        str      the directory the job read
    now_ms               int      the round's time (delete horizons, producer expiry)
    log_start_offset     int      the log start offset the round assumed
    first_dirty_offset   int      the cleaner checkpoint the round started from
    end_offset           int      the round's end: the first uncleanable offset (a segment base)
    checkpoint           int      the new cleaner checkpoint (= end_offset)
    config               object   segment.bytes, segment.index.bytes, index.interval.bytes,
                                  delete.retention.ms, producer.id.expiration.ms
    inputs               list     every segment replaced, in offset order:
                                  {base_offset, name, size, crc32c} of its .log file
    outputs              list     one per cleaned segment, in offset order:
                                  {base_offset, replaces: [base offsets], files: [{name, size, crc32c}]}
    stats                object   keys, records and bytes read and written, seconds per stage
    spark                object   master, version, application id, executors' cores

CRCs are CRC-32C of whole files, as unsigned integers. The sidecar swaps the outputs in only when
every input is still a segment of the log with that size and CRC, the inputs are exactly the
log's segments below ``end_offset``, and every output file has its size and CRC (offload.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import replace_file_durably

FORMAT = "logkeeper-spark-compact"
VERSION = 1
MANIFEST = "manifest.json"
FAILURE = "failure.json"
SEGMENTS_DIR = "segments"


class ManifestError(Exception):
    """A manifest that is missing, unreadable or not of this format."""


@dataclass(frozen=True)
class StagedFile:
    name: str
    size: int
    crc32c: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "crc32c": self.crc32c}


@dataclass(frozen=True)
class InputSegment:
    base_offset: int
    name: str
    size: int
    crc32c: int

    def to_dict(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "name": self.name, "size": self.size, "crc32c": self.crc32c}


@dataclass(frozen=True)
class OutputSegment:
    base_offset: int
    replaces: tuple[int, ...]
    files: tuple[StagedFile, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "replaces": list(self.replaces),
                "files": [f.to_dict() for f in self.files]}


@dataclass(frozen=True)
class Manifest:
    partition: str
    partition_dir: str
    now_ms: int
    log_start_offset: int
    first_dirty_offset: int
    end_offset: int
    checkpoint: int
    config: dict[str, int]
    inputs: tuple[InputSegment, ...]
    outputs: tuple[OutputSegment, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    spark: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "partition": self.partition,
                "partition_dir": self.partition_dir, "now_ms": self.now_ms,
                "log_start_offset": self.log_start_offset, "first_dirty_offset": self.first_dirty_offset,
                "end_offset": self.end_offset, "checkpoint": self.checkpoint, "config": dict(self.config),
                "inputs": [i.to_dict() for i in self.inputs], "outputs": [o.to_dict() for o in self.outputs],
                "stats": dict(self.stats), "spark": dict(self.spark)}

    @classmethod
    def from_dict(cls, doc: Any) -> Manifest:
        try:
            if doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise ManifestError(f"not a {FORMAT} manifest of version {VERSION}")
            return cls(
                str(doc["partition"]), str(doc["partition_dir"]), int(doc["now_ms"]), int(doc["log_start_offset"]),
                int(doc["first_dirty_offset"]), int(doc["end_offset"]), int(doc["checkpoint"]),
                {str(k): int(v) for k, v in doc["config"].items()},
                tuple(InputSegment(int(i["base_offset"]), str(i["name"]), int(i["size"]), int(i["crc32c"]))
                      for i in doc["inputs"]),
                tuple(OutputSegment(int(o["base_offset"]), tuple(int(b) for b in o["replaces"]),
                                    tuple(StagedFile(str(f["name"]), int(f["size"]), int(f["crc32c"]))
                                          for f in o["files"]))
                      for o in doc["outputs"]),
                dict(doc.get("stats") or {}), dict(doc.get("spark") or {}))
        except ManifestError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ManifestError(f"malformed manifest: {type(e).__name__}: {e}") from None


def _write_json_atomically(path: Path, doc: dict[str, Any]) -> None:
    """The sidecar trusts what it reads here: written by fileio's durable replace (temp, fsync,
    rename, fsync the directory), so a crash leaves the old file or the new one."""
    replace_file_durably(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def write_manifest(staging: Path, manifest: Manifest) -> Path:
    path = Path(staging) / MANIFEST
    _write_json_atomically(path, manifest.to_dict())
    return path


def read_manifest(staging: Path) -> Manifest:
    path = Path(staging) / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: {e}") from None
    return Manifest.from_dict(doc)


def write_failure(staging: Path, reason: str, stage: str = "", traceback: str = "") -> None:
    """What a failed job leaves for the sidecar (best effort): ``failure.json`` {"reason": one line,
    "stage": the job's stage that failed (offload_progress.py), "traceback": the driver's whole traceback};
    stage and traceback are left out when empty (a job cancelled from outside has neither)."""
    try:
        doc = {"reason": reason, **({"stage": stage} if stage else {}),
               **({"traceback": traceback} if traceback else {})}
        _write_json_atomically(Path(staging) / FAILURE, doc)
    except OSError:
        pass


def read_failure_doc(staging: Path) -> dict[str, Any] | None:
    """The whole failure.json (reason, stage, traceback), None when absent or unreadable."""
    try:
        doc = json.loads((Path(staging) / FAILURE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_failure(staging: Path) -> str | None:
    """The failure's one-line reason, prefixed with the stage that failed when the job named it."""
    doc = read_failure_doc(staging)
    if doc is None:
        return None
    reason = str(doc.get("reason", "unknown"))
    return f"{reason} (stage {doc['stage']})" if doc.get("stage") else reason
