"""The parts of the Spark path that need no Spark session: exact decisions in the cleaner's filter,
the key reader, the plan, the rewrite, the manifest and the command line."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from logkeeper.cleaner.exact import ExactDecisions, sorted_unique
from logkeeper.cleaner.grouping import group_segments_by_size
from logkeeper.cleaner.offload_manifest import ManifestError, read_manifest, write_manifest
from logkeeper.cli import build_parser
from logkeeper.cli import main as cli_main
from logkeeper.log.names import TopicPartition
from logkeeper.spark import command as spark_command
from logkeeper.spark.extract import extract_keys
from logkeeper.spark.plan import CLEAN, DIRTY, MIN_OFFSET, Offsets, PlanError, plan_compaction
from tests.cleaner_logs import TxnProducer, append_kvs, read_log
from tests.spark_helpers import (
    NOW_MS,
    TP,
    build_log,
    clean_log_dir,
    config,
    open_log,
    output_files,
    plan_of,
    run_local_job,
    segment_files,
    set_checkpoint,
    staged_files,
    workload_copies,
    write_workload,
)


@pytest.mark.parametrize("seed", range(6))
def test_exact_decisions_rewrite_is_byte_identical_to_the_offset_map(tmp_path: Path, seed: int) -> None:
    cfg = config(seed)
    a, b = workload_copies(tmp_path, seed, "a", "b")
    checkpoint: int | None = None
    merged = 0  # groups written into the segment of the group before (group_writer.py)
    for round_no in range(2):
        if round_no:  # more data, so that round 2 has a clean section before its dirty one
            for d in (a, b):
                log = open_log(d, cfg)
                write_workload(log, random.Random(seed * 100 + round_no), 150)
                log.close()
        end = clean_log_dir(a, cfg, checkpoint)
        if checkpoint is not None:
            set_checkpoint(b, checkpoint)
        plan = plan_of(b, cfg, chunk_bytes=700)
        assert plan.end_offset == end
        assert plan.has_clean_side == (round_no > 0 and plan.first_dirty_offset > plan.log_start_offset)
        staging = tmp_path / f"staging-{round_no}"
        manifest = run_local_job(plan, staging)
        merged += len(plan.groups) - len(manifest.outputs)
        outputs = output_files(a / TP.dir_name, (o.base_offset for o in manifest.outputs))
        assert staged_files(staging) == outputs, f"round {round_no}"
        assert manifest.checkpoint == end
        # carry b forward exactly as a
        clean_log_dir(b, cfg, checkpoint)
        assert segment_files(a / TP.dir_name) == segment_files(b / TP.dir_name)
        checkpoint = end
    assert merged > 0  # the comparison covered merged segments on both sides


def test_exact_decisions_validate_their_arrays() -> None:
    with pytest.raises(ValueError, match="sorted"):
        ExactDecisions(10, 0, np.array([3, 2], dtype=np.int64), np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="int64"):
        ExactDecisions(10, 0, np.array([1, 2], dtype=np.int32), np.zeros(0, dtype=np.int64))
    d = ExactDecisions.of(99, 50, [70, 60, 60, 90], [10, 5])
    assert d.kept.tolist() == [60, 70, 90] and d.superseded.tolist() == [5, 10]


def test_sorted_unique_is_np_unique() -> None:
    rng = np.random.default_rng(5)
    for values in ([], [7], [3, 3, 3], rng.integers(-50, 50, 1000), rng.integers(0, 1 << 62, 5000),
                   np.arange(10, dtype=np.int32)):
        got = sorted_unique(values)
        assert got.dtype == np.int64 and got.tolist() == np.unique(np.asarray(values, dtype=np.int64)).tolist()
    source = np.array([2, 1, 2], dtype=np.int64)
    sorted_unique(source)
    assert source.tolist() == [2, 1, 2]  # the caller's array is left as it was


def test_extract_keys_reads_every_keyed_data_record_and_skips_control_and_listed_batches(tmp_path: Path) -> None:
    cfg = config(1, **{"segment.bytes": 1 << 20})
    log = open_log(tmp_path, cfg)
    append_kvs(log, [(b"a", b"1"), (None, b"2"), (b"", b"3")])
    p = TxnProducer(log, 9)
    aborted_first = p.append([b"x", b"y"])
    p.abort()
    from logkeeper.records.compression import Codec

    append_kvs(log, [(b"b", None), (b"c" * 300, b"4")], codec=Codec.ZSTD)
    log.roll()
    seg = log.segments.values()[0]
    position = seg.translate_offset(aborted_first)
    assert position is not None
    got = list(extract_keys(seg, 0, seg.size_in_bytes, MIN_OFFSET, 1 << 40, np.array([position.position])))
    keys = [(c.key(i), int(c.offsets[i])) for c in got for i in range(c.rows)]
    expected = [(r.key, r.offset) for r in read_log(log)
                if r.key is not None and not r.batch.is_control and not r.batch.is_transactional]
    assert keys == expected
    assert [k for k, _ in keys] == [b"a", b"", b"b", b"c" * 300]
    bounded = [(c.key(i), int(c.offsets[i])) for c in extract_keys(seg, 0, seg.size_in_bytes, 2, 7,
                                                                   np.zeros(0, dtype=np.int64))
               for i in range(c.rows)]
    assert all(2 <= o < 7 for _, o in bounded)
    log.close()


def test_plan_groups_chunks_and_offsets(tmp_path: Path) -> None:
    cfg = config(2)
    log_dir = build_log(tmp_path, 2)
    plan = plan_of(log_dir, cfg, chunk_bytes=500)
    log = open_log(log_dir, cfg)
    end = log.active_segment.base_offset
    assert (plan.log_start_offset, plan.first_dirty_offset, plan.end_offset) == (0, 0, end)
    groups = group_segments_by_size(log.segments.values(0, end), cfg.segment_bytes, cfg.max_index_size, end)
    assert [[plan.segments[i].base_offset for i in g.segments] for g in plan.groups] == \
        [[s.base_offset for s in g] for g in groups]
    log.close()
    assert not plan.has_clean_side
    for chunk in plan.chunks:
        assert chunk.side == DIRTY
        assert chunk.end_position > chunk.start_position
    by_segment: dict[int, list[tuple[int, int]]] = {}
    for c in plan.chunks:
        by_segment.setdefault(c.segment, []).append((c.start_position, c.end_position))
    for i, spans in by_segment.items():  # chunks tile each segment, batch-aligned
        assert spans[0][0] == 0 and spans[-1][1] == plan.segments[i].size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    # a checkpoint makes a clean side; explicit offsets win over the directory's
    set_checkpoint(log_dir, plan.groups[1].first_offset(plan) + 1)
    later = plan_of(log_dir, cfg)
    assert later.first_dirty_offset == plan.groups[1].first_offset(plan) + 1 and later.has_clean_side
    assert {c.side for c in later.chunks} == {DIRTY, CLEAN}
    fixed = plan_of(log_dir, cfg, offsets=Offsets(first_dirty_offset=0, end_offset=plan.segments[2].base_offset))
    assert fixed.end_offset == plan.segments[2].base_offset and not fixed.has_clean_side
    with pytest.raises(PlanError, match="not a segment's base offset"):
        plan_of(log_dir, cfg, offsets=Offsets(end_offset=plan.segments[2].base_offset + 1))
    with pytest.raises(PlanError, match="no dirty section"):
        plan_of(log_dir, cfg, offsets=Offsets(first_dirty_offset=plan.end_offset))
    with pytest.raises(PlanError, match="not a directory"):
        plan_compaction(tmp_path, TopicPartition("nope", 0), cfg, now_ms=NOW_MS, producer_expiration_ms=1)


def test_plan_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    cfg = config(3, **{"segment.bytes": 300})
    log = open_log(tmp_path, cfg)
    for i in range(20):
        append_kvs(log, [(str(i % 4).encode(), b"v" * 20)])
    p = TxnProducer(log, 5)
    open_at = p.append([b"k"])
    for i in range(20):
        append_kvs(log, [(str(i % 4).encode(), b"w" * 20)])
    log.roll()
    log.flush()
    plan = plan_of(tmp_path, cfg)
    floor = log.segments.floor_segment(open_at)
    assert floor is not None and plan.end_offset == floor.base_offset
    log.close()


def test_manifest_round_trip_and_errors(tmp_path: Path) -> None:
    cfg = config(4)
    log_dir = build_log(tmp_path / "src", 4)
    manifest = run_local_job(plan_of(log_dir, cfg), tmp_path / "staging")
    again = read_manifest(tmp_path / "staging")
    assert again == manifest
    assert sum(len(o.replaces) for o in again.outputs) == len(again.inputs)
    doc = json.loads((tmp_path / "staging" / "manifest.json").read_text())
    assert doc["format"] == "logkeeper-spark-compact" and doc["version"] == 1
    for broken in ({**doc, "version": 99}, {k: v for k, v in doc.items() if k != "inputs"}):
        (tmp_path / "bad").mkdir(exist_ok=True)
        (tmp_path / "bad" / "manifest.json").write_text(json.dumps(broken))
        with pytest.raises(ManifestError):
            read_manifest(tmp_path / "bad")
    with pytest.raises(ManifestError, match="does not exist"):
        read_manifest(tmp_path / "nowhere")
    write_manifest(tmp_path / "bad", manifest)
    assert read_manifest(tmp_path / "bad") == manifest


def test_cli_spark_compact_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["spark-compact", "--log-dir", "/d", "--partition", "t-0", "--staging", "/s",
                                      "--config", "segment.bytes=100", "--end-offset", "7"])
    assert (args.log_dir, args.partition, args.staging, args.master, args.end_offset) == \
        (Path("/d"), "t-0", Path("/s"), None, 7)
    assert cli_main(["spark-compact", "--log-dir", str(tmp_path), "--partition", "t-0", "--staging",
                     str(tmp_path / "s"), "--conf", "novalue"]) == 2
    # not a log dir: exit 2 and nothing written, not even the staging directory
    assert cli_main(["spark-compact", "--log-dir", str(tmp_path), "--partition", "t-0", "--staging",
                     str(tmp_path / "s")]) == 2
    assert "is not a log dir" in capsys.readouterr().out and not (tmp_path / "s").exists()
    # nothing to plan in a log dir: exit 1 with the reason (a sentence, no class name), in failure.json
    # too; planning needs no Spark, so the extra is taken as installed (make test's venv has none)
    monkeypatch.setattr(spark_command, "missing_extra", lambda: None)
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    assert cli_main(["spark-compact", "--log-dir", str(tmp_path), "--partition", "t-0", "--staging",
                     str(tmp_path / "s")]) == 1
    out = capsys.readouterr().out
    assert "not a directory" in out and "Error" not in out
    assert "not a directory" in json.loads((tmp_path / "s" / "failure.json").read_text())["reason"]
