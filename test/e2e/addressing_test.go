package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/test/faultproxy"
)

// allManifestTypes is the Accept header of a client that takes any manifest as stored, so the upstream and
// the cache are asked the same question.
var allManifestTypes = strings.Join([]string{
	string(types.OCIImageIndex), string(types.OCIManifestSchema1),
	string(types.DockerManifestList), string(types.DockerManifestSchema2),
}, ", ")

// seededManifest is one tag pushed to the upstream, with what the upstream itself answers for it.
type seededManifest struct {
	repo, tag string
	index     bool
	digest    string
}

// TestPullThroughAddressing pulls Docker and OCI images, an OCI index and a Docker manifest list through
// the cache in each of the three ways a <name> reaches an upstream (path prefix, ?ns=, default), and checks
// that what arrives is byte for byte what the upstream holds.
func TestPullThroughAddressing(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)

	var seeded []seededManifest
	d, _ := pushImage(t, reg.Host, "addr/docker:v1", "docker", 2, 4096)
	seeded = append(seeded, seededManifest{repo: "addr/docker", tag: "v1", digest: d})
	d, _ = pushImage(t, reg.Host, "addr/oci:v1", "oci", 2, 4096)
	seeded = append(seeded, seededManifest{repo: "addr/oci", tag: "v1", digest: d})
	d, _ = pushIndex(t, reg.Host, "addr/index:v1")
	seeded = append(seeded, seededManifest{repo: "addr/index", tag: "v1", index: true, digest: d})
	d = pushDockerManifestList(t, reg.Host, "addr/list:v1")
	seeded = append(seeded, seededManifest{repo: "addr/list", tag: "v1", index: true, digest: d})
	// A second tag, so that the tag list has something to get wrong.
	pushImage(t, reg.Host, "addr/oci:v2", "oci", 1, 1024)

	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    aliases: [%q]
    default: true
