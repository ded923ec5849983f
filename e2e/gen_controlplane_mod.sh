#!/usr/bin/env bash
# Regenerate e2e/controlplane/go.mod for another Kubernetes release:
#   bash e2e/gen_controlplane_mod.sh v1.36.3
# k8s.io/kubernetes's go.mod requires each k8s.io staging module at v0.0.0 and replaces it with
# ./staging/src/k8s.io/<name>, which only resolves inside its own repository. This writes a main
# module that requires k8s.io/kubernetes VERSION and replaces every staging module it requires at
# v0.0.0 with the published v0.<minor>.<patch>, then lets `go mod tidy` fill in the rest.
set -euo pipefail
version="${1:?usage: gen_controlplane_mod.sh vMAJOR.MINOR.PATCH}"
dir="$(cd "$(dirname "$0")" && pwd)/controlplane"
mod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')"
staging="$(sed -n 's/^\s*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$mod")"
gover="$(sed -n 's/^go \(.*\)$/\1/p' "$mod")"
{
  sed -n '1,/^module /p' "$dir/go.mod"
  echo
  echo "go $gover"
  echo
  echo "tool ("
  echo "	k8s.io/kubernetes/cmd/kube-apiserver"
  echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
  echo ")"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  for m in $staging; do echo "	$m => $m v0.${version#v1.}"; done
  echo ")"
} > "$dir/go.mod.new"
mv "$dir/go.mod.new" "$dir/go.mod"
rm -f "$dir/go.sum"
(cd "$dir" && go mod tidy)
echo "e2e/controlplane/go.mod now builds Kubernetes $version"
