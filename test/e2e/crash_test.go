package e2e

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/test/faultproxy"
)

// crashFilesNamed lists the files under dir whose name contains the hex part of digest.
func crashFilesNamed(dir, digest string) []string {
	hexPart := strings.TrimPrefix(digest, "sha256:")
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), hexPart) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// crashLargestTemp is the size of the largest file in the cache's tmp/ directory (0 when there is none).
func crashLargestTemp(storage string) int64 {
	entries, err := os.ReadDir(filepath.Join(storage, "tmp"))
	if err != nil {
		return 0
	}
	var largest int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Size() > largest {
			largest = info.Size()
		}
	}
	return largest
}

// TestKillDuringDownload kills the cache with SIGKILL while it is half-way through a 256 MiB blob download
// (issue 4 item 5). After a restart with the upstream gone: tmp/ is empty, the blob is not served (a fast
// OCI error, never a 200 with partial bytes, never a hang), it has no file under blobs/, and an image
// pulled before still pulls completely. With the upstream back the blob is fetched again, complete and
// correct.
func TestKillDuringDownload(t *testing.T) {
	const (
		bigSize    = 256 << 20
		stallAfter = 64 << 20
		timeout    = 5 * time.Second // the policy's upstreamTimeout, also the idle timeout of a transfer
	)
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	smallDigest, _ := pushImage(t, reg.Host, "team/small:v1", "oci", 2, 64<<10)
	_, bigDigest := pushBigImage(t, reg.Host, "team/big:v1", bigSize)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
defaultPolicy: {upstreamTimeout: %s}
`, px.URL(), timeout))

	pullImage(t, c.Host, "team/small:v1", smallDigest, types.OCIManifestSchema1)
	pullImage(t, c.Host, "team/small@"+smallDigest, smallDigest, types.OCIManifestSchema1)

	// The upstream sends the first 64 MiB, then nothing: the cache's temp file stops growing there, well
	// before its idle timeout cuts the transfer. The kill lands while the download is in progress.
	px.Stall(stallAfter, faultproxy.KindBlob)
	bigURL := c.URL + "/v2/team/big/blobs/" + bigDigest
	inflight := make(chan blobFetch, 1)
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	go func() { inflight <- fetchBlob(client, bigURL) }()

	waitFor(t, 30*time.Second, "a partial temp file of at least 32 MiB in tmp/", func() error {
		if n := crashLargestTemp(c.StorageDir); n < 32<<20 {
			return fmt.Errorf("largest temp file has %d bytes", n)
		}
		return nil
	})
	partial := crashLargestTemp(c.StorageDir)
	if partial >= bigSize {
		t.Fatalf("temp file already holds %d bytes: the kill would not be mid-download", partial)
	}
	c.Kill(t)
	t.Logf("killed the cache with a %d MiB temp file of the %d MiB blob", partial>>20, bigSize>>20)

	select {
	case g := <-inflight:
		t.Logf("client in flight at the kill: status %d, %d of %d bytes, err %v", g.status, g.n, g.contentLength, g.err)
		if g.status == http.StatusOK && g.err == nil {
			t.Errorf("client in flight at the kill got a complete 200 of %d bytes (Content-Length %d)", g.n, g.contentLength)
		}
		if g.n >= bigSize {
			t.Errorf("client in flight at the kill read all %d bytes", g.n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("client in flight still not done 30s after the cache was killed")
	}

	px.Clear()
	px.Refuse()
	c.Start(t)

	// Open empties tmp/ before the server listens, so this holds as soon as /readyz answered.
	entries, err := os.ReadDir(filepath.Join(c.StorageDir, "tmp"))
	if err != nil {
		t.Fatalf("storage tmp/: %v", err)
	}
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("tmp/ after the restart still holds %v", names)
	}
	if found := crashFilesNamed(filepath.Join(c.StorageDir, "blobs"), bigDigest); len(found) > 0 {
		t.Errorf("blobs/ holds %v for a blob whose download was killed", found)
	}

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		start := time.Now()
		a := call(t, method, bigURL)
		took := time.Since(start)
		if a.Status == http.StatusOK {
			t.Errorf("%s of the killed blob with the upstream down: 200 with %d body bytes (Content-Length %s)", method, len(a.Body), a.Header.Get("Content-Length"))
		} else if a.Status != http.StatusBadGateway && a.Status != http.StatusGatewayTimeout {
			t.Errorf("%s of the killed blob with the upstream down: %d, want 502 or 504", method, a.Status)
		}
		if method == http.MethodGet {
			if code, msg := a.ociError(); code == "" || msg == "" {
				t.Errorf("GET of the killed blob: body %q is not OCI error JSON", a.Body)
			}
		}
		if took > timeout+time.Second {
			t.Errorf("%s of the killed blob took %s, want under upstreamTimeout (%s) + 1s", method, took, timeout)
		}
	}

	expect(t, manifest(t, c, http.MethodGet, "team/small", "v1"), 200, "STALE", "small image by tag after the restart, upstream down")
	expect(t, manifest(t, c, http.MethodGet, "team/small", smallDigest), 200, "HIT", "small image by digest after the restart, upstream down")
	pullImage(t, c.Host, "team/small:v1", smallDigest, types.OCIManifestSchema1)
	pullImage(t, c.Host, "team/small@"+smallDigest, smallDigest, types.OCIManifestSchema1)

	// Upstream back: the blob is fetched again and served whole.
	if err := px.Resume(); err != nil {
		t.Fatal(err)
	}
	before := px.Count(http.MethodGet, faultproxy.KindBlob)
	got := fetchBlob(client, bigURL)
	if got.err != nil || got.status != http.StatusOK || got.n != bigSize || got.sum != bigDigest {
		t.Fatalf("GET of the big blob with the upstream back: status %d, %d of %d bytes hashing to %s, err %v %s",
			got.status, got.n, int64(bigSize), got.sum, got.err, got.body)
	}
	if got.xcache != "MISS" {
		t.Errorf("GET of the big blob with the upstream back: X-Cache %q, want MISS", got.xcache)
	}
	if n := px.Count(http.MethodGet, faultproxy.KindBlob) - before; n != 1 {
		t.Errorf("upstream blob GETs for the refetch: %d, want 1", n)
	}
}

// A kill -9 in the middle of an eviction run is not tested here: the only outside sign of a run is its
// "evicted" log line, written after the run has removed everything, and there is no hook that holds a run
// half-way, so such a test would kill before, after or during the run by luck. The store's ordering (index
// records before files, manifests before their blobs) is what makes that crash harmless.