`, px.URL(), reg.Host))
	// The same upstream, but not the default: here ?ns= is the only way to reach it without a prefix, so a
	// pull that works proves ns routing rather than the default.
	nsOnly := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    aliases: [%q]
`, px.URL(), reg.Host))

	ways := []struct {
		name   string
		cache  *cacheProc
		prefix string // put before the repository in the reference
		ns     string // ?ns= on every request
	}{
		{"prefix", cache, "upstream.test/", ""},
		{"ns", nsOnly, "", reg.Host},
		{"ns-with-default", cache, "", reg.Host},
		{"default", cache, "", ""},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			px.Reset()
			rt := &nsTransport{ns: way.ns, base: http.DefaultTransport}
			opts := []remote.Option{remote.WithContext(t.Context()), remote.WithTransport(rt)}
			for _, s := range seeded {
				ref := parseRef(t, way.cache.Host, way.prefix+s.repo+":"+s.tag)
				if s.index {
					idx, err := remote.Index(ref, opts...)
					if err != nil {
						t.Fatalf("pull index %s: %v", ref, err)
					}
					verifyPulledIndex(t, idx, s.digest)
				} else {
					img, err := remote.Image(ref, opts...)
					if err != nil {
						t.Fatalf("pull %s: %v", ref, err)
					}
					verifyPulledImage(t, img, s.digest)
				}
				// By digest too: a client that resolved the tag elsewhere asks for the digest.
				byDigest := parseRef(t, way.cache.Host, way.prefix+s.repo+"@"+s.digest)
				desc, err := remote.Get(byDigest, opts...)
				if err != nil {
					t.Fatalf("get %s: %v", byDigest, err)
				}
				if desc.Digest.String() != s.digest {
					t.Errorf("%s: digest %s", byDigest, desc.Digest)
				}
			}
			if rt.requests() == 0 {
				t.Fatal("the client sent no request through the ns transport")
			}
			if bad := rt.mismatches(); len(bad) > 0 {
				t.Errorf("OCI-Namespace not echoed as %q on:\n  %s", way.ns, strings.Join(bad, "\n  "))
			}
			// The upstream must be asked for the repository as it names it: never with the cache's prefix.
			for _, r := range px.Requests() {
				if strings.Contains(r.Path, "upstream.test") || strings.Contains(r.Path, "ns=") {
					t.Errorf("upstream was sent %s %s: the prefix or ns leaked upstream", r.Method, r.Path)
				}
			}
			if way.cache == nsOnly && px.Count(http.MethodGet, faultproxy.KindBlob) == 0 {
				t.Error("the ns-only cache pulled no blob from the upstream: was it served at all?")
			}
		})
	}

	t.Run("headers", func(t *testing.T) {
		for _, s := range seeded {
			for _, ref := range []string{s.tag, s.digest} {
				up := call(t, http.MethodGet, reg.URL+"/v2/"+s.repo+"/manifests/"+ref, "Accept", allManifestTypes)
				if up.Status != http.StatusOK {
					t.Fatalf("upstream %s:%s: %d", s.repo, ref, up.Status)
				}
				path := cache.URL + "/v2/upstream.test/" + s.repo + "/manifests/" + ref
				get := call(t, http.MethodGet, path, "Accept", allManifestTypes)
				head := call(t, http.MethodHead, path, "Accept", allManifestTypes)
				for _, a := range []struct {
					method string
					r      answer
				}{{"GET", get}, {"HEAD", head}} {
					what := a.method + " " + path
					if a.r.Status != http.StatusOK {
						t.Errorf("%s: %d %s", what, a.r.Status, a.r.Body)
						continue
					}
					if got := a.r.Header.Get("Docker-Content-Digest"); got != s.digest {
						t.Errorf("%s: Docker-Content-Digest %q, want %s", what, got, s.digest)
					}
					if got, want := a.r.Header.Get("Content-Type"), up.Header.Get("Content-Type"); got != want {
						t.Errorf("%s: Content-Type %q, upstream sent %q", what, got, want)
					}
					if got, want := a.r.Header.Get("Content-Length"), fmt.Sprint(len(up.Body)); got != want {
						t.Errorf("%s: Content-Length %q, want %s", what, got, want)
					}
				}
				if !bytes.Equal(get.Body, up.Body) {
					t.Errorf("GET %s: body differs from the upstream's (%d vs %d bytes)", path, len(get.Body), len(up.Body))
				}
				if len(head.Body) != 0 {
					t.Errorf("HEAD %s: %d bytes of body", path, len(head.Body))
				}
			}
		}
	})

	t.Run("docker-hub", func(t *testing.T) {
		hubDigest, _ := pushImage(t, reg.Host, "library/nginx:x", "oci", 1, 1024)
		hub := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: docker.io
    url: %s
    default: true
`, px.URL()))
		for _, path := range []string{
			"/v2/nginx/manifests/x",                   // Docker's registry-mirrors form
			"/v2/docker.io/library/nginx/manifests/x", // a full reference with the prefix
			"/v2/docker.io/nginx/manifests/x",         // a short Docker Hub name after the prefix
		} {
			px.Reset()
			a := call(t, http.MethodGet, hub.URL+path, "Accept", allManifestTypes)
			if a.Status != http.StatusOK || a.Header.Get("Docker-Content-Digest") != hubDigest {
				t.Errorf("GET %s: %d digest %q, want 200 %s: %s", path, a.Status, a.Header.Get("Docker-Content-Digest"), hubDigest, a.Body)
			}
			var paths []string
			for _, r := range px.Requests() {
				if r.Kind == faultproxy.KindManifest {
					paths = append(paths, r.Method+" "+r.Path)
				}
			}
			// Always policy: a HEAD to check the tag (or the GET that first fetched it), by the library/ name.
			if len(paths) == 0 {
				t.Errorf("GET %s: no manifest request reached the upstream", path)
			}
			for _, p := range paths {
				if !strings.Contains(p, " /v2/library/nginx/manifests/") {
					t.Errorf("GET %s: upstream was asked %s, want /v2/library/nginx/manifests/...", path, p)
				}
			}
		}
		verifyPulledImage(t, pullRef(t, hub.Host+"/nginx:x"), hubDigest)
	})

	t.Run("unknown-name", func(t *testing.T) {
		for _, path := range []string{"/v2/elsewhere.test/team/app/manifests/v1", "/v2/app/manifests/v1"} {
			a := call(t, http.MethodGet, nsOnly.URL+path, "Accept", allManifestTypes)
			code, msg := a.ociError()
			if a.Status != http.StatusNotFound || code != "NAME_UNKNOWN" {
				t.Errorf("GET %s with no default upstream: %d %s, want 404 NAME_UNKNOWN", path, a.Status, a.Body)
			}
			// The message must tell the person what they can use instead.
			for _, want := range []string{"upstream.test", reg.Host} {
				if !strings.Contains(msg, want) {
					t.Errorf("GET %s: message %q does not list %s", path, msg, want)
				}
			}
		}
	})

	t.Run("tags", func(t *testing.T) {
		up := call(t, http.MethodGet, reg.URL+"/v2/addr/oci/tags/list")
		want := tagsOf(t, up)
		if !slices.Equal(want, []string{"v1", "v2"}) {
			t.Fatalf("upstream tags %v, want [v1 v2]", want)
		}
		path := cache.URL + "/v2/upstream.test/addr/oci/tags/list"
		a := call(t, http.MethodGet, path)
		if a.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, a.Status, a.Body)
		}
		if got := tagsOf(t, a); !slices.Equal(got, want) {
			t.Errorf("GET %s: tags %v, upstream has %v", path, got, want)
		}
		var list struct{ Name string }
		if err := json.Unmarshal(a.Body, &list); err != nil || list.Name != "upstream.test/addr/oci" {
			t.Errorf("GET %s: name %q, want the repository as asked for, upstream.test/addr/oci (%v)", path, list.Name, err)
		}
		// A page size the upstream refuses is the client's mistake, passed on as such, not an outage.
		if a := call(t, http.MethodGet, path+"?n=-1"); a.Status != http.StatusBadRequest {
			code, msg := a.ociError()
			t.Errorf("GET %s?n=-1: %d %s %q, want 400", path, a.Status, code, msg)
		}

		reg.Stop(t)
		a = call(t, http.MethodGet, path)
		if a.Status != http.StatusOK {
			t.Fatalf("GET %s with the upstream stopped: %d %s", path, a.Status, a.Body)
		}
		if got := tagsOf(t, a); !slices.Equal(got, want) {
			t.Errorf("GET %s with the upstream stopped: tags %v, want %v", path, got, want)
		}
		if x := a.Header.Get("X-Cache"); x != "STALE" {
			t.Errorf("GET %s with the upstream stopped: X-Cache %q, want STALE", path, x)
		}
		if w := a.Header.Get("Warning"); !strings.HasPrefix(w, "110") {
			t.Errorf("GET %s with the upstream stopped: Warning %q, want 110 ...", path, w)
		}
	})
}

// pushDockerManifestList pushes a Docker manifest list of two Docker schema 2 images (amd64, arm64).
func pushDockerManifestList(t testing.TB, registryHost, repoTag string) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.DockerManifestList)
	for _, arch := range []string{"amd64", "arm64"} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        randomImage(t, "docker", "linux", arch, 1, 1024),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	if err := remote.WriteIndex(parseRef(t, registryHost, repoTag), idx, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push manifest list %s/%s: %v", registryHost, repoTag, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || m.MediaType != types.DockerManifestList {
		t.Fatalf("seeded manifest list: %v, media type %s", err, m.MediaType)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// verifyPulledImage checks an image pulled through the cache: manifest digest, and every blob (config and
// layers) read to the end, hashed and measured against its descriptor. It does what
// pkg/v1/validate.Image would for these purposes; validate needs go-cmp, which is not in the module graph.
func verifyPulledImage(t testing.TB, img v1.Image, wantDigest string) {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d.String() != wantDigest {
		t.Fatalf("image digest %s, want %s", d, wantDigest)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Hex(raw); "sha256:"+got != wantDigest {
		t.Fatalf("manifest bytes hash to sha256:%s, want %s", got, wantDigest)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatalf("config of %s: %v", wantDigest, err)
	}
	if got := "sha256:" + sha256Hex(cfg); got != m.Config.Digest.String() || int64(len(cfg)) != m.Config.Size {
		t.Errorf("config of %s: %s (%d bytes), manifest says %s (%d bytes)", wantDigest, got, len(cfg), m.Config.Digest, m.Config.Size)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(m.Layers) || len(layers) == 0 {
		t.Fatalf("%s: %d layers, manifest lists %d", wantDigest, len(layers), len(m.Layers))
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatalf("layer %s: %v", m.Layers[i].Digest, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read layer %s: %v", m.Layers[i].Digest, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != m.Layers[i].Digest.String() || n != m.Layers[i].Size {
			t.Errorf("layer %s: got %s (%d bytes), want %d bytes", m.Layers[i].Digest, got, n, m.Layers[i].Size)
		}
	}
}

// verifyPulledIndex checks an index's digest and bytes, then every child image in full.
func verifyPulledIndex(t testing.TB, idx v1.ImageIndex, wantDigest string) {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := idx.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if d.String() != wantDigest || "sha256:"+sha256Hex(raw) != wantDigest {
		t.Fatalf("index digest %s (bytes hash to sha256:%s), want %s", d, sha256Hex(raw), wantDigest)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("index %s has %d children, want 2", wantDigest, len(m.Manifests))
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("child %s of %s: %v", desc.Digest, wantDigest, err)
		}
		verifyPulledImage(t, img, desc.Digest.String())
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != desc.Platform.Architecture {
			t.Errorf("child %s: architecture %s, index says %s", desc.Digest, cf.Architecture, desc.Platform.Architecture)
		}
	}
}

// pullRef is remote.Image for a full reference on a plain-HTTP host.
func pullRef(t testing.TB, hostRepoTag string) v1.Image {
	t.Helper()
	host, repoTag, _ := strings.Cut(hostRepoTag, "/")
	img, err := remote.Image(parseRef(t, host, repoTag), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull %s: %v", hostRepoTag, err)
	}
	return img
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// nsTransport adds ?ns= to every request, as containerd does for a hosts.toml mirror, and records the
// /v2/<name>/... answers that do not echo it in OCI-Namespace. With ns empty it only passes requests on
// (and then no answer may carry OCI-Namespace).
type nsTransport struct {
	ns   string
	base http.RoundTripper

	mu    sync.Mutex
	n     int
	wrong []string
}

func (rt *nsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.ns != "" {
		req = req.Clone(req.Context())
		q := req.URL.Query()
		q.Set("ns", rt.ns)
		req.URL.RawQuery = q.Encode()
	}
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(req.URL.Path, "/v2/") && len(req.URL.Path) > len("/v2/") {
		rt.mu.Lock()
		rt.n++
		if got := resp.Header.Get("OCI-Namespace"); got != rt.ns {
			rt.wrong = append(rt.wrong, fmt.Sprintf("%s %s: %q", req.Method, req.URL.RequestURI(), got))
		}
		rt.mu.Unlock()
	}
	return resp, nil
}

func (rt *nsTransport) requests() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.n
}

func (rt *nsTransport) mismatches() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.wrong)
}

func tagsOf(t testing.TB, a answer) []string {
	t.Helper()
	var l struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(a.Body, &l); err != nil {
		t.Fatalf("tag list %q: %v", a.Body, err)
	}
	slices.Sort(l.Tags)
	return l.Tags
}
