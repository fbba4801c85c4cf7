package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestUpstreamFaults drives each way an upstream can fail while a tag is checked or fetched, and checks the
// answer: the last known good copy (STALE) when one exists and staleIfError allows it, otherwise a clear error
// with the right status; and that nothing wrong is ever stored.
func TestUpstreamFaults(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
policies:
  - match: {repository: "strict/**"}
    staleIfError: false
defaultPolicy: {pull: Always, upstreamTimeout: 1s}
`, px.URL()))
	cachedDigest, _ := pushImage(t, reg.Host, "team/cached:v1", "oci", 1, 512)
	expect(t, manifest(t, c, http.MethodGet, "team/cached", "v1"), 200, "MISS", "warm the cache")
	pushImage(t, reg.Host, "strict/cached:v1", "oci", 1, 512)
	expect(t, manifest(t, c, http.MethodGet, "strict/cached", "v1"), 200, "MISS", "warm the cache")
	pushImage(t, reg.Host, "team/uncached:v1", "oci", 1, 512)

	stale := func(t *testing.T) {
		t.Helper()
		a := manifest(t, c, http.MethodGet, "team/cached", "v1")
		expect(t, a, 200, "STALE", "cached tag while the upstream fails")
		if a.Header.Get("Warning") != `110 - "Response is Stale"` || a.Header.Get("Docker-Content-Digest") != cachedDigest {
			t.Fatalf("stale answer: Warning %q digest %s", a.Header.Get("Warning"), a.Header.Get("Docker-Content-Digest"))
		}
	}
	failsWith := func(t *testing.T, repo string, status int, code, mentions string) answer {
		t.Helper()
		a := manifest(t, c, http.MethodGet, repo, "v1")
		gotCode, msg := a.ociError()
		if a.Status != status || gotCode != code || !strings.Contains(msg, mentions) {
			t.Fatalf("%s: got %d %s %q, want %d %s mentioning %q", repo, a.Status, gotCode, msg, status, code, mentions)
		}
		return a
	}

	t.Run("429", func(t *testing.T) {
		defer px.Clear()
		px.Status(http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, faultproxy.KindManifest)
		stale(t)
		a := failsWith(t, "team/uncached", 429, "TOOMANYREQUESTS", "429")
		if a.Header.Get("Retry-After") != "7" {
			t.Fatalf("Retry-After %q, want the upstream's 7", a.Header.Get("Retry-After"))
		}
	})
	for _, code := range []int{500, 503} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			defer px.Clear()
			px.Status(code, nil, faultproxy.KindManifest)
			stale(t)
			failsWith(t, "team/uncached", 502, "UNAVAILABLE", fmt.Sprint(code))
			failsWith(t, "strict/cached", 502, "UNAVAILABLE", fmt.Sprint(code)) // staleIfError: false
		})
	}
	t.Run("timeout", func(t *testing.T) {
		defer px.Clear()
		px.Delay(30*time.Second, faultproxy.KindManifest)
		start := time.Now()
		stale(t)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("stale answer took %s with upstreamTimeout 1s", d)
		}
		start = time.Now()
		failsWith(t, "team/uncached", 504, "UNAVAILABLE", "no answer within 1s")
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("timeout error took %s with upstreamTimeout 1s", d)
		}
	})
	t.Run("silent upstream", func(t *testing.T) {
		// Nothing answers, /v2/ included: a blackhole. The first check waits upstreamTimeout; after that the
		// cache knows, and answers without asking until a probe of /v2/ is answered again.
		defer px.Clear()
		waitFor(t, 10*time.Second, "the upstream answers before it goes silent", func() error {
			if a := manifest(t, c, http.MethodGet, "team/cached", "v1"); a.Header.Get("X-Cache") != "REVALIDATED" {
				return fmt.Errorf("X-Cache %s", a.Header.Get("X-Cache"))
			}
			return nil
		})
		px.Delay(30 * time.Second)
		stale(t)
		px.Reset()
		start := time.Now()
		stale(t)
		failsWith(t, "team/uncached", 504, "UNAVAILABLE", "no answer within 1s")
		if n := px.Count("", faultproxy.KindManifest); n != 0 {
			t.Fatalf("%d manifest requests reached the silent upstream, want none: %+v", n, px.Requests())
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("two answers while the upstream is known silent took %s, want no wait for its 1s timeout", d)
		}
		waitFor(t, 10*time.Second, "the silent upstream is probed", func() error {
			if px.Count(http.MethodGet, faultproxy.KindPing) == 0 {
				return fmt.Errorf("no probe yet: %+v", px.Requests())
			}
			return nil
		})
		waitFor(t, 10*time.Second, "the cache logs that the upstream is not answering", func() error {
			if !strings.Contains(c.Log(), "upstream is not answering") {
				return fmt.Errorf("not logged")
			}
			return nil
		})
		assertSeries(t, scrape(t, c), "imagecache_upstream_silent", map[string]float64{`upstream="upstream.test"`: 1})
		px.Clear()
		waitFor(t, 10*time.Second, "the cache asks the upstream again once it answers", func() error {
			if a := manifest(t, c, http.MethodGet, "team/cached", "v1"); a.Header.Get("X-Cache") != "REVALIDATED" {
				return fmt.Errorf("X-Cache %s", a.Header.Get("X-Cache"))
			}
			return nil
		})
		assertSeries(t, scrape(t, c), "imagecache_upstream_silent", map[string]float64{`upstream="upstream.test"`: 0})
	})
	t.Run("refused", func(t *testing.T) {
		px.Refuse()
		defer px.Resume()
		stale(t)
		failsWith(t, "team/uncached", 502, "UNAVAILABLE", "refused")
	})
	t.Run("truncated manifest", func(t *testing.T) {
		defer px.Clear()
		px.Truncate(20, faultproxy.KindManifest)
		failsWith(t, "team/uncached", 502, "UNAVAILABLE", "team/uncached")
		assertNotCached(t, c, px, "team/uncached")
	})
	t.Run("wrong manifest bytes", func(t *testing.T) {
		defer px.Clear()
		d, _ := pushImage(t, reg.Host, "team/corrupt:v1", "oci", 1, 512)
		px.Corrupt(faultproxy.KindManifest)
		failsWith(t, "team/corrupt", 502, "UNAVAILABLE", "invalid content")
		a := manifest(t, c, http.MethodGet, "team/corrupt", d)
		if code, msg := a.ociError(); a.Status != 502 || !strings.Contains(msg, "hashes to") {
			t.Fatalf("by digest: %d %s %q, want 502 saying the bytes do not match", a.Status, code, msg)
		}
		assertNotCached(t, c, px, "team/corrupt")
	})
	t.Run("tag deleted upstream", func(t *testing.T) {
		defer px.Clear()
		pushImage(t, reg.Host, "team/deleted:v1", "oci", 1, 512)
		expect(t, manifest(t, c, http.MethodGet, "team/deleted", "v1"), 200, "MISS", "warm the cache")
		px.Status(http.StatusNotFound, nil, faultproxy.KindManifest) // as the registry answers once the tag is deleted
		if a := manifest(t, c, http.MethodGet, "team/deleted", "v1"); a.Status != http.StatusNotFound {
			t.Fatalf("tag deleted upstream: %d %s, want 404", a.Status, a.Header.Get("X-Cache"))
		}
		// With the upstream gone as well, the deleted tag must not come back as a stale answer.
		px.Clear()
		px.Refuse()
		defer px.Resume()
		if a := manifest(t, c, http.MethodGet, "team/deleted", "v1"); a.Status == http.StatusOK {
			t.Fatalf("a tag the upstream deleted was served again (%s) once the upstream was down", a.Header.Get("X-Cache"))
		}
	})
	t.Run("upstream recovers", func(t *testing.T) {
		expect(t, manifest(t, c, http.MethodGet, "team/cached", "v1"), 200, "REVALIDATED", "after the faults")
	})
}

// assertNotCached checks, with faults cleared, that the next request for repo:v1 goes to the upstream.
func assertNotCached(t *testing.T, c *cacheProc, px *faultproxy.Proxy, repo string) {
	t.Helper()
	px.Clear()
	px.Reset()
	a := manifest(t, c, http.MethodGet, repo, "v1")
	expect(t, a, 200, "MISS", "after the fault was cleared")
	if px.Count(http.MethodGet, faultproxy.KindManifest) != 1 {
		t.Fatalf("after a failed fetch the manifest was not fetched again: %+v", px.Requests())
	}
}
