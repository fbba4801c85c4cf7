package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestPolicyMatrix counts, with a proxy in front of the real upstream, the manifest requests that each pull
// policy costs, and checks them against DESIGN.md §3 "Semantics".
func TestPolicyMatrix(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
policies:
  - match: {repository: "always/**"}
    pull: Always
  - match: {repository: "recent/**"}
    pull: Always
    revalidateAfter: 1s
  - match: {repository: "ifnotpresent/**"}
    pull: IfNotPresent
  - match: {repository: "never/**"}
    pull: Never
`, px.URL()))

	// counts returns the manifest HEADs and GETs the upstream saw since the last call.
	counts := func() (heads, gets int) {
		heads, gets = px.Count(http.MethodHead, faultproxy.KindManifest), px.Count(http.MethodGet, faultproxy.KindManifest)
		px.Reset()
		return
	}
	want := func(step string, wantHeads, wantGets int) {
		t.Helper()
		if h, g := counts(); h != wantHeads || g != wantGets {
			t.Fatalf("%s: upstream saw %d HEAD and %d GET manifest requests, want %d and %d", step, h, g, wantHeads, wantGets)
		}
	}

	t.Run("digest", func(t *testing.T) {
		d, _ := pushImage(t, reg.Host, "always/bydigest:v1", "oci", 1, 512)
		counts()
		expect(t, manifest(t, c, http.MethodGet, "always/bydigest", d), 200, "MISS", "first GET by digest")
		want("first GET by digest", 0, 1)
		for i := range 3 {
			expect(t, manifest(t, c, http.MethodGet, "always/bydigest", d), 200, "HIT", "GET by digest again")
			expect(t, manifest(t, c, http.MethodHead, "always/bydigest", d), 200, "HIT", "HEAD by digest again")
			want(fmt.Sprintf("repeat %d by digest", i), 0, 0)
		}
	})

	t.Run("Always", func(t *testing.T) {
		d1, _ := pushImage(t, reg.Host, "always/app:v1", "oci", 1, 512)
		counts()
		a := manifest(t, c, http.MethodGet, "always/app", "v1")
		expect(t, a, 200, "MISS", "first GET")
		want("first GET", 0, 1)
		for i := range 3 {
			expect(t, manifest(t, c, http.MethodGet, "always/app", "v1"), 200, "REVALIDATED", "GET again")
			want(fmt.Sprintf("GET %d", i), 1, 0)
			expect(t, manifest(t, c, http.MethodHead, "always/app", "v1"), 200, "REVALIDATED", "HEAD again")
			want(fmt.Sprintf("HEAD %d", i), 1, 0)
		}
		if a.Header.Get("Docker-Content-Digest") != d1 {
			t.Fatalf("digest %s, want %s", a.Header.Get("Docker-Content-Digest"), d1)
		}
		// The tag moves upstream: one HEAD finds out, one GET by digest fetches the new manifest.
		d2, _ := pushImage(t, reg.Host, "always/app:v1", "oci", 1, 512)
		counts()
		a = manifest(t, c, http.MethodGet, "always/app", "v1")
		expect(t, a, 200, "MISS", "GET after the tag moved")
		if got := a.Header.Get("Docker-Content-Digest"); got != d2 {
			t.Fatalf("after the tag moved: digest %s, want the new %s", got, d2)
		}
		if !strings.Contains(lastManifestGET(px), d2) {
			t.Fatalf("the changed manifest was not fetched by digest: %+v", px.Requests())
		}
		want("GET after the tag moved", 1, 1)
	})

	t.Run("Always+revalidateAfter", func(t *testing.T) {
		pushImage(t, reg.Host, "recent/app:v1", "oci", 1, 512)
		counts()
		expect(t, manifest(t, c, http.MethodGet, "recent/app", "v1"), 200, "MISS", "first GET")
		start := time.Now()
		want("first GET", 0, 1)
		for range 5 {
			expect(t, manifest(t, c, http.MethodGet, "recent/app", "v1"), 200, "HIT", "GET within revalidateAfter")
		}
		if time.Since(start) >= time.Second {
			t.Skip("the machine is too slow to finish 5 requests within revalidateAfter (1s)")
		}
		want("GETs within revalidateAfter", 0, 0)
		time.Sleep(time.Until(start.Add(1100 * time.Millisecond))) // revalidateAfter is a duration: wait it out
		expect(t, manifest(t, c, http.MethodGet, "recent/app", "v1"), 200, "REVALIDATED", "GET after revalidateAfter")
		want("GET after revalidateAfter", 1, 0)
	})

	t.Run("IfNotPresent", func(t *testing.T) {
		d1, _ := pushImage(t, reg.Host, "ifnotpresent/app:v1", "docker", 1, 512)
		counts()
		expect(t, manifest(t, c, http.MethodGet, "ifnotpresent/app", "v1"), 200, "MISS", "first GET")
		want("first GET", 0, 1)
		pushImage(t, reg.Host, "ifnotpresent/app:v1", "docker", 1, 512) // moves upstream; the cache must not care
		counts()
		for range 3 {
			a := manifest(t, c, http.MethodGet, "ifnotpresent/app", "v1")
			expect(t, a, 200, "HIT", "GET again")
			if a.Header.Get("Docker-Content-Digest") != d1 {
				t.Fatal("IfNotPresent served a different digest than the one cached")
			}
			expect(t, manifest(t, c, http.MethodHead, "ifnotpresent/app", "v1"), 200, "HIT", "HEAD again")
		}
		want("repeats", 0, 0)
		if n := px.Total(); n != 0 {
			t.Fatalf("IfNotPresent made %d upstream requests for cached content, want 0", n)
		}
	})

	t.Run("Never", func(t *testing.T) {
		d, _ := pushImage(t, reg.Host, "never/app:v1", "oci", 1, 512)
		px.Reset()
		for _, ref := range []string{"v1", d} {
			a := manifest(t, c, http.MethodGet, "never/app", ref)
			code, msg := a.ociError()
			if a.Status != 404 || code != "MANIFEST_UNKNOWN" || !strings.Contains(msg, "Never") {
				t.Fatalf("Never, %s: %d %s %q; want 404 MANIFEST_UNKNOWN saying the policy forbids fetching", ref, a.Status, code, msg)
			}
		}
		if n := px.Total(); n != 0 {
			t.Fatalf("Never made %d upstream requests, want 0", n)
		}
	})

	t.Run("blobs", func(t *testing.T) {
		_, img := pushImage(t, reg.Host, "always/blobs:v1", "oci", 2, 2048)
		px.Reset()
		for _, d := range blobDigests(t, img) {
			for i, want := range []string{"MISS", "HIT", "HIT"} {
				a := call(t, http.MethodGet, c.URL+"/v2/always/blobs/blobs/"+d)
				expect(t, a, 200, want, fmt.Sprintf("blob %s GET %d", d, i))
			}
		}
		if got, want := px.Count(http.MethodGet, faultproxy.KindBlob), len(blobDigests(t, img)); got != want {
			t.Fatalf("%d upstream blob GETs for %d blobs fetched 3 times each, want %d", got, want, want)
		}
	})
}

func lastManifestGET(px *faultproxy.Proxy) string {
	last := ""
	for _, r := range px.Requests() {
		if r.Method == http.MethodGet && r.Kind == faultproxy.KindManifest {
			last = r.Path
		}
	}
	return last
}
