package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// offlineFixture is a cache that has pulled a few images (by tag and by digest) from a real upstream.
type offlineFixture struct {
	reg                                *registryProc
	cache                              *cacheProc
	ociDigest, dockerDigest, idxDigest string
	neverPulled                        string
}

func newOfflineFixture(t *testing.T) offlineFixture {
	reg := startRegistry(t, registryOpts{})
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
defaultPolicy: {upstreamTimeout: 2s}
`, reg.URL))
	f := offlineFixture{reg: reg, cache: c}
	f.ociDigest, _ = pushImage(t, reg.Host, "team/oci:v1", "oci", 2, 4096)
	f.dockerDigest, _ = pushImage(t, reg.Host, "team/docker:v1", "docker", 2, 4096)
	f.idxDigest, _ = pushIndex(t, reg.Host, "team/multi:v1")
	pushImage(t, reg.Host, "team/never:v1", "oci", 1, 512)
	f.neverPulled = "team/never:v1"
	f.pullAll(t)
	return f
}

// pullAll pulls every image completely through the cache, by tag and by digest.
func (f offlineFixture) pullAll(t *testing.T) {
	t.Helper()
	h := f.cache.Host
	pullImage(t, h, "team/oci:v1", f.ociDigest, types.OCIManifestSchema1)
	pullImage(t, h, "team/oci@"+f.ociDigest, f.ociDigest, types.OCIManifestSchema1)
	pullImage(t, h, "team/docker:v1", f.dockerDigest, types.DockerManifestSchema2)
	pullImage(t, h, "team/docker@"+f.dockerDigest, f.dockerDigest, types.DockerManifestSchema2)
	pullIndex(t, h, "team/multi:v1", f.idxDigest, 2)
	pullIndex(t, h, "team/multi@"+f.idxDigest, f.idxDigest, 2)
}

// assertNeverPulledFailsFast checks that an image the cache never saw fails within upstreamTimeout + 1s with a
// message that says why.
func (f offlineFixture) assertNeverPulledFailsFast(t *testing.T) {
	t.Helper()
	repo, tag, _ := strings.Cut(f.neverPulled, ":")
	start := time.Now()
	a := manifest(t, f.cache, http.MethodGet, repo, tag)
	took := time.Since(start)
	code, msg := a.ociError()
	if (a.Status != 502 && a.Status != 504) || code != "UNAVAILABLE" || !strings.Contains(msg, "nothing is cached") {
		t.Fatalf("never-pulled image: %d %s %q; want 502/504 UNAVAILABLE saying nothing is cached", a.Status, code, msg)
	}
	if took > 3*time.Second {
		t.Fatalf("never-pulled image failed after %s; want under upstreamTimeout (2s) + 1s", took)
	}
}

// TestUpstreamStopped: with the upstream process gone, everything pulled before pulls again completely.
func TestUpstreamStopped(t *testing.T) {
	f := newOfflineFixture(t)
	f.reg.Stop(t)
	f.pullAll(t)
	expect(t, manifest(t, f.cache, http.MethodGet, "team/oci", "v1"), 200, "STALE", "tag with the upstream down")
	expect(t, manifest(t, f.cache, http.MethodGet, "team/oci", f.ociDigest), 200, "HIT", "digest with the upstream down")
	f.assertNeverPulledFailsFast(t)
}

// TestRestartServesFromDisk: a stopped and restarted cache (and one killed with SIGKILL) still serves
// everything it had, with the upstream down.
func TestRestartServesFromDisk(t *testing.T) {
	f := newOfflineFixture(t)
	f.reg.Stop(t)
	f.cache.Restart(t)
	f.pullAll(t)
	f.assertNeverPulledFailsFast(t)

	f.cache.Kill(t)
	f.cache.Start(t)
	f.pullAll(t)
	entries, err := os.ReadDir(filepath.Join(f.cache.StorageDir, "tmp"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("temp files after restart: %v %v", entries, err)
	}
}
