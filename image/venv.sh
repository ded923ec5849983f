#!/bin/sh
# The venv of the image (VENV in recipe.env), in three steps that both builds run:
#   venv.sh wheels SRC OUT   wheels of logkeeper[EXTRAS] (SRC: a directory with pyproject.toml)
#                            and of every dependency, pinned by SRC/constraints.txt, into OUT
#   venv.sh deps WHEELS      create VENV; install every wheel of WHEELS but logkeeper's
#   venv.sh app WHEELS       install logkeeper's wheel, compile its kernels ahead of time
#                            (logkeeper.aot.build), check the dependencies and the kernels
# The Dockerfile runs all three in its build stage; image/build.sh runs `wheels` on the host
# (only the pip cache and PyPI) and `deps` and `app` in a chroot, each step's result a layer.
# BUILD_PYTHON overrides recipe.env's PYTHON (the host's python for `wheels`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"
py=${BUILD_PYTHON:-$PYTHON}
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset LOGKEEPER_KERNELS

case "${1-}" in
wheels)
    src=$2 out=$3
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$py" -m venv "$tmp/venv"
    # --use-pep517: sdists (pyspark) built in isolation whatever the venv's pip and wheel (Debian's
    # python3.11-venv has pip 23.0 and no wheel, which fails setup.py bdist_wheel)
    "$tmp/venv/bin/pip" wheel -q --use-pep517 -c "$src/constraints.txt" -w "$out" "$src[$EXTRAS]"
    ;;
deps)
    wheels=$2
    "$py" -m venv "$VENV"
    set --
    for w in "$wheels"/*.whl; do
        case ${w##*/} in logkeeper-*) ;; *) set -- "$@" "$w" ;; esac
    done
    "$VENV/bin/pip" install -q --no-cache-dir --no-index --no-deps "$@"
    ;;
app)
    wheels=$2
    "$VENV/bin/pip" install -q --no-cache-dir --no-index --no-deps "$wheels"/logkeeper-*.whl
    NUMBA_CACHE_DIR=$(mktemp -d) "$VENV/bin/python" -m logkeeper.aot.build
    "$VENV/bin/pip" check
    # the kernels it compiled load (where it compiles none, numba compiles them at run time)
    "$VENV/bin/python" -c 'import logkeeper.aot as a, pathlib
built = sorted(p.name for p in pathlib.Path(a.__file__).parent.glob("_kernels_*.so"))
print("logkeeper kernels:", a.mode(), *built)
assert a.mode() == "aot" or not built, a.mode()'
    ;;
*)
    echo "usage: venv.sh wheels SRC OUT | deps WHEELS | app WHEELS" >&2
    exit 2
    ;;
esac
