#!/usr/bin/env bash
# make image: the logkeeper image without a daemon, from image/recipe.env (the recipe the
# Dockerfile is generated from) and the same image/rootfs.sh and image/venv.sh steps.
#
#   layer 1  base   mmdebstrap --variant=minbase DEBIAN_SUITE + RUNTIME_PACKAGES, then rootfs.sh
#                   (user, JAVA_HOME link) in a chroot          cached by recipe, rootfs.sh, arch
#   layer 2  deps   VENV with every pinned dependency (venv.sh deps, in a chroot of a build rootfs
#                   with BUILD_PACKAGES; wheels from venv.sh wheels on this host)
#                                                               cached by the dependency lists
#   layer 3  app    logkeeper's wheel and its compiled kernels (venv.sh app on an overlay of
#                   layer 2)                                     cached by the sources' content
# Then image/oci.py writes the OCI layout and archive (.cache/image/logkeeper-VERSION.oci.tar, for
# `ctr -n k8s.io images import`), and a new digest is verified under runc: the image's own
# entrypoint, uid 10001, a read-only root with /tmp a tmpfs, imports, the compiled kernels, a Spark
# session on the JRE. Prints the digest and the size; writes .cache/image/image.env.
#
# Needs root and Debian's mmdebstrap, umoci and runc (apt-get installs them when missing).
# Rerunnable: a step's result is renamed into place only when complete; reruns reuse them.
# IMAGE_REFRESH=1 bootstraps the Debian parts again (security updates). IMAGE_CHECK_DOCKERFILE=1
# also builds the Dockerfile with buildah and compares the two images (image/dockerfile-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STEPS=1 # bump when a step below changes what it builds
CACHE=${LOGKEEPER_IMAGE_CACHE:-$ROOT/.cache/image}
HOST_PYTHON=${PYTHON:-python3}
# shellcheck source=image/recipe.env
. image/recipe.env

start=$(date +%s)
say() { echo "make image: $*"; }
die() {
    echo "make image: FAILED: $*" >&2
    exit 1
}
key() { sha256sum | cut -c1-16; }

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, chroot, mounts, runc)"
"$HOST_PYTHON" image/dockerfile.py --check || die "the Dockerfile is not the recipe's"
VERSION=$("$HOST_PYTHON" -c 'import sys; sys.path.insert(0, "image"); import recipe; print(recipe.version())')
py_host=$("$HOST_PYTHON" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
[ "$py_host" = "$PYTHON" ] ||
    die "the wheels are built by $HOST_PYTHON ($py_host) for the image's $PYTHON: set PYTHON=<a $PYTHON>"
missing=()
for tool in mmdebstrap umoci runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (Debian)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/dev/null ||
        die "cannot install ${missing[*]}"
fi
arch=$(dpkg --print-architecture)

mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock -n 9 || {
    say "waiting for another make image"
    flock 9
}
MOUNTS=()
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[i]}" 2>/dev/null || true; done
    MOUNTS=()
}
trap cleanup EXIT
# mounts a killed run left behind
awk -v c="$CACHE/" 'index($2, c) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done

mount_on() { # mount ARGS... TARGET (the target last)
    mount "$@"
    MOUNTS+=("${!#}")
}

bootstrap() { # DIR LOG PACKAGES...
    local dir=$1 log=$2 sources
    shift 2
    IFS='|' read -ra sources <<<"$DEBIAN_SOURCES"
    # like debian:*-slim: no recommends, no manuals, documentation or translations (openjdk's
    # postinst needs the man1 directory)
    nice mmdebstrap --variant=minbase --mode=root --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --setup-hook='mkdir -p "$1/usr/share/man/man1"' \
        --include="$(echo "$@" | tr ' ' ,)" "$DEBIAN_SUITE" "$dir" "${sources[@]}" >"$log" 2>&1 ||
        {
            tail -n 30 "$log" >&2
            die "mmdebstrap failed (log: $log)"
        }
}

pack() { # DIR OUT PATH...: a layer of the PATHs under DIR
    local dir=$1 out=$2
    shift 2
    tar -C "$dir" --sort=name --numeric-owner --format=pax --pax-option=delete=atime,delete=ctime \
        -cf - "$@" | nice "$HOST_PYTHON" image/oci.py layer "$out" >/dev/null
}

