"""LogDir: validation, the exclusive lock, the clean-shutdown marker (a test per crash step),
stale temporary files, partition directory kinds, duplicate directories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from logkeeper.errors import DuplicateLogDirError, LogDirLockedError, LogDirUnusableError
from logkeeper.log import log_dir as log_dir_module
from logkeeper.log.log_dir import (
    CLEAN_SHUTDOWN_FILE,
    LOCK_FILE,
    LogDir,
    capped_special_dir_name,
    open_log_dirs,
)
from logkeeper.log.names import DELETE_DIR_SUFFIX, PartitionDirName, TopicPartition


class Crash(Exception):
    pass


def crash_at(wanted: str):  # type: ignore[no-untyped-def]
    def hook(step: str) -> None:
        if step == wanted:
            raise Crash(step)

    return hook


# ------------------------------------------------------------------ validation
def test_missing_directory_is_created(tmp_path: Path) -> None:
    d = LogDir(tmp_path / "a" / "b")
    d.prepare()
    assert (tmp_path / "a" / "b").is_dir()


def test_a_file_is_not_a_log_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(LogDirUnusableError, match="not a directory") as e:
        LogDir(tmp_path / "f").prepare()
    assert str(tmp_path / "f") in str(e.value)


def test_uncreatable_directory_is_unusable(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(LogDirUnusableError, match="cannot create"):
        LogDir(tmp_path / "f" / "sub").prepare()


def test_unreadable_directory_is_unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "d"
    target.mkdir()
    real_access = os.access
    monkeypatch.setattr(log_dir_module.os, "access",
                        lambda p, mode: False if Path(p) == target else real_access(p, mode))
    with pytest.raises(LogDirUnusableError, match="not a readable directory"):
        LogDir(target).prepare()


def test_duplicates_by_canonical_path_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(DuplicateLogDirError) as e:
        open_log_dirs([str(tmp_path / "real"), str(tmp_path / "link")])
    assert str(tmp_path / "link") in str(e.value)
    with pytest.raises(DuplicateLogDirError):
        open_log_dirs([str(tmp_path / "real"), str(tmp_path / "real") + "/"])
    assert len(open_log_dirs([str(tmp_path / "real"), str(tmp_path / "other")])) == 2


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert LogDir("data").path == tmp_path / "data"


# ------------------------------------------------------------------ lock
def test_lock_is_exclusive_and_names_the_directory(tmp_path: Path) -> None:
    a, b = LogDir(tmp_path), LogDir(tmp_path)
    a.lock()
    with pytest.raises(LogDirLockedError) as e:
        b.lock()
    assert str(tmp_path) in str(e.value)
    assert not b.locked
    a.unlock()
    assert not (tmp_path / LOCK_FILE).exists()  # deleted at release, as Kafka does
    b.lock()
    assert (tmp_path / LOCK_FILE).exists()
    b.unlock()


def test_lock_retries_when_the_file_was_replaced_under_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([False, True])
    monkeypatch.setattr(log_dir_module, "_same_file", lambda fd, path: next(answers))
    d = LogDir(tmp_path)
    d.lock()
    assert d.locked
    d.unlock()


def test_lock_gives_up_after_repeated_replacements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_dir_module, "_same_file", lambda fd, path: False)
    with pytest.raises(LogDirLockedError):
        LogDir(tmp_path).lock()


def test_unlock_without_lock_is_a_no_op(tmp_path: Path) -> None:
    LogDir(tmp_path).unlock()


# ------------------------------------------------------------------ clean shutdown marker
def test_marker_is_kafkas_json(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.write_clean_shutdown_marker(42)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_text() == '{"version":0,"brokerEpoch":42}'
    assert d.read_clean_shutdown_epoch() == 42
    assert json.loads((tmp_path / CLEAN_SHUTDOWN_FILE).read_text()) == {"version": 0, "brokerEpoch": 42}


def test_marker_written_by_kafka_is_read(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":7,"extra":1}')
    assert LogDir(tmp_path).read_clean_shutdown_epoch() == 7


@pytest.mark.parametrize("text", ["", "{", '{"version":0}', '{"brokerEpoch":"x"}', "[]"])
def test_unreadable_marker_has_no_epoch(tmp_path: Path, text: str) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(text)
    assert LogDir(tmp_path).read_clean_shutdown_epoch() is None


def test_missing_marker_has_no_epoch(tmp_path: Path) -> None:
    assert LogDir(tmp_path).read_clean_shutdown_epoch() is None


def test_marker_write_crash_after_step_1_tmp_written(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    with pytest.raises(Crash):
        d.write_clean_shutdown_marker(1, crash_at("tmp-written"))
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / (CLEAN_SHUTDOWN_FILE + ".tmp")).exists()
    restarted = LogDir(tmp_path)
    assert restarted.remove_stale_temp_files() == [CLEAN_SHUTDOWN_FILE + ".tmp"]
    assert restarted.take_clean_shutdown_marker() is False  # -> recovery at the next start
    assert sorted(os.listdir(tmp_path)) == []


def test_marker_write_crash_after_step_2_renamed(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    with pytest.raises(Crash):
        d.write_clean_shutdown_marker(1, crash_at("renamed"))
    assert LogDir(tmp_path).take_clean_shutdown_marker() is True
    assert os.listdir(tmp_path) == []


def test_marker_take_crash_after_step_1_read_keeps_it(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.write_clean_shutdown_marker(1)
    with pytest.raises(Crash):
        d.take_clean_shutdown_marker(crash_at("read"))
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # nothing loaded yet: still clean


def test_marker_take_crash_after_step_2_deleted(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.write_clean_shutdown_marker(1)
    with pytest.raises(Crash):
        d.take_clean_shutdown_marker(crash_at("deleted"))
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert LogDir(tmp_path).take_clean_shutdown_marker() is False


def test_take_marker_records_the_state(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.write_clean_shutdown_marker(1)
    assert d.take_clean_shutdown_marker() is True
    assert d.had_clean_shutdown
    assert d.take_clean_shutdown_marker() is False
    assert not d.had_clean_shutdown


def test_stale_temp_files_are_removed_but_nothing_else(tmp_path: Path) -> None:
    for name in ("recovery-point-offset-checkpoint.tmp", "log-start-offset-checkpoint.tmp",
                 "recovery-point-offset-checkpoint", "meta.properties"):
        (tmp_path / name).write_text("x")
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log.tmp").write_text("x")  # not ours: left alone
    removed = LogDir(tmp_path).remove_stale_temp_files()
    assert sorted(removed) == ["log-start-offset-checkpoint.tmp", "recovery-point-offset-checkpoint.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["meta.properties", "recovery-point-offset-checkpoint", "t-0"]


# ------------------------------------------------------------------ partition directories
def test_partition_dirs_by_kind(tmp_path: Path) -> None:
    for name in ("topic-0", "topic-1", "my.topic_x-12", f"topic-2.{'a' * 32}-delete",
                 f"topic-3.{'b' * 32}-stray", f"topic-4.{'c' * 32}-future", "lost+found",
                 "__cluster_metadata-0", "remote-log-index-cache"):
        (tmp_path / name).mkdir()
    (tmp_path / "not-a-dir-0").write_text("file")
    listing = LogDir(tmp_path).partition_dirs()
    assert listing.logs == [(TopicPartition("my.topic_x", 12), tmp_path / "my.topic_x-12"),
                            (TopicPartition("topic", 0), tmp_path / "topic-0"),
                            (TopicPartition("topic", 1), tmp_path / "topic-1")]
    assert [p.name for p in listing.to_delete] == [f"topic-2.{'a' * 32}-delete"]
    assert [p.name for p in listing.stray] == [f"topic-3.{'b' * 32}-stray"]
    assert [p.name for p in listing.future] == [f"topic-4.{'c' * 32}-future"]
    assert sorted(p.name for p in listing.ignored) == ["__cluster_metadata-0", "lost+found",
                                                       "remote-log-index-cache"]


def test_capped_delete_name_fits_and_parses() -> None:
    tp = TopicPartition("x" * 249, 2147483647)
    name = capped_special_dir_name(tp, DELETE_DIR_SUFFIX)
    assert len(name.encode()) == 255
    parsed = PartitionDirName.parse(name)
    assert parsed.kind == DELETE_DIR_SUFFIX
    assert parsed.topic_partition.partition == 2147483647
    short = capped_special_dir_name(TopicPartition("t", 0), DELETE_DIR_SUFFIX)
    assert short.startswith("t-0.") and short.endswith("-delete")


def test_disk_usage(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    total, usable = d.disk_usage()
    assert total is not None and usable is not None and 0 <= usable <= total
    d.mark_offline("boom")
    assert d.disk_usage() == (None, None)
    assert "offline: boom" in repr(d)
