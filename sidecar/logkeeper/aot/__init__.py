"""Compiled kernels without numba at run time: one source, compiled ahead of time or just in time.

Why: the kernels (record walks, CRC, the cleaner's map and filter) are numba functions. Importing
numba and loading its cached machine code in every fresh process costs more than a ``logkeeper
clean`` of a 118 MB log takes (bench/results/design_figures.md: aot, numba import). So ``make
setup`` (and the image build) compiles every kernel that Python calls into an extension module
(``python -m logkeeper.aot.build``, numba's ahead-of-time compiler), and a process that finds it
current never imports numba.

The module is built twice, for two levels of the x86-64 instruction set (:data:`VARIANTS`):
``_kernels_v3`` (AVX2 and BMI2: every x86-64 server CPU since 2013-2015) and ``_kernels_v2``
(SSE4.2, for the CRC instruction: since about 2009). A process loads the first one its CPU can
run. The newer level is worth its build: the same kernels run faster there
(bench/results/design_figures.md: aot, x86-64-v3), as fast as numba's JIT, compiling for the
host CPU, makes them.

Kernel modules mark their functions with :func:`kernel` instead of ``numba.njit``:

- ``@kernel("u1[], i8, i8 -> u8")``: an entry point called from Python, with its one signature
  (see :mod:`.signatures`). Ahead of time, the name is bound to the compiled function behind a
  guard that checks every array argument's dtype, dimensions and C-contiguity — the compiled
  code trusts its arguments as they are (a wrong dtype would read the wrong bytes, not raise);
- ``@kernel()`` / ``@kernel(inline=True)``: a helper only ever called from other kernels;
- ``@kernel("...", nrt=False)``: compiled without numba's reference counting, for a kernel that
  creates no array. Numba counts references to the arrays a kernel passes around, and where a
  helper taking an array is inlined into a loop that is an atomic increment and decrement each
  time round (per record in the append check; bench/results/design_figures.md: aot, nrt). A kernel that
  creates an array does not compile this way (numba refuses), so the flag cannot be wrong
  silently.

A hot path that built its arguments itself (say ``np.frombuffer`` of the bytes it checked) may
call :func:`unchecked` of a kernel: the compiled function without the guard's checks (what
they cost a call: bench/results/design_figures.md: aot, guard). Everything else calls the guarded name.

Which mode a process runs in (:func:`mode`): ``LOGKEEPER_KERNELS=jit`` forces numba's JIT (with
its on-disk cache); ``aot`` requires a compiled module and fails naming why it cannot be used;
unset, the compiled module is used when it exists, runs on this CPU and was built from the
kernel sources as they are now (a hash of them is compiled into it), and numba's JIT otherwise,
with one warning naming the reason.
"""

from __future__ import annotations

import importlib
import logging
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .signatures import BYTES, Signature, dtype_of, parse

log = logging.getLogger(__name__)

# Every module holding a kernel with a signature: the build imports them, the hash covers them.
KERNEL_MODULES = (
    "logkeeper.records.crc_kernels",
    "logkeeper.records.scan_kernels",
    "logkeeper.records.append_kernels",
    "logkeeper.cleaner.siphash",
    "logkeeper.cleaner.offset_map",
    "logkeeper.cleaner.map_kernel",
    "logkeeper.cleaner.filter_kernels",
    "logkeeper.cleaner.backlog",
    "logkeeper.log.index_plan",
    "logkeeper.spark.extract",
)
# Modules without kernels whose constants the kernels compile in: the hash covers them too.
CONSTANT_MODULES = ("logkeeper.records.batch_format",)

class Variant(NamedTuple):
    name: str  # the module is logkeeper.aot._kernels_<name>
    target_cpu: str  # LLVM's name of the instruction-set level it is compiled for
    cpu_flags: frozenset[str]  # what /proc/cpuinfo must list for a CPU to run it


