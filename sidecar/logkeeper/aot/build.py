"""Build ``logkeeper/aot/_kernels*.so``: every kernel with a signature, compiled ahead of time.

Run: ``python -m logkeeper.aot.build [--force]`` (``make setup`` does; so does the image build).
Nothing is done when the module exists and matches the sources. It is compiled for x86-64-v2
(SSE4.2 for the CRC instruction; any x86-64 CPU since about 2009) rather than this machine's CPU
so that an image built here runs on any node; the kernels are scalar byte walks, which gain
little from newer vector units. The module is written beside this file under a temporary name
and renamed into place, so a process that has the old one loaded keeps running it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

TARGET_CPU = "x86-64-v2"


def build(force: bool = False) -> Path | None:
    os.environ["LOGKEEPER_KERNELS"] = "jit"  # the kernels as numba functions, registered
    from logkeeper import aot

    if platform.machine() not in ("x86_64", "AMD64"):
        print(f"logkeeper.aot.build: {platform.machine()} is not x86-64; numba compiles the kernels at run time")
        return None
    here = Path(aot.__file__).parent
    stamp = aot.source_stamp()
    if not force:
        compiled, _problem = aot._load_compiled()
        if compiled is not None:
            return Path(compiled.__file__)  # current: nothing to do
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
        cc = CC("_kernels")
        cc.output_dir = tmp
        cc.target_cpu = TARGET_CPU
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
    print(f"logkeeper.aot.build: {len(aot.REGISTRY)} kernels compiled for {TARGET_CPU} into {target} "
          f"in {time.monotonic() - started:.0f} s")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logkeeper.aot.build", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the module is current")
    args = parser.parse_args(argv)
    build(force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
