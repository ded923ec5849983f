"""``logkeeper clean LOG_DIR``: run_clean over a whole log directory."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from logkeeper.cleaner.clean_command import CLEAN_SHUTDOWN_FILE, run_clean
from logkeeper.errors import InvalidConfigError
from logkeeper.index.lazy_index import LazyIndex
from logkeeper.log.checkpoint import OffsetCheckpointFile
from logkeeper.log.log import Log
from logkeeper.log.log_config import LogConfig
from logkeeper.log.names import TopicPartition
from logkeeper.log_dir_rule import NotALogDirError
from tests.cleaner_logs import append_kvs, ensure_valid_segments, keys_in_log

NOW = 1_700_000_000_000
STATS = re.compile(
    r"\n\tLog cleaner thread 0 cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)\n"
    r"\t[\d,.]+ MB of log processed in [\d,.]+ seconds \((?:[\d,.]+|Infinity|NaN) MB/sec\)\.\n"
    r"\tIndexed [\d,.]+ MB in [\d.]+ seconds \((?:[\d,.]+|Infinity|NaN) Mb/sec, (?:[\d.]+|NaN)% of total time\)\n"
    r"\tBuffer utilization: [\d.]+%\n"
    r"\tCleaned [\d,.]+ MB in [\d.]+ seconds \((?:[\d,.]+|Infinity|NaN) Mb/sec, (?:[\d.]+|NaN)% of total time\)\n"
    r"\tStart size: [\d,.]+ MB \([\d,]+ messages\)\n"
    r"\tEnd size: [\d,.]+ MB \([\d,]+ messages\)\n"
    r"\t-?[\d.]+% size reduction \(-?[\d.]+% fewer messages\)\n")

TIMES = re.compile(r"logkeeper clean: (?P<total>[\d.]+) s: opening (?P<logs>\d+ logs?) (?P<open>[\d.]+) s, "
                   r"cleaning (?P<clean>[\d.]+) s, closing (?P<close>[\d.]+) s, "
                   r"removing replaced files (?P<remove>[\d.]+) s")


def write_partition(root: Path, name: str, n: int, keys: int, *, roll: bool = True) -> Log:
    log = Log(root / name, LogConfig.from_props({"segment.bytes": 2048}), clock_ms=lambda: NOW)
    for i in range(n):
        append_kvs(log, [(str(i % keys).encode(), str(i).encode())])
    if roll:
        log.roll()
    log.flush()
    log.close()
    return log


def reopen(root: Path, name: str) -> Log:
    return Log(root / name, LogConfig.from_props({"segment.bytes": 2048}), clock_ms=lambda: NOW)


def test_clean_a_directory(tmp_path: Path) -> None:
    write_partition(tmp_path, "orders-0", 400, 7)
    write_partition(tmp_path, "orders-1", 300, 300)  # all keys distinct: nothing to drop
    write_partition(tmp_path, "users-0", 10, 5, roll=False)  # only an active segment: nothing cleanable
    (tmp_path / "orders-2.0123456789abcdef0123456789abcdef-delete").mkdir()
    (tmp_path / "meta.properties").write_text("version=1\n")
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":1}')
    out = io.StringIO()
    assert run_clean(tmp_path, {}, out, lambda: NOW) == 0
    text = out.getvalue()
    rounds = STATS.findall(text)
    assert [r[0] for r in rounds] == ["orders-0", "orders-1"]
    # then one line per log: what was done, or why nothing was
    lines = STATS.sub("", text).splitlines()
    assert [line.split(":")[0] for line in lines] == ["orders-0", "orders-1", "users-0"]
    assert re.fullmatch(r"orders-0: cleaned in 1 round: 400 records read, \d+ kept; [\d,]+ bytes read, [\d,]+ written",
                        lines[0]), lines[0]
    assert lines[1].startswith("orders-1: cleaned in 1 round: 300 records read, 300 kept;")
    assert lines[2] == ("users-0: not cleaned: nothing below the active segment (the active segment is never "
                        "cleaned)")
    assert "cleaned log users-0" not in text
    checkpoints = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
    orders0 = reopen(tmp_path, "orders-0")
    assert checkpoints[TopicPartition("orders", 0)] == orders0.active_segment.base_offset
    assert sorted(set(keys_in_log(orders0))) == sorted({str(i).encode() for i in range(7)})
    assert len(keys_in_log(orders0)) < 400
    ensure_valid_segments(orders0)
    orders0.close()
    recovery = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert recovery[TopicPartition("orders", 0)] == 400
    assert not list(tmp_path.glob("*/*.deleted")) and not list(tmp_path.glob("*/*.cleaned"))
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    # a second run finds nothing cleanable
    out = io.StringIO()
    assert run_clean(tmp_path, {}, out, lambda: NOW) == 0
    assert out.getvalue().splitlines() == [
        "orders-0: not cleaned: already clean up to the active segment (offset 400)",
        "orders-1: not cleaned: already clean up to the active segment (offset 300)",
        "users-0: not cleaned: nothing below the active segment (the active segment is never cleaned)"]


def test_a_round_opens_few_indexes_of_the_segments_it_replaces(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The round reads the dirty segments from their start and sizes its groups by the index
    files' lengths (LogSegment.index_bytes_bound): of the replaced segments' indexes
    (lazy_index.py) it opens only the offset index of each group's last segment, to find where
    the group's offsets end (group_writer.group_uppers)."""
    write_partition(tmp_path, "orders-0", 400, 7)
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":1}')  # no recovery at load
    segments = len(list((tmp_path / "orders-0").glob("*.log")))
    opened: list[str] = []
    get = LazyIndex.get

    def counting_get(self: LazyIndex, *, checked: bool = True) -> object:  # type: ignore[type-arg]
        if not self.is_open:
            opened.append(self.path.name)
        return get(self, checked=checked)

    monkeypatch.setattr(LazyIndex, "get", counting_get)
    assert run_clean(tmp_path, {}, io.StringIO(), lambda: NOW) == 0
    assert segments > 5
    assert all(name.endswith(".index") for name in opened) and len(opened) <= segments // 3, opened
    orders0 = reopen(tmp_path, "orders-0")
    assert sorted(set(keys_in_log(orders0))) == sorted({str(i).encode() for i in range(7)})
    ensure_valid_segments(orders0)
    orders0.close()


