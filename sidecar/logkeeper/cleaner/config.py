"""CleanerConfig: the broker-level ``log.cleaner.*`` keys with Kafka 4.0's defaults.

Each key is defined once in ``CLEANER_SETTINGS``; CleanerConfig's fields carry the same names
with dots as underscores (a unit test checks both agree).

Kafka's keys and what logkeeper does with them:

- ``log.cleaner.threads`` (1), ``log.cleaner.dedupe.buffer.size`` (128 MiB, shared by the
  threads: each offset map gets size / threads), ``log.cleaner.io.buffer.load.factor`` (0.9,
  Kafka's name for the map's load factor), ``log.cleaner.io.buffer.size`` (512 KiB: Kafka reads
  segments in chunks of size / threads / 2; logkeeper maps whole segments, and uses the chunk
  size only to account "Indexed ... MB" exactly as Kafka does), ``log.cleaner.backoff.ms``
  (15 s), ``log.cleaner.io.max.bytes.per.second`` (unlimited: read plus written bytes, over all
  threads), ``log.cleaner.enable`` (true).
- Kafka's CleanerConfig also defines the broker synonyms of topic keys
  (``log.cleaner.min.cleanable.ratio``, ``log.cleaner.delete.retention.ms``,
  ``log.cleaner.min.compaction.lag.ms``, ``log.cleaner.max.compaction.lag.ms``) and reads
  ``message.max.bytes``. In logkeeper those are defined once, with the other broker defaults of
  topic keys, in log/manager_config.py (``BROKER_LOG_DEFAULT_SETTINGS``); the topics' LogConfig
  carries them, and the cleaner reads them there.

Deliberate additions (not Kafka's):

- ``log.cleaner.uncleanable.retry.initial.ms`` (60 s) and ``log.cleaner.uncleanable.retry.max.ms``
  (1 h): a partition whose cleaning failed is retried after this backoff, doubling each time,
  instead of staying uncleanable until a restart.
- ``producer.id.expiration.ms`` (Kafka's broker key, default 1 day): the cleaner derives the
  producers still active (whose last batch it must keep) from batch headers (cleaner/producers.py)
  and expires those idle longer than this, as Kafka's producer state does.
- ``log.cleaner.offload.*``: handing a big backlog to the Spark job (cleaner/offload.py): enable
  (false), runner (subprocess; external: the operator runs the job),
  command (empty: this Python running ``logkeeper``, i.e. Spark in a subprocess; or
  e.g. ``spark-submit ... submit.py`` to reach a cluster), spark.master (local[*]; empty: none
  passed, the command's), timeout.ms (1 h), dirty.bytes.threshold (-1: only logs whose keys
  exceed the offset map), backlog.min.passes (6: a backlog goes to Spark once the in-process
  cleaner would need that many passes of its offset map for it, the crossover measured on 2 cores:
  bench/results/spark_crossover.md), staging.dir (empty: ``.logkeeper-staging`` in each log
  directory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..log.log_config import DAY_MS
from ..settings import Setting, SettingGroup, at_least, between, one_of

MIB = 1024 * 1024
DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE: "unlimited"

CLEANER_SETTINGS = SettingGroup("cleaner", (
    Setting("log.cleaner.threads", int, 1, "Number of background cleaner threads.", at_least(0)),
    Setting("log.cleaner.dedupe.buffer.size", int, 128 * MIB,
            "Memory for the offset maps of all cleaner threads together.", at_least(0), "bytes"),
    Setting("log.cleaner.io.buffer.load.factor", float, 0.9,
            "Share of the offset map's slots filled before a round stops mapping.", between(0.0, 1.0)),
    Setting("log.cleaner.io.buffer.size", int, 512 * 1024,
            "Kafka's I/O buffer memory of all threads (reads in chunks of size / threads / 2).",
            at_least(0), "bytes"),
    Setting("log.cleaner.backoff.ms", int, 15000, "Sleep when no log is cleanable.", at_least(0), "ms"),
    Setting("log.cleaner.io.max.bytes.per.second", float, DOUBLE_MAX,
            "Read plus written bytes per second of all cleaner threads together.", None, "bytes"),
    Setting("log.cleaner.enable", bool, True, "Run the cleaner threads.", None),
    Setting("log.cleaner.uncleanable.retry.initial.ms", int, 60000,
            "First retry delay of a partition whose cleaning failed (doubles per failure).",
            at_least(0), "ms"),
    Setting("log.cleaner.uncleanable.retry.max.ms", int, 3600000,
            "Largest retry delay of a partition whose cleaning failed.", at_least(0), "ms"),
    Setting("producer.id.expiration.ms", int, DAY_MS,
            "Idle time after which a producer no longer pins its last batch.", at_least(1), "ms"),
    Setting("log.cleaner.offload.enable", bool, False,
            "Hand a compaction backlog too big for the offset map to the Spark job (cleaner/offload.py).", None),
    Setting("log.cleaner.offload.runner", str, "subprocess",
            "subprocess: the sidecar runs the job (log.cleaner.offload.command); external: it waits for a job "
            "someone else runs with the arguments its status shows (the operator's CompactionJob).",
            one_of("subprocess", "external")),
    Setting("log.cleaner.offload.command", str, "",
            "The job's program, split as a shell would, before its `spark-compact --log-dir ...` arguments; "
            "empty: this Python running `logkeeper` (Spark in a subprocess of the sidecar). For a cluster, e.g. "
            "`spark-submit --master k8s://https://... --deploy-mode cluster local:///<site-packages>/logkeeper/"
            "spark/submit.py` (README: the Spark path).", None),
    Setting("log.cleaner.offload.spark.master", str, "local[*]",
            "--master of the job (local[N], spark://host:port, k8s://...); empty: none passed (spark-submit's).",
            None),
    Setting("log.cleaner.offload.timeout.ms", int, 3600000,
            "Bound on one hand-off's job; past it the job is killed and the hand-off aborted.", at_least(1000), "ms"),
    Setting("log.cleaner.offload.dirty.bytes.threshold", int, -1,
            "Dirty bytes from which an eligible log goes to Spark even when its keys fit the map (-1: never).",
            at_least(-1), "bytes"),
    Setting("log.cleaner.offload.backlog.min.passes", int, 6,
            "A backlog goes to Spark once its estimated passes (its distinct keys over what this cleaner's offset "
            "map holds, rounded up) reach this; smaller ones stay with the cleaner threads. 6: where Spark local[2] "
            "overtakes the in-process cleaner with the default dedupe buffer on 2 cores "
            "(bench/results/spark_crossover.md); 2 hands off every backlog.", at_least(2)),
    Setting("log.cleaner.offload.staging.dir", str, "",
            "Where jobs write their output; empty: .logkeeper-staging inside each log directory (same file "
            "system: the cleaned segments are renamed in, not copied).", None),
))

@dataclass(frozen=True)
class CleanerConfig:
    """The cleaner's settings (Kafka's CleanerConfig), one field a key of CLEANER_SETTINGS."""

    log_cleaner_threads: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_buffer_size: int
    log_cleaner_backoff_ms: int
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_enable: bool
    log_cleaner_uncleanable_retry_initial_ms: int
    log_cleaner_uncleanable_retry_max_ms: int
    producer_id_expiration_ms: int
    log_cleaner_offload_enable: bool = False
    log_cleaner_offload_runner: str = "subprocess"
    log_cleaner_offload_command: str = ""
    log_cleaner_offload_spark_master: str = "local[*]"
    log_cleaner_offload_timeout_ms: int = 3600000
    log_cleaner_offload_dirty_bytes_threshold: int = -1
    log_cleaner_offload_backlog_min_passes: int = 6
    log_cleaner_offload_staging_dir: str = ""

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None) -> CleanerConfig:
        """Kafka's defaults overlaid with ``props`` (dotted keys; typed values or strings)."""
        return cls(**CLEANER_SETTINGS.resolve(props))

    # Kafka's names for the figures the cleaner uses.
    @property
    def num_threads(self) -> int:
        return self.log_cleaner_threads

    @property
    def dedupe_buffer_per_thread(self) -> int:
        """Each thread's offset map memory (Kafka caps it at 2 GiB; so does logkeeper)."""
        return min(self.log_cleaner_dedupe_buffer_size // max(1, self.log_cleaner_threads), (1 << 31) - 1)

    @property
    def io_buffer_per_cleaner(self) -> int:
        """Kafka's read (and write) buffer size per thread: io.buffer.size / threads / 2."""
        return self.log_cleaner_io_buffer_size // max(1, self.log_cleaner_threads) // 2

    @property
    def throttled(self) -> bool:
        return self.log_cleaner_io_max_bytes_per_second < DOUBLE_MAX