in_chroot() { # ROOTFS COMMAND...: with /proc (/dev holds the nodes mmdebstrap made)
    local root=$1
    shift
    mount_on -t proc proc "$root/proc"
    local rc=0
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@" || rc=$?
    cleanup
    return $rc
}

cached=() built=()

# --- layer 1: base ------------------------------------------------------------------------------
kbase=$({ cat image/recipe.env image/rootfs.sh; echo "steps=$STEPS arch=$arch base"; } | key)
base=$CACHE/base-$kbase
if [ -n "${IMAGE_REFRESH:-}" ] || [ ! -f "$base/layer.tar.gz" ]; then
    say "base: $DEBIAN_SUITE with $RUNTIME_PACKAGES (mmdebstrap)"
    rm -rf "$base.tmp" && mkdir -p "$base.tmp"
    bootstrap "$base.tmp/rootfs" "$base.tmp/mmdebstrap.log" $RUNTIME_PACKAGES
    r=$base.tmp/rootfs
    mkdir -p "$r/tmp/image" && cp image/recipe.env image/rootfs.sh "$r/tmp/image/"
    in_chroot "$r" /bin/sh /tmp/image/rootfs.sh || die "image/rootfs.sh failed"
    # what the container runtime provides: /dev's nodes, the resolver's and the host's names
    rm -rf "$r/tmp/image" && find "$r/dev" "$r/tmp" -mindepth 1 -delete
    : >"$r/etc/resolv.conf" && : >"$r/etc/hostname"
    pack "$r" "$base.tmp/layer.tar.gz" .
    rm -rf "$r"
    rm -rf "$base" && mv "$base.tmp" "$base"
    built+=(base)
else cached+=(base); fi

# --- the build rootfs (not a layer): the same Python, BUILD_PACKAGES ----------------------------
kbuild=$({ cat image/recipe.env; echo "steps=$STEPS arch=$arch build"; } | key)
buildroot=$CACHE/buildroot-$kbuild
if [ -n "${IMAGE_REFRESH:-}" ] || [ ! -x "$buildroot/rootfs/usr/bin/$PYTHON" ]; then
    say "build rootfs: $DEBIAN_SUITE with $BUILD_PACKAGES (mmdebstrap)"
    rm -rf "$buildroot.tmp" && mkdir -p "$buildroot.tmp"
    bootstrap "$buildroot.tmp/rootfs" "$buildroot.tmp/mmdebstrap.log" $BUILD_PACKAGES
    mkdir -p "$buildroot.tmp/rootfs$VENV" "$buildroot.tmp/rootfs/wheels"
    rm -rf "$buildroot" && mv "$buildroot.tmp" "$buildroot"
fi
br=$buildroot/rootfs
prepare_buildroot() {
    find "$br/tmp" -mindepth 1 -delete
    mkdir -p "$br/tmp/image" && cp image/recipe.env image/venv.sh "$br/tmp/image/"
}

# The build context: what the Dockerfile COPYs (no bytecode, no kernels built on this host).
ctx=$CACHE/context
rm -rf "$ctx" && mkdir -p "$ctx"
tar -cf - --exclude=__pycache__ --exclude='*.pyc' --exclude='*.so' --exclude='*.egg-info' \
    pyproject.toml README.md constraints.txt sidecar operator | tar -C "$ctx" -xf -
ksrc=$(tar -C "$ctx" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . | key)

