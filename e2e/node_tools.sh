#!/usr/bin/env bash
# The node of make e2e (issue 18), built once and cached beside e2e/tools.sh's
# control plane. e2e/tools.sh runs this when LOGKEEPER_E2E_NODE=1 and passes CACHE, K8S_VERSION,
# K8S_LDFLAGS and MOD_SUM in the environment:
#   kubelet, kube-scheduler, kube-proxy
#                                    go build from a copy of e2e/controlplane (the same module set as
#                                    kube-apiserver); the copy lets Go add the few go.sum lines the
#                                    node's packages need without touching e2e/controlplane/go.sum,
#                                    which keys make e2e's cache
#   containerd, containerd-shim-runc-v2, ctr
#                                    go install github.com/containerd/containerd/v2/cmd/...@$CONTAINERD_VERSION
#                                    (Debian's containerd 1.6 is too old for kubelet 1.36)
#   bridge, host-local, loopback, portmap
#                                    go install from github.com/containernetworking/plugins@$CNI_VERSION
#   crictl                           go install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION
#   runc, iptables                   Debian's (apt-get install; crun fails on this host's cgroups;
#                                    kube-proxy and kubelet need iptables)
#   pause image                      a static C pause() binary (gcc -static), one layer, packed as an
#                                    OCI archive by e2e/pause_image.py (no registry is reachable)
# Prints NAME=PATH lines and writes them to $CACHE/node-tools.env; prints each component's version
# on stderr. GO_BUILD_P=N tunes parallelism; GO_NICE (default 19) is the builds' nice level.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${CACHE:?run through e2e/tools.sh with LOGKEEPER_E2E_NODE=1}" "${K8S_VERSION:?}" "${K8S_LDFLAGS:?}" "${MOD_SUM:?}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CNI_VERSION="${CNI_VERSION:-v1.9.1}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
NICE="nice -n ${GO_NICE:-19}"
say() { echo "e2e/node_tools.sh: $*" >&2; }

