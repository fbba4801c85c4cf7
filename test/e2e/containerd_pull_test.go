package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestContainerdPullsThroughMirror pulls with containerd's own resolver through the cache configured as a
// hosts.toml mirror (the registry's server entry is unreachable): a multi-arch index by tag, named by the
// registry's host:port (matched by the cache through ?ns= and an alias), and an image by digest, named by
// the upstream's name. Every blob crosses the upstream once; a second containerd with an empty content
// store is served from the cache alone, and so is a third with the upstream refusing connections.
func TestContainerdPullsThroughMirror(t *testing.T) {
	first := startContainerd(t) // skips without root or containerd, before anything else is started
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)

	idxDigest, idx := pushIndex(t, reg.Host, "ctd/multi:v1")
	imgDigest, img := pushImage(t, reg.Host, "ctd/app:v1", "oci", 2, 64<<10)

	// No default upstream: only ?ns= (which containerd sends for a mirror) can route these unprefixed names.
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    aliases: [%q]
`, px.URL(), reg.Host))
	hosts := writeHostsTOML(t, "", reg.Host, cache.Host)
	writeHostsTOML(t, hosts, "upstream.test", cache.Host)
	refs := []string{reg.Host + "/ctd/multi:v1", "upstream.test/ctd/app@" + imgDigest}

	// What containerd needs: the child for this machine's platform (ctr pulls one platform), and the image.
	want := map[string]bool{}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, desc := range m.Manifests {
		if desc.Platform.OS == "linux" && desc.Platform.Architecture == runtime.GOARCH {
			child, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range blobDigests(t, child) {
				want[d] = true
			}
			found = true
		}
	}
	if !found {
		t.Skipf("the seeded index has no linux/%s child for containerd to pull", runtime.GOARCH)
	}
	for _, d := range blobDigests(t, img) {
		want[d] = true
	}

	pullAll := func(ctd *containerdProc, when string) {
		t.Helper()
		for _, ref := range refs {
			out, err := ctrPull(t, ctd.Socket, hosts, ref)
			if err != nil {
				t.Fatalf("%s: ctr pull %s: %v\n%s", when, ref, err, out)
			}
			if !strings.Contains(out, "unpacking linux/"+runtime.GOARCH) {
				t.Errorf("%s: ctr pull %s did not unpack:\n%s", when, ref, out)
			}
		}
	}

	pullAll(first, "first pull")
	got := map[string]int{}
	for _, r := range px.Requests() {
		if r.Kind == faultproxy.KindBlob && r.Method == http.MethodGet {
			got[path.Base(strings.SplitN(r.Path, "?", 2)[0])]++
		}
	}
	for d := range want {
		if got[d] != 1 {
			t.Errorf("first pull: upstream saw %d GETs of blob %s, want exactly 1", got[d], d)
		}
	}
	for d, n := range got {
		if !want[d] {
			t.Errorf("first pull: upstream saw %d GETs of blob %s, which containerd does not need", n, d)
		}
	}
	if t.Failed() {
		t.Fatalf("blobs wanted %v, upstream GETs %v", slices.Sorted(maps.Keys(want)), got)
	}
	// The cache saw containerd's namespace: the index came in by ?ns=<registry host:port> (the access log
	// keeps the raw, escaped query).
	if log := cache.Log(); !strings.Contains(log, "ns="+reg.Host) && !strings.Contains(log, "ns="+url.QueryEscape(reg.Host)) {
		t.Errorf("cache log shows no request with ns=%s", reg.Host)
	}

	// A fresh content store: everything must come from the cache. Under the default Always policy the tag
	// costs one HEAD; nothing is GET from the upstream.
	px.Reset()
	pullAll(startContainerd(t), "second containerd")
	if n := px.Count(http.MethodGet, faultproxy.KindBlob); n != 0 {
		t.Errorf("second containerd: %d upstream blob GETs, want 0", n)
	}
	if n := px.Count(http.MethodGet, faultproxy.KindManifest); n != 0 {
		t.Errorf("second containerd: %d upstream manifest GETs, want 0 (only HEADs of the tag)", n)
	}

	// Upstream gone: the tag is served stale, the rest by digest from the cache.
	px.Refuse()
	offline := startContainerd(t)
	pullAll(offline, "upstream refused")
	// containerd recorded the digests it resolved: the upstream's, not something else the cache made up.
	out, err := exec.Command("ctr", "--address", offline.Socket, "--namespace", "test", "images", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	for _, d := range []string{idxDigest, imgDigest} {
		if !strings.Contains(string(out), d) {
			t.Errorf("ctr images ls does not list %s:\n%s", d, out)
		}
	}
}
