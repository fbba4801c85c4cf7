#!/usr/bin/env bash
# Runs the whole test suite: builds or installs the real components the tests drive (hack/test-tools.sh),
# then every Go test, including the end-to-end tests against a real registry, containerd and the OCI
# conformance suite. Extra arguments go to `go test` (e.g. -run TestPolicyMatrix).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/test-tools.sh
export PATH="$PWD/bin:$PATH"
go vet ./...
# Everything runs under the race detector, including the imagecache binary the e2e tests start.
export E2E_RACE="${E2E_RACE-1}"
go test -race -count=1 -timeout 40m "$@" ./...
