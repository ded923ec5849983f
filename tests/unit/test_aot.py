"""The ahead-of-time compiled kernels (logkeeper.aot): used without numba, guarded, current, and
giving byte for byte what numba's JIT gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logkeeper import aot
from logkeeper.aot.signatures import BYTES, Signature, Type, parse

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, mode: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != aot.ENV}
    if mode is not None:
        env[aot.ENV] = mode
    # this tree's sidecar first: the venv's editable install may point at another checkout (a worktree's tests
    # must run the worktree's kernels)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "sidecar"), str(REPO)])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)


def assert_fails_saying(code: str, tmp_path: Path, *messages: str) -> None:
    """``code`` run with LOGKEEPER_KERNELS=aot fails, its stderr holding every message."""
    done = run_python(code, "aot", tmp_path)
    assert done.returncode != 0
    for message in messages:
        assert message in done.stderr


def test_signature_notation() -> None:
    sig = parse("u1[], i8[][], i8, b -> (i8[], u8)")
    assert sig == Signature((Type("uint8", 1), Type("int64", 2), Type("int64", 0), Type("bool", 0)),
                            (Type("int64", 1), Type("uint64", 0)))
    assert parse("i8[], i8 -> none").result is None
    assert parse(" -> i4").args == ()
    for bad in ("u1[] i8 -> i8", "f8 -> i8", "i8[[]] -> i8", "i8[][][] -> i8", "i8", "i8 -> bytes",
                "i8 -> (i8, bytes)"):
        with pytest.raises(ValueError, match="kernel signature"):
            parse(bad)
    assert parse("bytes, i8 -> i8").args == (BYTES, Type("int64", 0))


def test_the_guard_checks_every_array_argument() -> None:
    calls: list[tuple[object, ...]] = []
    guarded = aot._guarded(lambda *a: calls.append(a) or 7, "logkeeper.x.k", parse("u1[], i8[][], i8 -> i8"))
    good = (np.zeros(4, np.uint8), np.zeros((2, 3), np.int64), 5)
    assert guarded(*good) == 7 and calls == [good]
    with pytest.raises(TypeError, match=r"logkeeper.x.k: argument 0 must be a C-contiguous 1-D uint8 array, got bytes"):
        guarded(b"abcd", good[1], 5)
    with pytest.raises(TypeError, match=r"argument 0 must be .* uint8 array, got a C-contiguous 1-D int8 array"):
        guarded(np.zeros(4, np.int8), good[1], 5)
    with pytest.raises(TypeError, match=r"argument 0 .* got a strided 1-D uint8 array"):
        guarded(np.zeros(8, np.uint8)[::2], good[1], 5)
    with pytest.raises(TypeError, match="argument 1 must be a C-contiguous 2-D int64 array"):
        guarded(good[0], np.zeros(6, np.int64), 5)
    with pytest.raises(TypeError, match="takes 3 arguments, got 2"):
        guarded(good[0], good[1])
    assert len(calls) == 1


def test_the_guard_takes_exactly_bytes_for_a_bytes_argument() -> None:
    """A bytes argument is read as raw memory: a bytearray, a memoryview (perhaps strided) or an
    array would be read as whatever its buffer holds, so only bytes itself passes."""
    guarded = aot._guarded(lambda *a: len(a[0]), "logkeeper.x.k", parse("bytes, i8 -> i8"))
    assert guarded(b"abc", 1) == 3

    class Sub(bytes):
        pass

    for bad in (bytearray(b"abc"), memoryview(b"abcdef")[::2], np.zeros(3, np.uint8), Sub(b"abc"), "abc"):
        with pytest.raises(TypeError, match=r"logkeeper.x.k: argument 0 must be bytes, got"):
            guarded(bad, 1)


def test_unchecked_is_the_compiled_function_behind_the_guard() -> None:
    """``aot.unchecked`` skips the guard (for a hot path that built its arguments itself); the
    public name stays guarded."""
    from logkeeper.records import append_kernels

    raw = aot.unchecked(append_kernels.check_plain)
    if aot.mode() == "aot":
        assert raw is not append_kernels.check_plain
        with pytest.raises(TypeError, match="argument 0 must be bytes, got bytearray"):
            append_kernels.check_plain(bytearray(100), 1 << 20, 0, 0, 0, False)
    assert raw(bytes(100), 1 << 20, 0, 0, 0, False) == (0, 0)  # not a batch: not the plain request
    plain = aot.unchecked(lambda: 1)
    assert plain() == 1  # a function without a guard is itself


def test_kernels_marked_without_nrt_are_compiled_so(tmp_path: Path) -> None:
    """``nrt=False`` reaches numba (JIT here; the build reads the same option from the
    dispatchers): the append check's kernels count no references."""
    code = ("from logkeeper import aot\n"
            "from logkeeper.records import append_kernels, scan_kernels\n"
            "print(*(k.targetoptions.get('_nrt') for k in (append_kernels.check_batch, append_kernels.check_plain,\n"
            "                                               scan_kernels.check_kernel, scan_kernels.walk_kernel)))")
    done = run_python(code, "jit", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "True"]


