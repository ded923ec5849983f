#!/bin/sh
# Run as root in the image's root filesystem once its Debian packages (RUNTIME_PACKAGES) are in:
# by the Dockerfile (RUN) and by image/build.sh (chroot into the mmdebstrap rootfs). Reads
# recipe.env beside it. The same steps whichever build runs them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"

# The user every role runs as; HOME is /tmp, the one writable path of a read-only root.
groupadd --gid "$IMAGE_GID" "$IMAGE_USER"
useradd --uid "$IMAGE_UID" --gid "$IMAGE_GID" --home-dir /tmp --no-create-home \
    --shell /usr/sbin/nologin "$IMAGE_USER"

# JAVA_HOME without an architecture in it: a link to the JRE that `java` resolves to here
# (/usr/lib/jvm/java-17-openjdk-<arch> on Debian).
java=$(readlink -f "$(command -v java)")
jre=${java%/bin/java}
test -x "$jre/bin/java" || { echo "rootfs.sh: no JRE behind $java" >&2; exit 1; }
ln -sfn "$jre" "$JAVA_HOME"
"$JAVA_HOME/bin/java" -version 2>&1 | head -n 1

# What a container never reads: package lists and caches, logs of the installation.
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
    /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/log/apt/* /var/log/*.log