# --- layer 2: deps ------------------------------------------------------------------------------
deplists=$("$HOST_PYTHON" -c 'import json, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p["requires-python"], p["dependencies"], p["optional-dependencies"]], sort_keys=True))')
kdeps=$({ cat image/recipe.env image/venv.sh constraints.txt; echo "$deplists"; echo "steps=$STEPS arch=$arch $kbuild"; } | key)
wheels=$CACHE/wheels-$kdeps
deps=$CACHE/deps-$kdeps
if [ ! -f "$deps/layer.tar.gz" ]; then
    if [ ! -d "$wheels" ]; then
        say "deps: wheels of logkeeper[$EXTRAS] pinned by constraints.txt (pip on this host)"
        rm -rf "$wheels.tmp"
        (unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV
            BUILD_PYTHON=$HOST_PYTHON nice sh image/venv.sh wheels "$ctx" "$wheels.tmp") || die "venv.sh wheels failed"
        rm -f "$wheels.tmp"/logkeeper-*.whl && mv "$wheels.tmp" "$wheels"
    fi
    say "deps: the venv $VENV (venv.sh deps, chroot)"
    rm -rf "$deps.tmp" && mkdir -p "$deps.tmp/root$VENV"
    prepare_buildroot
    mount_on --bind "$deps.tmp/root$VENV" "$br$VENV"
    mount_on --bind -o ro "$wheels" "$br/wheels"
    in_chroot "$br" nice /bin/sh /tmp/image/venv.sh deps /wheels || die "venv.sh deps failed"
    pack "$deps.tmp/root" "$deps.tmp/layer.tar.gz" ".${VENV%/*}"
    rm -rf "$deps" && mv "$deps.tmp" "$deps"
    built+=(deps)
else cached+=(deps); fi

# --- layer 3: app -------------------------------------------------------------------------------
kapp=$({ cat image/recipe.env image/venv.sh; echo "steps=$STEPS arch=$arch $kdeps $ksrc"; } | key)
app=$CACHE/app-$kapp
if [ ! -f "$app/layer.tar.gz" ]; then
    say "app: logkeeper's wheel, its kernels compiled ahead of time (venv.sh app, chroot)"
    rm -rf "$app.tmp" && mkdir -p "$app.tmp/wheel" "$app.tmp/upper$VENV" "$app.tmp/work"
    (unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV
        nice "$HOST_PYTHON" -m pip wheel -q --no-deps -w "$app.tmp/wheel" "$ctx") || die "the wheel of logkeeper failed"
    prepare_buildroot
    mount_on -t overlay overlay \
        -o "lowerdir=$deps/root$VENV,upperdir=$app.tmp/upper$VENV,workdir=$app.tmp/work" "$br$VENV"
    mount_on --bind -o ro "$app.tmp/wheel" "$br/wheels"
    in_chroot "$br" nice /bin/sh /tmp/image/venv.sh app /wheels || die "venv.sh app failed"
    if [ -n "$(find "$app.tmp/upper" -type c -print -quit)" ]; then
        die "venv.sh app deleted files of the deps layer (whiteouts in $app.tmp/upper)"
    fi
    pack "$app.tmp/upper" "$app.tmp/layer.tar.gz" ".$VENV"
    date -u +%Y-%m-%dT%H:%M:%SZ >"$app.tmp/created"
    rm -rf "$app.tmp/work" "$app.tmp/upper"
    rm -rf "$app" && mv "$app.tmp" "$app"
    built+=(app)
else cached+=(app); fi

# --- the image ----------------------------------------------------------------------------------
archive=$CACHE/$IMAGE_NAME-$VERSION.oci.tar
summary=$("$HOST_PYTHON" image/oci.py image --arch "$arch" --created "$(cat "$app/created")" \
    --layout "$CACHE/oci" --archive "$archive" \
    --layer "$base/layer.tar.gz" --history "mmdebstrap $DEBIAN_SUITE $RUNTIME_PACKAGES; image/rootfs.sh" \
    --layer "$deps/layer.tar.gz" --history "image/venv.sh deps ($VENV, constraints.txt)" \
    --layer "$app/layer.tar.gz" --history "image/venv.sh app (logkeeper $VERSION)")
field() { "$HOST_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$summary" "$1"; }
digest=$(field digest)
name=$(field name)