def test_the_compiled_module_is_built_current_and_used_without_numba(tmp_path: Path) -> None:
    """make setup builds it; a fresh process that cleans a log loads neither numba nor llvmlite (nor
    the crc32c package, whose import reads package metadata, nor the offload's modules, nor the
    codec libraries or uuid: each is a measurable part of the start of a short process)."""
    code = ("import sys, logkeeper.cleaner.clean_command, logkeeper.records.scan\n"
            "from logkeeper import aot\n"
            "print(aot.mode(), *(m in sys.modules for m in ('numba', 'llvmlite', 'crc32c', 'importlib.metadata',\n"
            "                                              'logkeeper.cleaner.offload', 'logkeeper.spark.plan',\n"
            "                                              'cramjam', 'lz4', 'zlib_ng', 'uuid')))")
    done = run_python(code, None, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["aot"] + ["False"] * 10, done.stderr


def test_a_stale_module_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, problem = aot._load_compiled()
    assert problem is None and compiled is not None
    monkeypatch.setattr(aot, "source_stamp", lambda: int(compiled.stamp()) ^ 1)
    compiled, problem = aot._load_compiled()
    assert compiled is None and problem is not None and "other kernel sources" in problem


def test_an_older_variant_serves_when_the_newest_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    runnable, _ = aot.cpu_variants()
    if len(runnable) < 2:  # a CPU below x86-64-v3: there is no newer variant to lose
        runnable = list(aot.VARIANTS)
        monkeypatch.setattr(aot, "cpu_variants", lambda: (runnable, None))
    real = aot.load_variant

    def newest_stale(variant: aot.Variant) -> tuple[object, str | None]:
        return (None, "stale newest") if variant == runnable[0] else real(variant)

    monkeypatch.setattr(aot, "load_variant", newest_stale)
    compiled, problem = aot._load_compiled()
    assert problem is None and compiled.__name__ == aot.module_name(runnable[1])
    monkeypatch.setattr(aot, "load_variant", lambda v: (None, f"{v.name} missing"))
    assert aot._load_compiled() == (None, f"{runnable[0].name} missing")  # the newest one's reason


def test_forcing_aot_without_a_current_module_fails_naming_why(tmp_path: Path) -> None:
    code = ("from logkeeper import aot\n"
            "aot.source_stamp = lambda: -1\n"
            "aot.mode()")
    assert_fails_saying(code, tmp_path, "LOGKEEPER_KERNELS=aot but the compiled kernels cannot be used",
                        "other kernel sources")


def test_the_newest_variant_the_cpu_runs_is_chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    v3, v2 = aot.VARIANTS
    cpuinfo = tmp_path / "cpuinfo"
    real_open = open

    def fake_open(path: object, *args: object, **kwargs: object) -> object:
        return real_open(cpuinfo if path == "/proc/cpuinfo" else path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", fake_open)
    for flags, expected in ((v3.cpu_flags, [v3, v2]), (v2.cpu_flags | {"avx", "avx2"}, [v2]), (v2.cpu_flags, [v2])):
        cpuinfo.write_text(f"processor : 0\nflags\t\t: fpu {' '.join(sorted(flags))}\n")
        assert aot.cpu_variants() == (expected, None)
    cpuinfo.write_text("processor : 0\nflags\t\t: fpu sse4_2 ssse3\n")
    assert aot.cpu_variants() == ([], "this CPU lacks cx16, popcnt (x86-64-v2)")
    compiled, problem = aot._load_compiled("v3")
    assert compiled is None and problem == ("the compiled kernels cannot run here: this CPU lacks cx16, popcnt "
                                            "(x86-64-v2)")
    cpuinfo.write_text(f"processor : 0\nflags\t\t: {' '.join(sorted(v2.cpu_flags))}\n")
    compiled, problem = aot._load_compiled("v3")
    assert compiled is None and problem == ("the compiled kernels cannot run here: this CPU cannot run v3 "
                                            "(x86-64-v3)")
    compiled, problem = aot._load_compiled()
    assert problem is None and compiled.__name__ == "logkeeper.aot._kernels_v2"


def test_a_helper_called_from_python_says_it_is_compiled_only(tmp_path: Path) -> None:
    code = ("import numpy as np\n"
            "from logkeeper.cleaner.siphash import key_hash\n"
            "key_hash(np.zeros(1, np.uint8), 0, 1, np.uint64(1), np.uint64(2))")
    assert_fails_saying(code, tmp_path, "logkeeper.cleaner.siphash.key_hash is a helper compiled into other kernels")


# Every kernel on one random workload (appends with every codec and transactions, a cleaning
# round, a recovery that rebuilds the indexes, the backlog sketch, the Spark job's key extraction,
# the record walk):
# the files and figures of the compiled kernels equal those of numba's JIT.
WORKLOAD = """
import hashlib, json, sys
from pathlib import Path
from logkeeper import aot
import numpy as np
from logkeeper.cleaner import backlog as backlog_module
from logkeeper.cleaner.backlog import estimate_backlog
from tests.cleaner_logs import read_log
from logkeeper.log.log import Log
from tests.spark_helpers import TP, build_log, clean_in_process, config, dict_decisions, plan_of, segment_files

root = Path(sys.argv[1])
_fresh_state = backlog_module.fresh_state
def fixed_state():  # the sketch's estimate depends on its key
    state = _fresh_state()
    state["k0"], state["k1"] = 1, 2
    return state
backlog_module.fresh_state = fixed_state
cfg = config(SEED)
log_dir = build_log(root, SEED, 300)
plan = plan_of(log_dir, cfg)
decisions = dict_decisions(plan)
log = Log(log_dir / TP.dir_name, cfg, clock_ms=lambda: 1)
end = clean_in_process(log, None)
backlog = estimate_backlog(log, first_dirty=0, first_uncleanable=log.log_end_offset, end_offset=1, map_keys=10,
                           map_max_entries=10, clean_bytes=0, dirty_bytes=1 << 20, now_ms=1)
log.close()
for p in (log_dir / TP.dir_name).glob("*index"):
    p.unlink()
log = Log(log_dir / TP.dir_name, cfg, had_clean_shutdown=False, recovery_point=0, clock_ms=lambda: 1)
records = hashlib.sha256(repr(read_log(log)).encode()).hexdigest()  # the record walk
log.close()
files = {n: hashlib.sha256(b).hexdigest() for n, b in segment_files(log_dir / TP.dir_name).items()}
print(json.dumps({"mode": aot.mode(), "end": end, "files": files, "decisions": repr(decisions), "records": records,
                  "backlog": backlog.estimated_keys if backlog else None}))
"""


@pytest.mark.parametrize("seed", [3, 11])
def test_compiled_and_jit_kernels_give_the_same_bytes(tmp_path: Path, seed: int) -> None:
    """Every compiled variant this CPU runs, and the JIT."""
    results = {}
    variants = [f"aot-{v.name}" for v in aot.cpu_variants()[0]]
    assert variants, "this CPU runs no compiled variant"
    for mode in (*variants, "jit"):
        (tmp_path / mode).mkdir()
        done = run_python(WORKLOAD.replace("SEED", str(seed)).replace("sys.argv[1]", repr(str(tmp_path / mode))),
                          mode, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["jit"]["mode"] == "jit"
    assert len(results["jit"]["files"]) >= 6  # several segments with their indexes
    for variant in variants:
        assert results[variant] == {**results["jit"], "mode": "aot"}, variant