_V2_FLAGS = frozenset({"sse4_2", "popcnt", "ssse3", "cx16"})
VARIANTS = (
    Variant("v3", "x86-64-v3", _V2_FLAGS | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    Variant("v2", "x86-64-v2", _V2_FLAGS),
)
ENV = "LOGKEEPER_KERNELS"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # .../logkeeper

# (module, name, signature, dispatcher) of every kernel with a signature, filled in JIT mode
# (the build reads it).
REGISTRY: list[tuple[str, str, Signature, Any]] = []

_mode: str | None = None
_compiled: Any = None


def export_name(module: str, name: str) -> str:
    """The compiled module's name for ``module.name``: logkeeper.records.scan_kernels.walk_kernel
    -> records_scan_kernels__walk_kernel."""
    return module.removeprefix("logkeeper.").replace(".", "_") + "__" + name


def source_stamp() -> int:
    """A 60-bit checksum of the kernel modules' and this package's sources, as they are now (two
    zlib checksums, not hashlib: its import costs more than the check; nothing adversarial here)."""
    files = [_PACKAGE_ROOT / (m.removeprefix("logkeeper.").replace(".", "/") + ".py")
             for m in KERNEL_MODULES + CONSTANT_MODULES]
    files += sorted(Path(__file__).parent.glob("*.py"))
    data = b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files)
    return (zlib.crc32(data) << 28) ^ zlib.adler32(data)


def module_name(variant: Variant) -> str:
    return f"logkeeper.aot._kernels_{variant.name}"


def cpu_variants() -> tuple[list[Variant], str | None]:
    """The variants this CPU can run, newest first; when none, why."""
    machine = os.uname().machine
    if machine not in ("x86_64", "AMD64"):
        return [], f"they hold x86-64 code and this machine is {machine}"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            listed = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        listed = None
    if listed is None:  # not Linux: no flags to read; the oldest level is the safe guess
        return [VARIANTS[-1]], None
    flags = set(listed)
    runnable = [v for v in VARIANTS if v.cpu_flags <= flags]
    if not runnable:
        return [], f"this CPU lacks {', '.join(sorted(VARIANTS[-1].cpu_flags - flags))} (x86-64-v2)"
    return runnable, None


def _load_compiled(name: str | None = None) -> tuple[Any, str | None]:
    """The newest current compiled variant this CPU runs (or the one named), the CPU checked
    before any of its code is loaded; else None and why (the newest variant's reason)."""
    runnable, problem = cpu_variants()
    if name is not None:
        runnable = [v for v in runnable if v.name == name]
        problem = problem or f"this CPU cannot run {name} ({dict((v.name, v.target_cpu) for v in VARIANTS)[name]})"
    if not runnable:
        return None, f"the compiled kernels cannot run here: {problem}"
    first_problem = None
    for variant in runnable:  # an older level when the newer one is missing or stale
        compiled, problem = load_variant(variant)
        if compiled is not None:
            return compiled, None
        first_problem = first_problem or problem
    return None, first_problem


def load_variant(variant: Variant) -> tuple[Any, str | None]:
    """The compiled module of ``variant`` if it is built from the sources as they are now."""
    name = module_name(variant)
    try:
        compiled = importlib.import_module(name)
    except ImportError as e:
        return None, f"{name} is not built ({e}); build it with `python -m logkeeper.aot.build`"
    if int(compiled.stamp()) != source_stamp():
        return None, (f"{compiled.__file__} was built from other kernel sources than these; rebuild it with "
                      "`python -m logkeeper.aot.build` (make setup does)")
    return compiled, None


def mode() -> str:
    """``"aot"`` or ``"jit"`` for this process (decided once). ``LOGKEEPER_KERNELS=aot-v2`` (a
    variant's name after ``aot-``) requires that variant: tests compare the variants with it."""
    global _mode, _compiled
    if _mode is None:
        wanted = os.environ.get(ENV, "auto")
        named = {f"aot-{v.name}": v.name for v in VARIANTS}
        if wanted not in ("auto", "aot", "jit", *named):
            raise ValueError(f"{ENV}={wanted!r}: expected aot, {', '.join(named)}, jit or nothing")
        if wanted == "jit":
            _mode = "jit"
        else:
            _compiled, problem = _load_compiled(named.get(wanted))
            if problem is None:
                _mode = "aot"
            elif wanted != "auto":
                raise RuntimeError(f"{ENV}={wanted} but the compiled kernels cannot be used: {problem}")
            else:
                log.warning("compiled kernels not used, numba compiles them instead: %s", problem)
                _mode = "jit"
    return _mode


