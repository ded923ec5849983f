"""Build ``logkeeper/aot/_kernels_<variant>*.so``: every kernel with a signature, compiled ahead of time.

Run: ``python -m logkeeper.aot.build [--force]`` (``make setup`` does; so does the image build).
Each variant of ``logkeeper.aot.VARIANTS`` (an x86-64 instruction-set level, not this machine's
CPU, so that an image built here runs on any node) is compiled by a process of its own, in
parallel; nothing is done for a module that exists and matches the sources. A module is written
beside this file under a temporary name and renamed into place, so a process that has the old
one loaded keeps running it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any


def build(force: bool = False) -> int:
    """Build every variant that is missing or stale (all with ``force``), one process each;
    return the number of failed builds."""
    os.environ["LOGKEEPER_KERNELS"] = "jit"  # the kernels as numba functions, registered
    from logkeeper import aot

    if platform.machine() not in ("x86_64", "AMD64"):
        print(f"logkeeper.aot.build: {platform.machine()} is not x86-64; numba compiles the kernels at run time")
        return 0
    todo = [v for v in aot.VARIANTS if force or aot.load_variant(v)[0] is None]
    children = [subprocess.Popen([sys.executable, "-m", "logkeeper.aot.build", "--variant", v.name])
                for v in todo]
    failed = [v.name for v, child in zip(todo, children) if child.wait() != 0]
    if failed:
        print(f"logkeeper.aot.build: the build of {', '.join(failed)} failed", file=sys.stderr)
    return len(failed)


def build_variant(name: str) -> Path:
    """Compile every kernel for the variant ``name`` (this process imports numba)."""
    os.environ["LOGKEEPER_KERNELS"] = "jit"
    from logkeeper import aot

    (variant,) = [v for v in aot.VARIANTS if v.name == name]
    here = Path(aot.__file__).parent
    stamp = aot.source_stamp()
    for module in aot.KERNEL_MODULES:
        importlib.import_module(module)

    from numba.core import cpu
    from numba.core.compiler import Flags
    from numba.core.errors import NumbaPendingDeprecationWarning
    from numba.pycc import CC
    from numba.pycc import compiler as pycc_compiler

    from .signatures import numba_signature

    compile_once = pycc_compiler.compile_extra
    # kernels marked @kernel(..., nrt=False): compiled without reference counting here too
    without_nrt = {d.py_func for _m, _n, _s, d in aot.REGISTRY if d.targetoptions.get("_nrt") is False}

    def compile_like_njit(typingctx: Any, targetctx: Any, func: Any, args: Any, return_type: Any, flags: Any,
                          locals: Any, **kw: Any) -> Any:
        # numba.pycc types every export with one Flags object, which the first compilation leaves
        # changed (later ones then fail on a variable assigned two global constants); give each
        # export fresh flags, @njit's own, plus pycc's (no_compile, nrt, wrappers)
        fresh = Flags()
        cpu.CPUTargetOptions.parse_as_flags(fresh, {"nopython": True, "nogil": True})
        for name in ("no_compile", "nrt", "no_cpython_wrapper", "no_cfunc_wrapper"):
            setattr(fresh, name, getattr(flags, name))
        if func in without_nrt:
            setattr(fresh, "nrt", False)  # noqa: B010 (Flags' options are set by name: mypy reads its __slots__)
        return compile_once(typingctx, targetctx, func, args, return_type, fresh, locals, **kw)

    pycc_compiler.compile_extra = compile_like_njit
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=here) as tmp, warnings.catch_warnings():
        # numba.pycc is marked for a future removal; pinned numba (constraints.txt) still has it
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        cc = CC(aot.module_name(variant).rsplit(".", 1)[1])
        cc.output_dir = tmp
        cc.target_cpu = variant.target_cpu
        cc.verbose = False
        for module, name, sig, dispatcher in aot.REGISTRY:
            cc.export(aot.export_name(module, name), numba_signature(sig))(dispatcher.py_func)
        namespace: dict[str, Any] = {}
        exec(f"def stamp():\n    return {stamp}", namespace)
        cc.export("stamp", "int64()")(namespace["stamp"])
        cc.compile()
        (built,) = Path(tmp).glob("_kernels*")
        target = here / built.name
        os.replace(built, target)
    print(f"logkeeper.aot.build: {len(aot.REGISTRY)} kernels compiled for {variant.target_cpu} into {target} "
          f"in {time.monotonic() - started:.0f} s")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logkeeper.aot.build", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the modules are current")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in this process (build() runs it)
    args = parser.parse_args(argv)
    if args.variant:
        build_variant(args.variant)
        return 0
    return 1 if build(force=args.force) else 0


if __name__ == "__main__":
    sys.exit(main())