# --- verified under runc, once per digest ------------------------------------------------------
stamp=$CACHE/verified-${digest#sha256:}
if [ ! -f "$stamp" ]; then
    say "verifying $digest under runc (uid $IMAGE_UID, read-only root)"
    bundle=$CACHE/bundle
    rm -rf "$bundle" "$CACHE/unpacked"
    # from the archive itself, as ctr would read it
    mkdir -p "$CACHE/unpacked" && tar -C "$CACHE/unpacked" -xf "$archive"
    umoci --log error unpack --image "$CACHE/unpacked:$VERSION" "$bundle" >/dev/null || die "umoci unpack failed"
    rm -rf "$CACHE/unpacked"
    printf '127.0.0.1 localhost logkeeper\n::1 localhost\n' >"$bundle/hosts"
    run() { # what to check, then the process's args (none: the image's entrypoint and command)
        local what=$1 id=logkeeper-image-verify-$$ out rc=0
        shift
        "$HOST_PYTHON" image/oci.py runtime-config "$bundle" "$@"
        out=$(timeout 300 runc run --bundle "$bundle" "$id" </dev/null 2>&1) || rc=$?
        runc delete --force "$id" >/dev/null 2>&1 || true
        if [ $rc != 0 ]; then
            printf '%s\n' "$out" | tail -n 20 >&2
            die "in the image: $what (exit $rc)"
        fi
        printf '%s\n' "$out"
    }
    usage=$(run "the entrypoint (tini -- logkeeper --help)")
    grep -q 'dump-log' <<<"$usage" || die "the entrypoint printed no usage of logkeeper: $usage"
    echo "  the entrypoint: $(grep -m1 -i usage <<<"$usage")"
    run "uid, read-only root, JAVA_HOME" /bin/sh -c '
        test "$(id -u):$(id -g)" = '"$IMAGE_UID:$IMAGE_GID"' || { id; exit 1; }
        awk '\''$2 == "/" {print $4}'\'' /proc/mounts | grep -q "^ro" || { echo "the root is writable"; exit 1; }
        touch /tmp/x && echo "uid $(id -u), read-only root, JAVA_HOME=$JAVA_HOME: $("$JAVA_HOME/bin/java" -version 2>&1 | head -n 1)"' |
        sed 's/^/  /'
    run "imports and the compiled kernels" /usr/bin/tini -- python -c '
import logkeeper, logkeeper_operator, pyspark, logkeeper.cli
import logkeeper.aot as aot, pathlib
built = list(pathlib.Path(aot.__file__).parent.glob("_kernels_*.so"))
assert aot.mode() == "aot" or not built, aot.mode()
print("  python -c import logkeeper, logkeeper_operator, pyspark: ok; kernels:", aot.mode())'
    run "a Spark session on the JRE" /usr/bin/tini -- env SPARK_LOCAL_IP=127.0.0.1 python -c '
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
     .config("spark.ui.showConsoleProgress", "false").getOrCreate())  # no progress bar before the line grepped
n = s.range(1000).selectExpr("sum(id) as n").collect()[0].n
print("  spark", s.version, "on java", s.sparkContext._jvm.java.lang.System.getProperty("java.version"), "sum:", n)
s.stop()
assert n == 499500' >"$bundle/spark.out"
    grep '^  spark' "$bundle/spark.out"
    rm -rf "$bundle"
    : >"$stamp"
fi

# --- keep only what this build uses -------------------------------------------------------------
for d in "$CACHE"/base-* "$CACHE"/buildroot-* "$CACHE"/wheels-* "$CACHE"/deps-* "$CACHE"/app-* "$CACHE"/verified-*; do
    case $d in "$base" | "$buildroot" | "$wheels" | "$deps" | "$app" | "$stamp") ;; *) rm -rf "$d" ;; esac
done

cat >"$CACHE/image.env" <<EOF
IMAGE_REF=$name
IMAGE_DIGEST=$digest
IMAGE_ID=$(field config)
IMAGE_ARCHIVE=$archive
EOF
if [ -n "${IMAGE_CHECK_DOCKERFILE:-}" ]; then
    flock -u 9
    bash image/dockerfile-check.sh
fi
mb() { "$HOST_PYTHON" -c 'import sys; print(f"{int(sys.argv[1]) / 1e6:.1f} MB")' "$1"; }
say "$name built in $(($(date +%s) - start)) s (rebuilt: ${built[*]:-nothing}; cached: ${cached[*]:-nothing})"
say "digest   $digest"
say "image id $(field config)"
say "size     $(mb "$(field size)") compressed ($(field layers) layers), $(mb "$(field unpacked)") unpacked"
say "archive  ${archive#"$ROOT"/} (ctr -n k8s.io images import $(basename "$archive"))"
