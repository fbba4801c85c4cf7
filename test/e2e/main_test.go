// Package e2e runs imagecache as a process between real clients (go-containerregistry, ctr, the OCI
// conformance runner) and a real upstream (the CNCF distribution registry), with test/faultproxy between
// them where a test needs to count or break the upstream traffic. Tools come from hack/test-tools.sh.
package e2e

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The imagecache binary is built once per test binary into a directory that outlives any single test.
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// repoRoot is found from this file's location so tests work from any working directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// tool returns the path of a binary built by hack/test-tools.sh, failing the test if it is missing.
func tool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run hack/test-tools.sh first (%v)", p, err)
	}
	return p
}
