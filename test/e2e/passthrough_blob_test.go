package e2e

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestBlobsTooLargeToKeepStreamThrough: a blob over storage.maxObjectSize, or larger than storage.maxSize
// itself, can never be kept; the client still gets it, verified, and nothing is stored: the next request
// goes upstream again.
func TestBlobsTooLargeToKeepStreamThrough(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	overObject := pushBlobOfSize(t, reg.Host, "team/big", 600<<10)
	overLimit := pushBlobOfSize(t, reg.Host, "team/big", 3<<20)
	for _, tc := range []struct {
		name, storage, blob string
	}{
		{"over maxObjectSize", "maxObjectSize: 512Ki", overObject},
		{"larger than maxSize", "maxSize: 1Mi", overLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
storage:
  %s
`, px.URL(), tc.storage))
			for i := range 2 {
				px.Reset()
				a := call(t, http.MethodGet, c.URL+"/v2/team/big/blobs/"+tc.blob)
				if a.Status != http.StatusOK || fmt.Sprintf("sha256:%x", sha256.Sum256(a.Body)) != tc.blob {
					code, msg := a.ociError()
					t.Fatalf("GET blob (try %d): %d %s %q; want 200 with its bytes", i+1, a.Status, code, msg)
				}
				if n := px.Count(http.MethodGet, faultproxy.KindBlob); n != 1 {
					t.Fatalf("GET blob (try %d): %d upstream GETs; want 1: a blob that is not kept is fetched every time", i+1, n)
				}
			}
			if used := sumSeries(scrape(t, c), "imagecache_store_bytes", ""); used != 0 {
				t.Errorf("imagecache_store_bytes %v after streaming through; want nothing stored", used)
			}
		})
	}
}