def kernel(signature: str | None = None, *, inline: bool = False, nrt: bool = True
           ) -> Callable[[Callable[..., Any]], Any]:
    """Mark a kernel (see the module docstring)."""
    sig = parse(signature) if signature is not None else None

    def mark(fn: Callable[..., Any]) -> Any:
        if mode() == "jit":
            from numba import njit  # only here: importing numba is what the compiled module saves

            # _nrt: numba's (underscored) target option for reference counting
            options: dict[str, Any] = {"cache": True, "nogil": True, "inline": "always" if inline else "never",
                                       "_nrt": nrt}
            dispatcher = njit(**options)(fn)
            if sig is not None:
                REGISTRY.append((fn.__module__, fn.__name__, sig, dispatcher))
            return dispatcher
        if sig is None:
            return _helper_only(fn)
        name = export_name(fn.__module__, fn.__name__)
        compiled = getattr(_compiled, name, None)
        if compiled is None:
            raise RuntimeError(f"kernel {fn.__module__}.{fn.__name__} is not in {_compiled.__file__}: "
                               f"is {fn.__module__} in logkeeper.aot.KERNEL_MODULES?")
        return _guarded(compiled, f"{fn.__module__}.{fn.__name__}", sig)

    return mark


def intrinsic(name: str) -> Any:
    """``name`` of :mod:`.intrinsics` for kernel bodies. With the compiled module no kernel body is
    compiled in this process, so it is a stub there and numba is not imported."""
    if mode() == "jit":
        from . import intrinsics

        return getattr(intrinsics, name)

    def stub(*args: Any) -> Any:
        raise RuntimeError(f"numba intrinsic {name} called outside a kernel compiled by numba")
    return stub


def _helper_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{fn.__module__}.{fn.__name__} is a helper compiled into other kernels; with "
                           f"the ahead-of-time kernels it cannot be called from Python (set {ENV}=jit)")
    unavailable.__name__ = fn.__name__
    unavailable.__doc__ = fn.__doc__
    return unavailable


def unchecked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled function behind the kernel ``fn`` without the guard's argument checks (or,
    with numba's JIT, the dispatcher itself, which checks its arguments by typing them). For a
    caller that makes its arguments the right types by construction; a wrong array passed to
    it is read as the wrong bytes, not refused."""
    raw: Callable[..., Any] = getattr(fn, "unchecked", fn)
    return raw


def _guarded(compiled: Callable[..., Any], qualname: str, sig: Signature) -> Callable[..., Any]:
    arrays = tuple((i, dtype_of(a), a.ndim) for i, a in enumerate(sig.args) if a.ndim and a != BYTES)
    # bytes exactly: a subclass or another buffer (a strided memoryview, an int64 array) would
    # be read as its raw memory
    exact_bytes = tuple(i for i, a in enumerate(sig.args) if a == BYTES)
    nargs = len(sig.args)

    def call(*args: Any) -> Any:
        if len(args) != nargs:
            raise TypeError(f"{qualname} takes {nargs} arguments, got {len(args)}")
        for i in exact_bytes:
            if type(args[i]) is not bytes:
                raise TypeError(f"{qualname}: argument {i} must be bytes, got {type(args[i]).__name__}")
        for i, dtype, ndim in arrays:
            a = args[i]
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim or not a.flags.c_contiguous:
                got = (f"a {'C-contiguous' if a.flags.c_contiguous else 'strided'} {a.ndim}-D {a.dtype} array"
                       if isinstance(a, np.ndarray) else type(a).__name__)
                raise TypeError(f"{qualname}: argument {i} must be a C-contiguous {ndim}-D {dtype} array, "
                                f"got {got}")
        return compiled(*args)

    call.__name__ = qualname.rsplit(".", 1)[1]
    call.__qualname__ = qualname
    call.unchecked = compiled  # type: ignore[attr-defined]  # see unchecked()
    return call
