"""The status contract, defined once: the ``/v1/status`` document as typed dicts (issue 22).

The sidecar builds it (status.py, typed as ``Status``: mypy checks every key and value), the
OpenAPI document's schemas of it are generated from these classes (openapi.py, with
typed_schema.schema_of), and the operator reads it through the same types
(logkeeper_operator/status.py) and writes the LogVolume's status, whose CRD schema is generated
from the operator's own typed dicts (logkeeper_operator/status.py, crdgen.py).
tests/unit/test_status_contract.py checks a real sidecar's answer against the generated schemas
and the operator's parser. A partition's ``offload`` is typed where it is made: the hand-off by
cleaner/offload.py, the Spark job's progress by cleaner/offload_progress.py; so is its
``round_progress``, by cleaner/round_progress.py.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, TypedDict

from ..cleaner.metrics import CleanerMetricsDoc
from ..cleaner.offload import Offload
from ..cleaner.round_progress import RoundProgressStatus
from ..typed_schema import Also, Doc, typed_dicts_in


class LogDirStatus(TypedDict):
    path: str
    online: bool
    error: str | None
    partitions: Annotated[int, Doc("Partitions in it (when offline: the partitions it held)")]
    size_bytes: int
    total_bytes: int | None
    usable_bytes: int | None
    stray: Annotated[list[str], Doc("Entries the manager does not own (renamed aside, foreign)")]


class Uncleanable(TypedDict):
    reason: str
    failures: int
    retry_at_ms: int


class Round(TypedDict):
    """A partition's last cleaning round (server/cleaning.py's RoundReport)."""

    dirty_section: Annotated[list[int], Also(minItems=2, maxItems=2),
                             Doc("[first offset, end offset) of the dirty section cleaned")]
    finished_ms: int
    bytes_read: int
    bytes_written: int
    messages_read: int
    messages_written: int
    map_messages_read: int
    invalid_messages_read: int
    buffer_utilization: float
    elapsed_secs: float
    elapsed_index_secs: float
    size_reduction_percent: float
    stats_line: Annotated[str, Doc("Kafka's stats line of the round")]


class BacklogDetail(TypedDict):
    """The cleaner's estimate of a backlog (cleaner/backlog.py's Backlog)."""

    topic_partition: str
    first_dirty_offset: int
    first_uncleanable_offset: int
    estimated_keys: Annotated[int, Doc("Distinct keys of the dirty section (HyperLogLog)")]
    map_keys: Annotated[int, Doc("Keys one offset map holds")]
    passes: int
    dirty_bytes: int
    clean_bytes: int
    recopied_bytes: int
    marked_ms: int


class PartitionStatus(TypedDict):
    topic: str
    partition: int
    state: Literal["online"]
    log_dir: str
    size_bytes: int
    segments: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    recovery_point: int
    compacted: bool
    cleaner_checkpoint: int | None
    dirty_ratio: Annotated[float | None, Doc("Cleanable / (clean + cleanable) bytes; null unless compacted")]
    cleanable_bytes: int | None
    cleaning_state: Annotated[str, Doc("none, in-progress, aborted or paused(n)")]
    round_progress: Annotated[RoundProgressStatus | None, Doc("How far the round cleaning it now has come, "
                                                              "while one runs")]
    last_round: Round | None
    uncleanable: Uncleanable | None
    backlog: Annotated[bool, Doc("More keys than one offset map holds (cleaner/backlog.py)")]
    backlog_detail: BacklogDetail | None
    offload: Annotated[Offload | None, Doc("The hand-off of the backlog to a Spark job, when it had one")]
    error: NotRequired[Annotated[str, Doc("Why the dirty ratio could not be read (the log closed meanwhile)")]]


class OfflinePartition(TypedDict):
    topic: str
    partition: int
    state: Annotated[Literal["offline"], Doc("The log directory failed, or the partition has a copy in two: "
                                             "requests for it answer 503 storage_error")]
    log_dir: str
    paths: Annotated[list[str], Doc("Its directories on disk")]
    error: Annotated[str, Doc("Why it is offline, and how to repair it")]


class CleanerStatus(CleanerMetricsDoc):
    """Kafka's cleaner metrics by their names (cleaner/metrics.py), and the threads."""

    threads: Annotated[int, Doc("log.cleaner.threads started")]
    alive_threads: int


class Status(TypedDict):
    ready: bool
    log_dirs: list[LogDirStatus]
    partitions: list[PartitionStatus]
    offline_partitions: list[OfflinePartition]
    cleaner: Annotated[CleanerStatus, Doc("Kafka's cleaner metrics by name (max-buffer-utilization-percent, ...), "
                                          "uncleanable, backlogs, states, rounds, offloads, threads, alive_threads")]


STATUS_TYPES: tuple[type, ...] = typed_dicts_in(Status)  # every part, the hand-off's included
