"""A LogManager process for tests/behaviour/test_disk_full.py: fill a log dir, get killed, restart.

``python tests/disk_full_child.py <full dir> <healthy dir> <phase>`` prints one JSON object a line:

fill      t-0 in the first dir, t-1 in the second; t-0 appended to until the first dir fails;
          prints {"acked": {partition: log end offset}, "error": ...}, then SIGKILLs itself
          (no clean shutdown: the active segment's index stays untrimmed, sparse to 10 MiB).
restart   loads both dirs, prints the dirs' state, reads t-0 ({"leo", "bad"}), appends to t-0
          until it fails ({"refused", "offline", ...}), appends to and reads t-1, prints
          {"served": n}, shuts down cleanly.
check     prints {"leo": {partition: log end offset}, "bad": [offsets whose record is wrong]}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from logkeeper.errors import KafkaStorageError
from logkeeper.log.manager import LogManager
from logkeeper.log.manager_config import ManagerConfig
from logkeeper.log.names import TopicPartition
from logkeeper.records.builder import Record, build_batch
from logkeeper.records.reader import read_records

TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]
PAD = b"x" * 1000


def value(tp: TopicPartition, offset: int) -> bytes:
    return f"{tp}:{offset}:".encode() + PAD


def append(m: LogManager, tp: TopicPartition, n: int = 10) -> None:
    lg = m.get_log(tp)
    assert lg is not None
    leo = lg.log_end_offset
    m.append(tp, build_batch([Record(leo + k, 0, None, value(tp, leo + k)) for k in range(n)]))


def read_all(m: LogManager, tp: TopicPartition, end: int) -> dict[int, bytes | None]:
    """Every record below ``end`` (a read stops at its segment's end: one read a segment)."""
    got: dict[int, bytes | None] = {}
    offset = 0
    while offset < end:
        records = list(read_records(m.read(tp, offset, 1 << 24).records))
        if not records:
            break
        got.update((r.offset, r.value) for r in records)
        offset = records[-1].offset + 1
    return got


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main(full: Path, healthy: Path, phase: str) -> None:
    config = ManagerConfig.from_props({"log.dirs": [str(full), str(healthy)], "log.segment.bytes": 1 << 20})
    m = LogManager(config)
    m.startup()
    if phase == "fill":
        for tp in TPS:
            m.get_or_create_log(tp, is_new=True)
        assert m.dir_of(TPS[0]).path == full and m.dir_of(TPS[1]).path == healthy
        append(m, TPS[1])
        acked = {str(tp): 0 for tp in TPS}
        acked[str(TPS[1])] = 10
        error = ""
        for _ in range(100_000):
            try:
                append(m, TPS[0])
            except KafkaStorageError as e:
                error = str(e)
                break
            lg = m.get_log(TPS[0])
            assert lg is not None
            acked[str(TPS[0])] = lg.log_end_offset
        emit(acked=acked, error=error)
        os.kill(os.getpid(), signal.SIGKILL)
    elif phase == "restart":
        emit(online=[str(p) for p in m.live_log_dirs], offline=[str(p) for p in m.offline_log_dirs])
        full_log = m.get_log(TPS[0])
        assert full_log is not None
        got = read_all(m, TPS[0], full_log.log_end_offset)  # the full disk's records are served
        emit(leo=full_log.log_end_offset, bad=[o for o in range(full_log.log_end_offset)
                                               if got.get(o) != value(TPS[0], o)])
        refused = ""
        for _ in range(1000):  # the disk is still full: an append that needs a block fails
            try:
                append(m, TPS[0])
            except KafkaStorageError as e:
                refused = str(e)
                break
        emit(refused=refused, offline=[str(p) for p in m.offline_log_dirs],
             errors={s.path: s.error for s in m.dir_status()},
             offline_partitions={str(tp): str(o.log_dir.path) for tp, o in m.offline_partitions().items()})
        for _ in range(5):
            append(m, TPS[1])
        lg = m.get_log(TPS[1])
        assert lg is not None
        got = read_all(m, TPS[1], lg.log_end_offset)
        emit(served=len(got), leo=lg.log_end_offset,
             bad=[o for o in range(lg.log_end_offset) if got.get(o) != value(TPS[1], o)])
        m.shutdown()
    elif phase == "check":
        leo: dict[str, int] = {}
        bad: list[int] = []
        for tp in TPS:
            lg = m.get_log(tp)
            assert lg is not None, f"{tp} is not served: {m.dir_status()}"
            leo[str(tp)] = lg.log_end_offset
            got = read_all(m, tp, lg.log_end_offset)
            bad += [o for o in range(lg.log_end_offset) if got.get(o) != value(tp, o)]
        emit(leo=leo, bad=bad, online=[str(p) for p in m.live_log_dirs])
        m.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
