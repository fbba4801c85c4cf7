package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"imagecache.io/imagecache/test/faultproxy"
)

// blobFetch is what one client got for a blob: the answer's head, and what reading the body gave.
type blobFetch struct {
	status        int
	contentLength int64
	xcache        string
	n             int64  // body bytes read
	sum           string // sha256:<hex> of those bytes
	err           error  // from the request or from reading the body
	body          string // the start of a non-200 body, for messages
}

// fetchBlob GETs url with its own connection, hashing the body as it streams (64 MiB never sits in memory).
func fetchBlob(client *http.Client, url string) blobFetch {
	resp, err := client.Get(url)
	if err != nil {
		return blobFetch{err: err}
	}
	defer resp.Body.Close()
	f := blobFetch{status: resp.StatusCode, contentLength: resp.ContentLength, xcache: resp.Header.Get("X-Cache")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		f.body = string(b)
		return f
	}
	h := sha256.New()
	f.n, f.err = io.Copy(h, resp.Body)
	f.sum = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return f
}

// fetchBlobsAtOnce starts n clients on url together (released by one channel close) and returns what each
// got. Each client has its own transport, so every one is a separate connection to the cache.
func fetchBlobsAtOnce(n int, url string) []blobFetch {
	out := make([]blobFetch, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range out {
		client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableCompression: true}}
		wg.Go(func() {
			defer client.CloseIdleConnections()
			<-start
			out[i] = fetchBlob(client, url)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// herdFixture is a cache with one upstream behind a fault proxy, and a blob of size bytes in it that the
// cache has never seen.
type herdFixture struct {
	px     *faultproxy.Proxy
	cache  *cacheProc
	digest string
	size   int64
	url    string // the blob on the cache
}

func newHerdFixture(t *testing.T, size int64) herdFixture {
	t.Helper()
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	dgst := pushBlobOfSize(t, reg.Host, "herd/big", size)
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    default: true
`, px.URL()))
	return herdFixture{px: px, cache: cache, digest: dgst, size: size, url: cache.URL + "/v2/herd/big/blobs/" + dgst}
}

// assertNotStored fails unless the store holds no file for the digest and no download is left in tmp/.
// The download is aborted before its readers are told it failed, so there is nothing to wait for here.
func (f herdFixture) assertNotStored(t *testing.T) {
	t.Helper()
	hexPart := strings.TrimPrefix(f.digest, "sha256:")
	var found []string
	_ = filepath.WalkDir(f.cache.StorageDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), hexPart) {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("after a failed download the store holds %v", found)
	}
	entries, err := os.ReadDir(filepath.Join(f.cache.StorageDir, "tmp"))
	if err != nil {
		t.Fatalf("storage tmp/: %v", err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Size() > 0 {
			t.Errorf("after a failed download tmp/ still holds %s (%d bytes)", e.Name(), info.Size())
		}
	}
}

// assertRefetched clears the faults and checks that the next GET goes to the upstream again (the failed
// download left nothing behind that could be served) and that its bytes verify.
func (f herdFixture) assertRefetched(t *testing.T) {
	t.Helper()
	f.px.Clear()
	before := f.px.Count(http.MethodGet, faultproxy.KindBlob)
	got := fetchBlob(&http.Client{Timeout: 2 * time.Minute}, f.url)
	if got.err != nil || got.status != http.StatusOK || got.n != f.size || got.sum != f.digest {
		t.Fatalf("GET after the fault was cleared: status %d, %d of %d bytes, %s, err %v %s", got.status, got.n, f.size, got.sum, got.err, got.body)
	}
	if got.xcache != "MISS" {
		t.Errorf("GET after the fault was cleared: X-Cache %q, want MISS", got.xcache)
	}
	if after := f.px.Count(http.MethodGet, faultproxy.KindBlob); after != before+1 {
		t.Errorf("GET after the fault was cleared: upstream blob GETs went from %d to %d, want one more", before, after)
	}
}

// TestThunderingHerd sends 32 clients at once for a 64 MiB blob the cache has never seen: one upstream GET,
// 32 complete and correct bodies.
func TestThunderingHerd(t *testing.T) {
	const clients = 32
	f := newHerdFixture(t, 64<<20)
	// Hold the one upstream request before it is answered, so that every client has arrived while the
	// download is in flight: each must then join it (X-Cache MISS) rather than find a finished file (HIT).
	// Without the hold, a fast loopback could finish the download before the last goroutine is scheduled,
	// and the test would prove less than it claims.
	f.px.Delay(time.Second, faultproxy.KindBlob)

	got := fetchBlobsAtOnce(clients, f.url)
	for i, g := range got {
		if g.err != nil || g.status != http.StatusOK {
			t.Errorf("client %d: status %d, err %v %s", i, g.status, g.err, g.body)
			continue
		}
		if g.contentLength != f.size || g.n != f.size {
			t.Errorf("client %d: Content-Length %d, read %d bytes, want %d", i, g.contentLength, g.n, f.size)
		}
		if g.sum != f.digest {
			t.Errorf("client %d: body hashes to %s, want %s", i, g.sum, f.digest)
		}
		if g.xcache != "MISS" {
			t.Errorf("client %d: X-Cache %q, want MISS (it arrived while the one download was held upstream)", i, g.xcache)
		}
	}
	if n := f.px.Count(http.MethodGet, faultproxy.KindBlob); n != 1 {
		t.Errorf("upstream blob GETs: %d, want exactly 1 for %d concurrent clients", n, clients)
	}

	// Now stored: another client is served from disk with no upstream contact.
	f.px.Reset()
	again := fetchBlob(&http.Client{Timeout: time.Minute}, f.url)
	if again.err != nil || again.sum != f.digest || again.xcache != "HIT" {
		t.Errorf("GET after the herd: %s X-Cache %q err %v, want %s HIT", again.sum, again.xcache, again.err, f.digest)
	}
	if n := f.px.Total(); n != 0 {
		t.Errorf("GET after the herd made %d upstream requests, want 0", n)
	}
}

// TestHerdUpstreamCutMidway cuts the upstream body a quarter of the way: every client's connection must
// break (never a complete-looking 200), nothing may be stored, and the next GET fetches again.
func TestHerdUpstreamCutMidway(t *testing.T) {
	const clients = 8
	f := newHerdFixture(t, 16<<20)
	f.px.Truncate(4<<20, faultproxy.KindBlob)

	got := fetchBlobsAtOnce(clients, f.url)
	logOutcomes(t, got)
	for i, g := range got {
		switch {
		case g.status == http.StatusOK && g.err == nil:
			t.Errorf("client %d: a complete 200 of %d bytes (Content-Length %d) from a cut upstream", i, g.n, g.contentLength)
		case g.status == http.StatusOK && g.n >= f.size:
			t.Errorf("client %d: got all %d bytes before the error %v", i, g.n, g.err)
		case g.status == http.StatusOK && g.contentLength != f.size:
			t.Errorf("client %d: Content-Length %d, want %d: a short body must break the promised length", i, g.contentLength, f.size)
		case g.status != http.StatusOK && g.err == nil && g.status != http.StatusBadGateway && g.status != http.StatusGatewayTimeout:
			// Asking after the failure is known may be answered with an upstream error instead.
			t.Errorf("client %d: status %d %s, want a broken 200 or a 502/504", i, g.status, g.body)
		}
	}
	f.assertNotStored(t)
	f.assertRefetched(t)
}

// TestWrongBytesNeverServed corrupts the last byte of the upstream's blob: the digest check at the end fails,
// so each client's connection must break before the last byte, nothing is stored, and a clean GET later
// fetches and serves the right bytes.
func TestWrongBytesNeverServed(t *testing.T) {
	const clients = 4
	f := newHerdFixture(t, 8<<20)
	f.px.Corrupt(faultproxy.KindBlob)

	got := fetchBlobsAtOnce(clients, f.url)
	logOutcomes(t, got)
	for i, g := range got {
		switch {
		case g.status == http.StatusOK && g.err == nil:
			t.Errorf("client %d: a complete 200 (%d bytes hashing to %s) of content that fails its digest", i, g.n, g.sum)
		case g.status == http.StatusOK && g.n >= f.size:
			t.Errorf("client %d: got all %d bytes (the corrupt last one included) before the error %v", i, g.n, g.err)
		case g.status != http.StatusOK && g.err == nil && g.status != http.StatusBadGateway:
			t.Errorf("client %d: status %d %s, want a broken 200 or a 502", i, g.status, g.body)
		}
	}
	f.assertNotStored(t)
	f.assertRefetched(t)
}

// logOutcomes shows, with -v, how each client's request ended.
func logOutcomes(t *testing.T, got []blobFetch) {
	t.Helper()
	for i, g := range got {
		t.Logf("client %d: status %d X-Cache %q, %d of %d bytes, err %v", i, g.status, g.xcache, g.n, g.contentLength, g.err)
	}
}
