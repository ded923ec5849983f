#!/usr/bin/env bash
# make kind-e2e: the make e2e steps on a kind cluster, with real pods (needs Docker; it cannot run
# on the project's CI machines, which have no container engine). The image is built from the
# Dockerfile and loaded into kind; the operator runs as the chart's Deployment; kind's kubelet
# and local-path storage run the sidecar and the CompactionJob's Job.
#   KIND_CLUSTER=logkeeper-e2e  KEEP=1 (keep the cluster)  HELM/KIND/KUBECTL (tool paths)
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER="${KIND_CLUSTER:-logkeeper-e2e}"
IMAGE=logkeeper:e2e
KIND="${KIND:-$(command -v kind || echo "$(go env GOPATH)/bin/kind")}"
HELM="${HELM:-$(command -v helm || sed -n 's/^HELM=//p' "${LOGKEEPER_E2E_CACHE:-$HOME/.cache/logkeeper/e2e}/tools.env")}"
KUBECTL="${KUBECTL:-$(command -v kubectl || echo .venv/bin/kubectl)}"
command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "make kind-e2e: needs a running Docker"; exit 2; }
[[ -x "$KIND" ]] || go install sigs.k8s.io/kind@v0.30.0
[[ -x "$HELM" ]] || HELM="$(LOGKEEPER_E2E_CACHE="${LOGKEEPER_E2E_CACHE:-$HOME/.cache/logkeeper/e2e}" bash e2e/tools.sh | sed -n 's/^HELM=//p')"
k() { "$KUBECTL" --context "kind-$CLUSTER" "$@"; }
wait_for() { local what="$1"; shift; for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 2; done; echo "timed out: $what"; exit 1; }

docker build -t "$IMAGE" .
"$KIND" get clusters | grep -qx "$CLUSTER" || "$KIND" create cluster --name "$CLUSTER" --wait 120s
trap '[[ -n "${KEEP:-}" ]] || "$KIND" delete cluster --name "$CLUSTER"' EXIT
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

k apply -f crds/
k create namespace e2e --dry-run=client -o yaml | k apply -f -
"$HELM" --kube-context "kind-$CLUSTER" upgrade --install logkeeper charts/logkeeper -n logkeeper-system --create-namespace \
  --set image.repository=logkeeper --set image.tag=e2e --set image.pullPolicy=Never \
  --set 'operator.watchNamespaces={e2e}' --set operator.settings.status\\.interval\\.seconds=3 --wait
k apply -n e2e -f e2e/kind-logvolume.yaml
wait_for "LogVolume Ready" sh -c "$KUBECTL --context kind-$CLUSTER get lv orders -n e2e -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
k get logvolumes -n e2e
k delete logvolume orders -n e2e --wait
wait_for "StatefulSet deleted" sh -c "! $KUBECTL --context kind-$CLUSTER get statefulset orders -n e2e"
echo "make kind-e2e: passed"
