#!/usr/bin/env bash
# IMAGE_CHECK_DOCKERFILE=1 make image: after make image, build ../Dockerfile itself without a
# daemon (Debian's buildah, --isolation chroot) and compare it with make image's image: the
# config, the Debian packages, the Python distributions in the venv, the user and JAVA_HOME.
#
# No registry is reachable here, so BASE (debian:bookworm-slim for Docker users) is a local image
# of the same suite bootstrapped by mmdebstrap (minbase, as the slim images are). The host's CA
# bundle and a pip.conf naming it are mounted into the RUN steps for pip (this machine reaches
# PyPI through a TLS proxy); nothing else differs from `docker build`.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${LOGKEEPER_IMAGE_CACHE:-$PWD/.cache/image}
HOST_PYTHON=${PYTHON:-python3}
. image/recipe.env
say() { echo "make image: dockerfile check: $*"; }
die() {
    echo "make image: dockerfile check FAILED: $*" >&2
    exit 1
}
[ -f "$CACHE/image.env" ] || die "no image yet (make image first)"
command -v buildah >/dev/null || {
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah; } >/dev/null ||
        die "cannot install buildah"
}
start=$(date +%s)

kbase=$({ echo "$DEBIAN_SUITE $DEBIAN_SOURCES"; dpkg --print-architecture; } | sha256sum | cut -c1-16)
base=localhost/logkeeper-build-base:$DEBIAN_SUITE-$kbase
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    say "the base $base (mmdebstrap minbase $DEBIAN_SUITE)"
    IFS='|' read -ra sources <<<"$DEBIAN_SOURCES"
    tarball=$CACHE/dockerbase.tar
    nice mmdebstrap --variant=minbase --mode=root --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$DEBIAN_SUITE" "$tarball" "${sources[@]}" >"$CACHE/dockerbase.log" 2>&1 ||
        die "mmdebstrap failed ($CACHE/dockerbase.log)"
    c=$(buildah from scratch)
    buildah add --quiet "$c" "$tarball" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$c"
    buildah commit --quiet --rm "$c" "$base" >/dev/null
    rm -f "$tarball"
fi

ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
printf '[global]\ncert = /etc/pip-ca.crt\n' >"$CACHE/dockerfile-pip.conf"
tag=localhost/logkeeper:dockerfile
say "buildah bud --isolation chroot --build-arg BASE=$base -t $tag ."
nice buildah bud --quiet --isolation chroot --layers --build-arg "BASE=$base" \
    -v "$ca:/etc/pip-ca.crt:ro" -v "$CACHE/dockerfile-pip.conf:/etc/pip.conf:ro" \
    -t "$tag" -f Dockerfile . >"$CACHE/dockerfile-build.log" 2>&1 || {
    tail -n 30 "$CACHE/dockerfile-build.log" >&2
    die "buildah bud failed (log: $CACHE/dockerfile-build.log)"
}

c=$(buildah from --quiet "$tag")
trap 'buildah umount "$c" >/dev/null 2>&1; buildah rm "$c" >/dev/null 2>&1' EXIT
mnt=$(buildah mount "$c")
buildah inspect --type image "$tag" >"$CACHE/dockerfile-inspect.json"
"$HOST_PYTHON" image/compare.py "$CACHE" "$mnt" "$CACHE/dockerfile-inspect.json" || die "the two images differ (above)"
say "the Dockerfile's image and make image's agree (buildah: $(($(date +%s) - start)) s)"
