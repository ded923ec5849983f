"""The offset map's key hash can be swapped (issue 22 point 1): with SipHash-1-3 replaced by
another 128-bit keyed hash of the same interface (an FNV-1a pair here), a cleaning round writes
byte-identical segments and the log reads back the same records, because the map only asks
"same key?" of the hash and the round's decisions do not depend on its values.

The swap is one name: ``siphash.key_hash``, which only the offset map binds (in ``map_hash``, the
map's hash); every other module that hashes keys (the map's kernels, the filter's kernels, the
backlog sketch) calls ``map_hash`` and names no hash of its own. The swapped run uses
numba's JIT (the compiled kernels have SipHash built in) with a fresh numba cache, so every kernel
is compiled with the swapped hash; the reference run uses the compiled kernels (test_aot.py shows
they write what the JIT does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from logkeeper import aot

REPO = Path(__file__).resolve().parents[2]

WORKLOAD = """
import hashlib, json, sys
from pathlib import Path
import numpy as np
SWAP = sys.argv[2] == "swap"
if SWAP:
    from numba import njit
    from logkeeper.cleaner import siphash

    @njit(inline="always", cache=False)
    def fnv_key_hash(buf, pos, length, k0, k1):
        h1 = np.uint64(0xCBF29CE484222325) ^ k0
        h2 = np.uint64(0x84222325CBF29CE4) ^ k1
        for p in range(pos, pos + length):
            h1 = (h1 ^ np.uint64(buf[p])) * np.uint64(0x100000001B3)
            h2 = (h2 ^ np.uint64(buf[p])) * np.uint64(0x100000001B3) + np.uint64(0x9E3779B97F4A7C15)
        return np.int64(h1), np.int64(h2)

    siphash.key_hash = fnv_key_hash
from logkeeper import aot
from logkeeper.cleaner import backlog, filter_kernels, map_kernel, offset_map
from logkeeper.log.log import Log
from tests.cleaner_logs import read_log
from tests.spark_helpers import TP, build_log, clean_in_process, config, segment_files

hashes = {m.__name__: sorted(name for name in vars(m) if "hash" in name and name != "hashed_rows")
          for m in (map_kernel, filter_kernels, backlog)}
hashes["map"] = getattr(offset_map.key_hash, "py_func", offset_map.key_hash).__name__
m = offset_map.SipHashOffsetMap(1 << 16)
m.put(b"a key", 7)
m.put(b"another key", 8)
m.put(b"a key", 9)
root = Path(sys.argv[1])
cfg = config(5)
log_dir = build_log(root, 5, 300)
log = Log(log_dir / TP.dir_name, cfg, clock_ms=lambda: 1)
end = clean_in_process(log, None)
records = hashlib.sha256(repr(read_log(log)).encode()).hexdigest()
log.close()
files = {n: hashlib.sha256(b).hexdigest() for n, b in segment_files(log_dir / TP.dir_name).items()}
print(json.dumps({"mode": aot.mode(), "hashes": hashes, "map": [m.get(b"a key"), m.get(b"another key"), m.size],
                  "end": end, "files": files, "records": records}))
"""


def run(tmp_path: Path, name: str, mode: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != aot.ENV}
    if mode == "swap":
        env[aot.ENV] = "jit"
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")  # no kernel compiled earlier with the stock hash
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "sidecar"), str(REPO)])
    (tmp_path / name).mkdir()
    done = subprocess.run([sys.executable, "-c", WORKLOAD, str(tmp_path / name), mode], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_swapped_key_hash_cleans_to_the_same_bytes(tmp_path: Path) -> None:
    stock = run(tmp_path, "stock", "stock")
    swapped = run(tmp_path, "swapped", "swap")
    assert swapped["mode"] == "jit"
    for hashes in (stock["hashes"], swapped["hashes"]):  # the map's users name only the map's hash
        assert {k: v for k, v in hashes.items() if k != "map"} == {  # type: ignore[attr-defined]
            "logkeeper.cleaner.map_kernel": ["hash_kernel", "map_hash"],
            "logkeeper.cleaner.filter_kernels": ["map_hash"], "logkeeper.cleaner.backlog": ["map_hash"]}
    assert (stock["hashes"]["map"], swapped["hashes"]["map"]) == ("key_hash", "fnv_key_hash")  # type: ignore[index]
    assert stock["map"] == swapped["map"] == [9, 8, 2]
    assert len(stock["files"]) >= 6  # type: ignore[arg-type]
    for key in ("end", "files", "records"):
        assert swapped[key] == stock[key], key