def test_config_overrides_and_bad_arguments(tmp_path: Path) -> None:
    write_partition(tmp_path, "t-0", 200, 4)
    with pytest.raises(InvalidConfigError, match=r"^unknown config key no\.such\.key: "):
        run_clean(tmp_path, {"no.such.key": "1"}, io.StringIO(), lambda: NOW)
    with pytest.raises(NotALogDirError, match="does not exist"):
        run_clean(tmp_path / "missing", {}, io.StringIO(), lambda: NOW)
    out = io.StringIO()
    # a tiny map: several rounds, and the backlog line
    overrides = {"log.cleaner.dedupe.buffer.size": str(24 * 3), "log.cleaner.min.cleanable.ratio": "0"}
    code = run_clean(tmp_path, overrides, out, lambda: NOW)
    assert code == 0
    text = out.getvalue()
    assert text.count("cleaned log t-0") > 1
    assert "backlog t-0: about 4 distinct keys" in text


def test_cleanup_policy_delete_is_left_alone(tmp_path: Path) -> None:
    write_partition(tmp_path, "t-0", 200, 4)
    out = io.StringIO()
    assert run_clean(tmp_path, {"cleanup.policy": "delete"}, out, lambda: NOW) == 0
    assert out.getvalue() == "t-0: not cleaned: cleanup.policy has no compact (only compacted logs are cleaned)\n"


