"""numba intrinsics for kernel bodies: the SSE4.2 CRC-32C instruction and an unaligned 8-byte load.

Kernel modules take them through :func:`logkeeper.aot.intrinsic`, which imports this module only
when numba compiles the kernels (JIT mode, and the ahead-of-time build): a process running the
compiled module never loads numba or llvmlite.
"""

from __future__ import annotations

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def host_has_sse42() -> bool:
    try:
        features = llvm_binding.get_host_cpu_features()
    except RuntimeError:
        return False
    return bool(features.get("sse4.2", False)) and llvm_binding.get_process_triple().startswith("x86_64")


def _sse42_crc32(crc_bits: int, data_bits: int):  # type: ignore[no-untyped-def]
    """The CRC-32C instruction on a ``data_bits`` operand, the CRC held in ``crc_bits``
    (``llvm.x86.sse42.crc32.<crc_bits>.<data_bits>``)."""
    crc_type, data_type = getattr(types, f"uint{crc_bits}"), getattr(types, f"uint{data_bits}")
    llvm_name = f"llvm.x86.sse42.crc32.{crc_bits}.{data_bits}"

    def typer(typingctx, crc, data):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            fnty = ir.FunctionType(ir.IntType(crc_bits), [ir.IntType(crc_bits), ir.IntType(data_bits)])
            return builder.call(cgutils.get_or_insert_function(builder.module, fnty, llvm_name), args)

        return crc_type(crc_type, data_type), codegen

    typer.__name__ = typer.__qualname__ = f"crc32_u{data_bits}"
    return intrinsic(typer)


crc32_u64 = _sse42_crc32(64, 64)
crc32_u8 = _sse42_crc32(32, 8)


@intrinsic
def load64(typingctx, arr, index):  # type: ignore[no-untyped-def]
    """An unaligned 8-byte load at ``arr[index]`` (a uint8 array), in the host's byte order
    (little-endian on x86-64 and aarch64, the machines numba targets here): one instruction,
    where assembling the word from 8 byte loads is not folded by the compiler. The caller
    guarantees ``index + 8 <= len(arr)``."""
    sig = types.uint64(arr, index)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(array.data, [args[1]])
        word_ptr = builder.bitcast(ptr, ir.IntType(64).as_pointer())
        load = builder.load(word_ptr)
        load.align = 1
        return load

    return sig, codegen


@intrinsic
def prefetch_row(typingctx, arr, row):  # type: ignore[no-untyped-def]
    """A hint to bring row ``row`` of a 2-D C-contiguous array into the cache for writing (no
    fault on a bad address; nothing happens on a CPU that ignores it). Both ends of the row are
    prefetched: a 24-byte row of the offset map straddles two cache lines one time in three, and
    prefetching only its first line left the map kernel slower on W1
    (bench/results/design_figures.md: aot, prefetch_row)."""
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        width = cgutils.unpack_tuple(builder, array.shape, 2)[1]
        first = builder.gep(array.data, [builder.mul(args[1], width)])
        # the row's last element: an aligned element never straddles a line, so the two
        # prefetches cover the row's one or two lines
        last = builder.gep(first, [builder.sub(width, ir.Constant(width.type, 1))])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        for ptr in (first, last):
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
