"""The topics created through the API and their configs, kept in every online log directory.

A Kafka broker keeps topic configs in its metadata log; the sidecar has none, so without this
file a topic created at run time would come back after a restart with the broker defaults (and
a compacted topic would fall under time retention). File ``logkeeper-topics.json`` at the top of
each log directory (Kafka's tools and brokers ignore plain files there)::

    {"version": 0, "generation": 7, "topics": {"accounts": {"configs": {"cleanup.policy": ["compact"]}}}}

    field       what
    version     0
    generation  incremented by every save; at load the highest readable generation wins
    topics      topic name -> its topic-level overrides (validated values, Kafka's dotted keys)

Saving (numbered crash steps, ``crash_hook(step)`` after each, per directory in turn):

1. ``topics:tmp-written``: ``logkeeper-topics.json.tmp`` written and fsynced. A crash leaves the
   ``.tmp`` (the LogManager deletes top-level ``*.tmp`` files at start) and the old file.
2. ``topics:renamed``: renamed over ``logkeeper-topics.json``, the directory fsynced. A crash
   after some directories leaves them at the new generation and the others at the old one: the
   new one wins at load.

An unreadable or malformed file is logged and skipped; another directory's copy is used. A
directory that fails to save is skipped (the LogManager takes it offline on its own I/O); the
save fails only when no directory took it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidConfigError, KafkaStorageError
from ..fileio import CrashHook, no_crash, replace_file_durably
from ..log.log_config import validate_topic_configs

log = logging.getLogger(__name__)

TOPICS_FILE = "logkeeper-topics.json"
VERSION = 0

class TopicStore:
    def __init__(self, dirs: Callable[[], Iterable[Path]], crash_hook: CrashHook = no_crash) -> None:
        self._dirs = dirs  # the online log directories, asked at each load and save
        self.crash_hook = crash_hook
        self._lock = threading.Lock()
        self.generation = 0
        self.topics: dict[str, dict[str, Any]] = {}

    def load(self) -> dict[str, dict[str, Any]]:
        """The topics of the newest readable copy (empty when there is none)."""
        best: tuple[int, dict[str, dict[str, Any]]] | None = None
        for d in self._dirs():
            parsed = self._read(Path(d) / TOPICS_FILE)
            if parsed is not None and (best is None or parsed[0] > best[0]):
                best = parsed
        with self._lock:
            self.generation, self.topics = best if best is not None else (0, {})
            return {k: dict(v) for k, v in self.topics.items()}

    @staticmethod
    def _read(path: Path) -> tuple[int, dict[str, dict[str, Any]]] | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.error("skipping unreadable topic file %s: %s", path, e)
            return None
        try:
            if doc["version"] != VERSION:
                raise ValueError(f"unknown version {doc['version']!r}")
            generation = int(doc["generation"])
            topics = {str(name): validate_topic_configs(entry.get("configs") or {})
                      for name, entry in dict(doc["topics"]).items()}
        except (KeyError, TypeError, ValueError, AttributeError, InvalidConfigError) as e:
            log.error("skipping malformed topic file %s: %s", path, e)
            return None
        return generation, topics

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self.topics.items()}

    def put(self, topic: str, configs: Mapping[str, Any]) -> None:
        self._save(lambda topics: topics.__setitem__(topic, dict(configs)))

    def remove(self, topic: str) -> None:
        self._save(lambda topics: topics.pop(topic, None))

    def _save(self, change: Callable[[dict[str, dict[str, Any]]], object]) -> None:
        with self._lock:
            topics = {k: dict(v) for k, v in self.topics.items()}
            change(topics)
            generation = self.generation + 1
            data = json.dumps({"version": VERSION, "generation": generation, "topics": {
                name: {"configs": configs} for name, configs in sorted(topics.items())}},
                separators=(",", ":"), sort_keys=True).encode()
            saved, errors = 0, []
            for d in self._dirs():
                try:
                    self._write(Path(d), data)
                    saved += 1
                except OSError as e:
                    errors.append(f"{d}: {e}")
                    log.error("cannot save the topic file in %s: %s", d, e)
            if not saved:
                raise KafkaStorageError(", ".join(str(d) for d in self._dirs()) or "(none online)",
                                        "the topic file could not be saved in any log directory: " + "; ".join(errors))
            self.generation, self.topics = generation, topics

    def _write(self, d: Path, data: bytes) -> None:
        replace_file_durably(d / TOPICS_FILE, data, on_step=lambda step: self.crash_hook("topics:" + step))
