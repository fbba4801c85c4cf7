#!/usr/bin/env bash
# Regenerates the CRDs (deploy/crds, charts/imagecache/crds) and deepcopy code from the kubebuilder markers in
# api/. controller-gen is built from the Go module proxy into bin/ once.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/controller-gen ] || GOBIN="$PWD/bin" go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0
bin/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/crds
if [ -d charts/imagecache/crds ]; then cp deploy/crds/imagecache.io_*.yaml charts/imagecache/crds/; fi  # not the kustomization: helm would apply it
