"""The job's progress and failure as the sidecar and users see them (no pyspark here).

While it runs, the driver rewrites ``<staging>/progress.json`` about once a second (to a
temporary name, then renamed: a reader sees a whole document or the previous one; not fsynced:
it is advisory, a crash loses nothing that matters). The sidecar shows it in /v1/status as the
partition's ``offload.progress`` while the hand-off runs (cleaner/offload.py), for any runner: the
staging directory is the one place both sides reach. Format (JSON, one object)::

    key             type   meaning
    stage           str    planning | starting-spark | keys | rewrite | checking | manifest | done
    tasks_done      int    the stage's units finished: chunks read (keys), groups written (rewrite)
    tasks_total     int    the stage's units in the plan (chunks, groups)
    bytes_done      int    bytes of segment the stage has read
    bytes_total     int    bytes of segment the stage reads in all
    bytes_written   int    bytes of cleaned segment staged so far
    spark_ui        str    the Spark UI's URL ("" when off)
    spark_stages    list   Spark's active stages: {id, tasks_done, tasks_total, tasks_active, tasks_failed}
    updated_ms      int    when the driver wrote this (epoch ms)

A stage's units are the job's own (a retried or re-run task is clamped, never counted past
the total), not Spark's tasks, whose numbers change with adaptive execution; Spark's are in
``spark_stages``.

On failure the driver writes ``<staging>/failure.json`` (offload_manifest.py) with ``reason`` (one line),
``stage`` (the stage above that was running) and ``traceback`` (the driver's whole traceback; a
failure in a Spark task carries the worker's Python traceback inside Spark's error).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

PROGRESS = "progress.json"

PLANNING = "planning"
STARTING = "starting-spark"
KEYS = "keys"
REWRITE = "rewrite"
CHECKING = "checking"
MANIFEST_STAGE = "manifest"
DONE = "done"


class SparkStage(TypedDict):
    """One of Spark's active stages (its own numbers, which adaptive execution changes)."""

    id: int
    tasks_done: int
    tasks_total: int
    tasks_active: int
    tasks_failed: int


class OffloadProgress(TypedDict, total=False):
    """``progress.json`` as the sidecar shows it (the table above); ``{}`` when there is none."""

    stage: str
    tasks_done: int
    tasks_total: int
    bytes_done: int
    bytes_total: int
    bytes_written: int
    spark_ui: str
    spark_stages: list[SparkStage]
    updated_ms: int


@dataclass
class Progress:
    stage: str = PLANNING
    tasks_done: int = 0
    tasks_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    bytes_written: int = 0
    spark_ui: str = ""
    spark_stages: list[SparkStage] = field(default_factory=list)
    updated_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def write_progress(staging: Path, progress: Progress) -> None:
    """Best effort: a full disk or a removed staging directory must not fail the job. Renamed
    into place (a reader never sees half a document) but not fsynced: the file is rewritten every
    second and only shows progress, so losing it in a crash costs nothing (fileio's
    replace_file_durably is for files whose loss would)."""
    progress.updated_ms = int(time.time() * 1000)
    path = Path(staging) / PROGRESS
    tmp = path.with_name(PROGRESS + ".tmp")
    try:
        tmp.write_text(json.dumps(progress.to_dict()), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def read_progress(staging: str | Path) -> OffloadProgress:
    """The job's last progress document, {} when there is none (yet) or it is unreadable; keys
    this version does not know are left out (the status contract admits no other)."""
    if not staging:
        return {}
    try:
        doc = json.loads((Path(staging) / PROGRESS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return cast(OffloadProgress, {k: v for k, v in doc.items() if k in OffloadProgress.__annotations__})