def test_a_log_below_the_dirty_ratio_says_so(tmp_path: Path) -> None:
    write_partition(tmp_path, "t-0", 400, 4)
    assert run_clean(tmp_path, {}, io.StringIO(), lambda: NOW) == 0
    log = reopen(tmp_path, "t-0")
    append_kvs(log, [(b"0", b"late")])
    log.roll()
    log.close()
    out = io.StringIO()
    assert run_clean(tmp_path, {}, out, lambda: NOW) == 0
    assert re.fullmatch(r"t-0: not cleaned: dirty ratio 0\.\d\d is not above min\.cleanable\.dirty\.ratio 0\.5 "
                        r"\(--config min\.cleanable\.dirty\.ratio=0 cleans whatever is dirty\)\n", out.getvalue())
    out = io.StringIO()
    assert run_clean(tmp_path, {"min.cleanable.dirty.ratio": "0"}, out, lambda: NOW) == 0
    assert "t-0: cleaned in 1 round" in out.getvalue()


def test_a_corrupt_partition_fails_alone(tmp_path: Path) -> None:
    write_partition(tmp_path, "good-0", 200, 4)
    bad = write_partition(tmp_path, "bad-0", 200, 4)
    first = sorted((tmp_path / "bad-0").glob("*.log"))[0]
    with open(first, "r+b") as f:
        f.seek(16)
        f.write(b"\x07")  # bad magic
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":1}')
    out = io.StringIO()
    assert run_clean(tmp_path, {}, out, lambda: NOW) == 1
    text = out.getvalue()
    assert "cleaned log good-0" in text
    assert f"{bad.topic_partition}: failed: " in text and "bad magic" in text.lower()
    assert "Error" not in text  # a sentence about the data, no exception class names
    assert not list(tmp_path.glob("*/*.cleaned"))


def test_a_long_round_says_how_far_it_has_come_on_stderr(tmp_path: Path) -> None:
    write_partition(tmp_path, "orders-0", 400, 7)
    out, err = io.StringIO(), io.StringIO()
    # every 0 s: a line at each of the round's abort checks, in both phases
    assert run_clean(tmp_path, {}, out, lambda: NOW, err=err, progress_every_s=0) == 0
    progress = re.compile(r"orders-0: (indexing|cleaning) ([\d,.]+) of ([\d,.]+) MB \((\d+)%\), \d+ s into the round")
    *lines, times = err.getvalue().splitlines()
    assert lines and all(progress.fullmatch(line) for line in lines), lines
    assert TIMES.fullmatch(times), times
    parsed = [progress.fullmatch(line).groups() for line in lines]  # type: ignore[union-attr]
    phases = [p[0] for p in parsed]
    assert phases == sorted(phases, key=["indexing", "cleaning"].index), phases  # indexing, then cleaning
    assert set(phases) == {"indexing", "cleaning"}
    for phase in ("indexing", "cleaning"):
        percents = [int(p[3]) for p in parsed if p[0] == phase]
        assert percents == sorted(percents) and percents[0] >= 0 and percents[-1] <= 100
        assert all(float(p[1].replace(",", "")) <= float(p[2].replace(",", "")) for p in parsed if p[0] == phase)
    assert "orders-0: cleaned in 1 round" in out.getvalue() and "into the round" not in out.getvalue()


def test_a_short_round_prints_no_progress_only_where_the_time_went(tmp_path: Path) -> None:
    write_partition(tmp_path, "orders-0", 400, 7)
    write_partition(tmp_path, "orders-1", 40, 7)
    err = io.StringIO()
    assert run_clean(tmp_path, {}, io.StringIO(), lambda: NOW, err=err, progress_every_s=3600) == 0
    [line] = err.getvalue().splitlines()
    m = TIMES.fullmatch(line)
    assert m is not None and m["logs"] == "2 logs", line
    # the phases sum to the total, but for the rounding of five figures to 2 decimals
    assert abs(float(m["total"]) - sum(float(m[k]) for k in ("open", "clean", "close", "remove"))) <= 0.03
