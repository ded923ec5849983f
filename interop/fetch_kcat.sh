#!/usr/bin/env bash
# kcat (Debian's package) for the Kafka listener tests, unpacked into a cache without root.
#
#   interop/fetch_kcat.sh          # prints the path of a runnable kcat wrapper on its last line
#
# `apt-get download` fetches kcat and, for each shared library it needs that the machine does not
# have (ldconfig -p), the Debian package that ships it (librdkafka1, libyajl2, ...); `dpkg -x`
# unpacks them under $CACHE/root. The wrapper $CACHE/kcat runs the unpacked binary with
# LD_LIBRARY_PATH pointing at the unpacked libraries. Reruns with the wrapper present do nothing
# and need no network.
#
# Environment: LOGKEEPER_KCAT_CACHE (default <repo>/.cache/kcat, git-ignored).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
CACHE="${LOGKEEPER_KCAT_CACHE:-$repo/.cache/kcat}"
say() { echo "fetch_kcat: $*" >&2; }

if [[ -x "$CACHE/kcat" ]] && "$CACHE/kcat" -V >/dev/null 2>&1; then
  echo "$CACHE/kcat"
  exit 0
fi
command -v apt-get >/dev/null || { say "apt-get not found: kcat is taken from Debian's packages"; exit 1; }
mkdir -p "$CACHE/debs" "$CACHE/root"
cd "$CACHE/debs"

download() {  # download PACKAGE (refreshing the package lists once when apt does not know it)
  if ! apt-get download "$1" >/dev/null 2>&1; then
    say "apt-get update (the package lists do not have $1)"
    apt-get update >/dev/null 2>&1 || true
    apt-get download "$1" >/dev/null
  fi
  dpkg -x "$(ls -t "$1"_*.deb | head -1)" "$CACHE/root"
}

download kcat
# libraries kcat and librdkafka link against -> the Debian package of each missing one
declare -A lib_pkg=([librdkafka.so.1]=librdkafka1 [libyajl.so.2]=libyajl2 [liblz4.so.1]=liblz4-1
                    [libsasl2.so.2]=libsasl2-2 [libssl.so.3]=libssl3 [libzstd.so.1]=libzstd1 [libz.so.1]=zlib1g)
for lib in "${!lib_pkg[@]}"; do
  if ! ldconfig -p | grep -q "[[:space:]]$lib "; then
    say "fetching ${lib_pkg[$lib]} for $lib"
    download "${lib_pkg[$lib]}"
  fi
done

libdirs="$(find "$CACHE/root" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)"
cat >"$CACHE/kcat.tmp" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$CACHE/root/usr/bin/kcat" "\$@"
EOF
chmod +x "$CACHE/kcat.tmp"
"$CACHE/kcat.tmp" -V >/dev/null || { say "the unpacked kcat does not run:"; "$CACHE/kcat.tmp" -V; exit 1; }
mv "$CACHE/kcat.tmp" "$CACHE/kcat"
say "$("$CACHE/kcat" -V 2>&1 | head -1)"
echo "$CACHE/kcat"
