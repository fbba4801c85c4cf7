package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestHeadOfUncachedBlobTransfersNothing: a HEAD for a blob the cache does not hold is answered from an
// upstream HEAD; a client probing for a large layer must not cost its whole download.
func TestHeadOfUncachedBlobTransfersNothing(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	const size = 4 << 20
	d := pushBlobOfSize(t, reg.Host, "team/big", size)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
`, px.URL()))

	px.Reset()
	a := call(t, http.MethodHead, c.URL+"/v2/team/big/blobs/"+d)
	if a.Status != http.StatusOK || a.Header.Get("Content-Length") != strconv.Itoa(size) || a.Header.Get("Docker-Content-Digest") != d {
		t.Fatalf("HEAD uncached blob: %d, Content-Length %q, digest %q; want 200, %d, %s", a.Status, a.Header.Get("Content-Length"), a.Header.Get("Docker-Content-Digest"), size, d)
	}
	if got := px.Count(http.MethodGet, faultproxy.KindBlob); got != 0 || px.Count(http.MethodHead, faultproxy.KindBlob) != 1 {
		t.Fatalf("HEAD uncached blob: %d upstream GETs and %d HEADs; want one HEAD and no download", got, px.Count(http.MethodHead, faultproxy.KindBlob))
	}
	if a := call(t, http.MethodHead, c.URL+"/v2/team/big/blobs/sha256:"+fmt.Sprintf("%064d", 0)); a.Status != http.StatusNotFound {
		t.Errorf("HEAD of a blob the upstream does not have: %d, want 404", a.Status)
	}

	// A GET stores it; the next HEAD is a hit with no upstream contact.
	expect(t, call(t, http.MethodGet, c.URL+"/v2/team/big/blobs/"+d), 200, "MISS", "GET after the HEAD")
	px.Reset()
	expect(t, call(t, http.MethodHead, c.URL+"/v2/team/big/blobs/"+d), 200, "HIT", "HEAD of the stored blob")
	if px.Total() != 0 {
		t.Errorf("HEAD of a stored blob reached the upstream: %+v", px.Requests())
	}
}