NODE_K8S_BIN="$CACHE/k8s-node-$K8S_VERSION-$MOD_SUM/bin"
if [[ ! -x "$NODE_K8S_BIN/kubelet" || ! -x "$NODE_K8S_BIN/kube-scheduler" || ! -x "$NODE_K8S_BIN/kube-proxy" ]]; then
  say "building kubelet, kube-scheduler and kube-proxy $K8S_VERSION (cached in $NODE_K8S_BIN)"
  start=$SECONDS
  src="$CACHE/k8s-node-src-$MOD_SUM"
  rm -rf "$src" && mkdir -p "$src" "$NODE_K8S_BIN.tmp"
  cp "$here/controlplane/go.mod" "$here/controlplane/go.sum" "$src/"
  (cd "$src" && GOFLAGS="${GOFLAGS:-} -mod=mod" $NICE go build -p "${GO_BUILD_P:-2}" -trimpath -ldflags "$K8S_LDFLAGS" \
      -o "$NODE_K8S_BIN.tmp/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kube-proxy)
  rm -rf "$NODE_K8S_BIN" && mv "$NODE_K8S_BIN.tmp" "$NODE_K8S_BIN"
  say "kubelet, kube-scheduler and kube-proxy built in $((SECONDS - start)) s"
fi

CONTAINERD_BIN="$CACHE/containerd-$CONTAINERD_VERSION/bin"
if [[ ! -x "$CONTAINERD_BIN/containerd" || ! -x "$CONTAINERD_BIN/containerd-shim-runc-v2" || ! -x "$CONTAINERD_BIN/ctr" ]]; then
  say "building containerd $CONTAINERD_VERSION"
  start=$SECONDS
  pkg=github.com/containerd/containerd/v2
  GOBIN="$CONTAINERD_BIN.tmp" GOFLAGS="${GOFLAGS:-} -trimpath" $NICE go install -p "${GO_BUILD_P:-2}" \
    -ldflags "-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Revision=go-install" \
    "$pkg/cmd/containerd@$CONTAINERD_VERSION" "$pkg/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "$pkg/cmd/ctr@$CONTAINERD_VERSION"
  rm -rf "$CONTAINERD_BIN" && mv "$CONTAINERD_BIN.tmp" "$CONTAINERD_BIN"
  say "containerd built in $((SECONDS - start)) s"
fi

CNI_BIN="$CACHE/cni-plugins-$CNI_VERSION/bin"
if [[ ! -x "$CNI_BIN/bridge" || ! -x "$CNI_BIN/host-local" || ! -x "$CNI_BIN/loopback" || ! -x "$CNI_BIN/portmap" ]]; then
  say "building CNI plugins $CNI_VERSION"
  start=$SECONDS
  pkg=github.com/containernetworking/plugins
  GOBIN="$CNI_BIN.tmp" GOFLAGS="${GOFLAGS:-} -trimpath" CGO_ENABLED=0 $NICE go install -p "${GO_BUILD_P:-2}" \
    -ldflags "-s -w -X $pkg/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
    "$pkg/plugins/main/bridge@$CNI_VERSION" "$pkg/plugins/ipam/host-local@$CNI_VERSION" \
    "$pkg/plugins/main/loopback@$CNI_VERSION" "$pkg/plugins/meta/portmap@$CNI_VERSION"
  rm -rf "$CNI_BIN" && mv "$CNI_BIN.tmp" "$CNI_BIN"
  say "CNI plugins built in $((SECONDS - start)) s"
fi

CRICTL_BIN="$CACHE/crictl-$CRICTL_VERSION/bin"
if [[ ! -x "$CRICTL_BIN/crictl" ]]; then
  say "building crictl $CRICTL_VERSION"
  start=$SECONDS
  GOBIN="$CRICTL_BIN.tmp" GOFLAGS="${GOFLAGS:-} -trimpath" CGO_ENABLED=0 $NICE go install -p "${GO_BUILD_P:-2}" \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  rm -rf "$CRICTL_BIN" && mv "$CRICTL_BIN.tmp" "$CRICTL_BIN"
  say "crictl built in $((SECONDS - start)) s"
fi

# Debian's runc, and iptables for kube-proxy (iptables mode) and kubelet's own chains (a fresh
# machine may have neither: kube-proxy then exits with "iptables is not available on this host")
missing=()
command -v runc >/dev/null || missing+=(runc)
command -v iptables >/dev/null || missing+=(iptables)
if (( ${#missing[@]} )); then
  say "installing Debian's ${missing[*]}"
  apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 || true; apt-get install -y -q "${missing[@]}" >/dev/null; }
fi
RUNC="$(command -v runc)"

# The sandbox ("pause") image: PID 1 of each pod's sandbox, which only has to sleep until signalled.
PAUSE_SUM="$(cat "$here/pause.c" "$here/pause_image.py" | sha256sum | cut -c1-12)"
PAUSE_DIR="$CACHE/pause-$PAUSE_SUM"
PAUSE_REF="registry.k8s.io/pause:logkeeper-$PAUSE_SUM"
if [[ ! -s "$PAUSE_DIR/pause.oci.tar" ]]; then
  say "building the pause image"
  rm -rf "$PAUSE_DIR.tmp" && mkdir -p "$PAUSE_DIR.tmp"
  gcc -static -Os -s -o "$PAUSE_DIR.tmp/pause" "$here/pause.c"
  python3 "$here/pause_image.py" "$PAUSE_DIR.tmp/pause" "$PAUSE_REF" "$PAUSE_DIR.tmp/pause.oci.tar" >&2
  rm -rf "$PAUSE_DIR" && mv "$PAUSE_DIR.tmp" "$PAUSE_DIR"
fi

{
  say "versions:"
  echo "  kubelet:        $("$NODE_K8S_BIN/kubelet" --version 2>&1)"
  echo "  kube-scheduler: $("$NODE_K8S_BIN/kube-scheduler" --version 2>&1)"
  echo "  kube-proxy:     $("$NODE_K8S_BIN/kube-proxy" --version 2>&1)"
  echo "  containerd:     $("$CONTAINERD_BIN/containerd" --version 2>&1)"
  echo "  containerd-shim-runc-v2: $("$CONTAINERD_BIN/containerd-shim-runc-v2" -v 2>&1 | sed -n 's/^ *Version: *//p')"
  echo "  ctr:            $("$CONTAINERD_BIN/ctr" --version 2>&1)"
  echo "  crictl:         $("$CRICTL_BIN/crictl" --version 2>&1)"
  echo "  runc:           $("$RUNC" --version 2>&1 | head -1) ($(dpkg-query -W -f='${Package} ${Version}' runc 2>/dev/null || echo 'not a Debian package'))"
  for p in bridge host-local loopback portmap; do
    echo "  cni $p: $("$CNI_BIN/$p" </dev/null 2>&1 | head -1)"
  done
  echo "  pause image:    $PAUSE_REF ($(cat "$PAUSE_DIR/pause.oci.tar.digest" 2>/dev/null))"
} >&2

{
  echo "KUBELET=$NODE_K8S_BIN/kubelet"
  echo "KUBE_SCHEDULER=$NODE_K8S_BIN/kube-scheduler"
  echo "KUBE_PROXY=$NODE_K8S_BIN/kube-proxy"
  echo "CONTAINERD=$CONTAINERD_BIN/containerd"
  echo "CONTAINERD_BIN_DIR=$CONTAINERD_BIN"
  echo "CTR=$CONTAINERD_BIN/ctr"
  echo "CRICTL=$CRICTL_BIN/crictl"
  echo "RUNC=$RUNC"
  echo "CNI_BIN_DIR=$CNI_BIN"
  echo "PAUSE_IMAGE=$PAUSE_REF"
  echo "PAUSE_ARCHIVE=$PAUSE_DIR/pause.oci.tar"
} | tee "$CACHE/node-tools.env"
