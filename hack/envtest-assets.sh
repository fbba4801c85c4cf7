#!/usr/bin/env bash
# Builds the control plane the controller tests run against (envtest): etcd and kube-apiserver, from the Go
# module proxy only, into bin/envtest/ (pass another directory as $1). Skips what is already built. Point
# controller-runtime's envtest at them with KUBEBUILDER_ASSETS=bin/envtest. Cold, on 2 cores: ~8 minutes.
set -euo pipefail
OUT=$(realpath -m "${1:-$(dirname "$0")/../bin/envtest}")
K8S=${K8S:-v1.34.4}          # kube-apiserver; its staging modules are the v0.<minor> releases of k8s.io/*
STG=v0.${K8S#v1.}
ETCD=${ETCD:-v3.6.16}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ ! -x "$OUT/etcd" ]; then
  echo "hack/envtest-assets.sh: building etcd $ETCD" >&2
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > main.go
  go mod init envtest/etcd >/dev/null 2>&1
  go get go.etcd.io/etcd/server/v3@"$ETCD" >/dev/null 2>&1
  go mod tidy >/dev/null 2>&1
  go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" .
fi

if [ ! -x "$OUT/kube-apiserver" ]; then
  echo "hack/envtest-assets.sh: building kube-apiserver $K8S (several minutes on a cold build cache)" >&2
  mkdir -p "$WORK/kas/tools" && cd "$WORK/kas"
  go mod download -json k8s.io/kubernetes@"$K8S" >/dev/null
  MOD=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S.mod
  # k8s.io/kubernetes replaces its k8s.io/* dependencies with ./staging; point them at the published
  # releases of the same minor instead.
  { echo 'module envtest/kas'; echo; echo 'go 1.24.0'; echo; echo "require k8s.io/kubernetes $K8S"; echo; echo 'replace (';
    grep -E '=> \./staging' "$MOD" | awk -v v="$STG" '{print "\t"$1" => "$1" "v}'; echo ')'; } > go.mod
  printf '//go:build tools\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools/tools.go
  go mod tidy >/dev/null 2>&1
  V=k8s.io/component-base/version
  MINOR=$(echo "$K8S" | cut -d. -f2)
  go build -trimpath -ldflags "-s -w -X $V.gitVersion=$K8S -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean" \
    -o "$OUT/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
fi
echo "hack/envtest-assets.sh: $OUT has etcd and kube-apiserver" >&2
