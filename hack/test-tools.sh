#!/usr/bin/env bash
# Builds or installs every real component the test suite drives, once: Go tools from the Go module proxy into
# the git-ignored bin/, Debian packages with apt-get. Re-running is cheap: each tool is skipped when present.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/bin"
mkdir -p "$BIN"

go_tool() { # go_tool BINARY MODULE@VERSION
  if [ -x "$BIN/$1" ]; then return; fi
  echo "hack/test-tools.sh: building $1 from $2" >&2
  GOBIN="$BIN" GOFLAGS=-mod=mod go install "$2"
}

apt_tool() { # apt_tool COMMAND PACKAGE
  if command -v "$1" >/dev/null 2>&1; then return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "hack/test-tools.sh: $1 is missing; install the Debian package $2 (needs root)" >&2
    return
  fi
  if [ -z "${APT_UPDATED:-}" ]; then
    apt-get update -qq
    APT_UPDATED=1
  fi
  echo "hack/test-tools.sh: installing $2 with apt-get" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

apt_tool containerd containerd
apt_tool skopeo skopeo
apt_tool podman podman
# Headless Chromium loads the status page (/ui) in test/e2e/ui_test.go and screenshots it into test-artifacts/.
apt_tool chromium chromium

# The CNCF distribution registry is the real upstream in tests (~4.5 min cold on 2 cores).
go_tool registry github.com/distribution/distribution/v3/cmd/registry@v3.1.2
go_tool crane github.com/google/go-containerregistry/cmd/crane@v0.22.1
go_tool conformance github.com/opencontainers/distribution-spec/conformance@v0.0.0-20260831232431-97274622c111
# Helm lints and renders the chart in charts/imagecache (test/deploy; ~3 min cold).
go_tool helm helm.sh/helm/v3/cmd/helm@v3.22.0
# kustomize builds deploy/ and its proxy component as `kubectl apply -k` would (test/deploy; ~10 s cold).
go_tool kustomize sigs.k8s.io/kustomize/kustomize/v5@v5.7.1

# A real kube-apiserver and etcd for the controller and deploy tests (~8 min cold; skipped when built).
bash hack/envtest-assets.sh bin/envtest
