"""CleanerHooks: the calls the LogManager makes into the log cleaner, no-ops until one plugs in.

The LogManager never imports the cleaner. The cleaner manager (``cleaner/``) replaces the fields
of ``manager.cleaner_hooks`` with its own methods; each field defaults to a no-op, so a manager
without a cleaner works unchanged.

| hook                 | called by the LogManager when...                                          |
|----------------------|---------------------------------------------------------------------------|
| pause_for_retention()| a retention pass starts: pause and return the partitions it may touch     |
|                      | (Kafka: the non-compacted logs not being cleaned); ``resume(tp)`` follows |
|                      | for each. None (the default: no cleaner): the pass covers every log       |
| abort_and_pause(tp)  | a truncation below the active segment is about to start (blocks until    |
|                      | any clean of tp has stopped)                                              |
| resume(tp)           | after each partition paused for retention and each abort_and_pause        |
| abort(tp)            | tp is deleted, or its cleanup policy stops including ``compact``          |
| truncate_checkpoint(dir, tp, offset) | after a truncation: the cleaner checkpoint of tp must not |
|                      | exceed ``offset`` (the new active segment's base offset)                   |
| remove_partition(dir, tp) | tp was deleted: drop it from the cleaner checkpoint of ``dir``       |
| on_dir_failure(dir)  | ``dir`` went offline: stop cleaning its logs                              |

Retention of compacted logs: with a cleaner plugged in, as in Kafka, the LogManager leaves the
compacted logs to the cleaner threads, which run ``retention.delete_old_segments`` on them between
cleanings (time and size for ``compact,delete``, the log start offset for both). Deliberate
choice: without a cleaner (``pause_for_retention`` None), the LogManager's pass covers every log,
compacted ones included, where Kafka's would skip them; so retention never depends on the cleaner
being enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .names import TopicPartition


def _none(_tp: TopicPartition) -> None:
    return None


def _none_dir(_dir: Path) -> None:
    return None


def _none_checkpoint(_dir: Path, _tp: TopicPartition, _offset: int) -> None:
    return None


def _none_remove(_dir: Path, _tp: TopicPartition) -> None:
    return None


@dataclass
class CleanerHooks:
    """The calls the LogManager makes into the cleaner (see the module docstring); no-ops by default."""

    pause_for_retention: Callable[[], Iterable[TopicPartition]] | None = None
    abort_and_pause: Callable[[TopicPartition], None] = _none
    resume: Callable[[TopicPartition], None] = _none
    abort: Callable[[TopicPartition], None] = _none
    truncate_checkpoint: Callable[[Path, TopicPartition, int], None] = _none_checkpoint
    remove_partition: Callable[[Path, TopicPartition], None] = _none_remove
    on_dir_failure: Callable[[Path], None] = _none_dir
