"""server/topic_store.py: topic configs saved in every log directory, newest generation wins, crash steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logkeeper.errors import KafkaStorageError
from logkeeper.fileio import TMP_SUFFIX
from logkeeper.server.topic_store import TOPICS_FILE, TopicStore


class Crash(Exception):
    pass


def dirs(tmp_path: Path, n: int = 2) -> list[Path]:
    out = [tmp_path / f"d{i}" for i in range(n)]
    for d in out:
        d.mkdir(exist_ok=True)
    return out


def test_put_remove_and_reload(tmp_path: Path) -> None:
    ds = dirs(tmp_path)
    store = TopicStore(lambda: ds)
    assert store.load() == {}
    store.put("a", {"cleanup.policy": ["compact"]})
    store.put("b", {"retention.ms": 5})
    store.remove("b")
    for d in ds:
        doc = json.loads((d / TOPICS_FILE).read_text())
        assert doc == {"version": 0, "generation": 3, "topics": {"a": {"configs": {"cleanup.policy": ["compact"]}}}}
    assert TopicStore(lambda: ds).load() == {"a": {"cleanup.policy": ["compact"]}}


def test_newest_generation_wins_and_bad_copies_are_skipped(tmp_path: Path) -> None:
    ds = dirs(tmp_path, 3)
    store = TopicStore(lambda: ds)
    store.put("a", {"retention.ms": 1})
    TopicStore(lambda: ds[:1]).load()
    only_first = TopicStore(lambda: ds[:1])
    only_first.load()
    only_first.put("a", {"retention.ms": 2})  # generation 2 in d0 only
    (ds[1] / TOPICS_FILE).write_text("{not json")
    (ds[2] / TOPICS_FILE).write_text(json.dumps({"version": 0, "generation": 9, "topics": {"x": {"configs": {
        "segment.byte": 1}}}}))  # a key no longer known: skipped
    assert TopicStore(lambda: ds).load() == {"a": {"retention.ms": 2}}


@pytest.mark.parametrize("step", ["topics:tmp-written", "topics:renamed"])
def test_crash_steps(tmp_path: Path, step: str) -> None:
    ds = dirs(tmp_path)
    store = TopicStore(lambda: ds)
    store.put("a", {"retention.ms": 1})

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    store.crash_hook = crash
    with pytest.raises(Crash):
        store.put("a", {"retention.ms": 2})
    loaded = TopicStore(lambda: ds).load()
    if step == "topics:tmp-written":  # the old file is intact; the .tmp is left for the LogManager to remove
        assert loaded == {"a": {"retention.ms": 1}}
        assert (ds[0] / (TOPICS_FILE + TMP_SUFFIX)).exists()
    else:  # the first directory has the new generation: it wins
        assert loaded == {"a": {"retention.ms": 2}}


def test_a_failing_directory_is_skipped_unless_all_fail(tmp_path: Path) -> None:
    ds = dirs(tmp_path)
    gone = tmp_path / "gone"
    store = TopicStore(lambda: [gone, *ds])
    store.put("a", {})
    assert TopicStore(lambda: ds).load() == {"a": {}}
    nowhere = TopicStore(lambda: [gone])
    with pytest.raises(KafkaStorageError, match="could not be saved in any log directory"):
        nowhere.put("a", {})
    assert nowhere.snapshot() == {}
