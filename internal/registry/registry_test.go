package registry

import (
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// fixture is the /v2 handler in front of an in-memory upstream registry (with the OCI 1.1 referrers API,
// which the distribution registry used in the e2e tests lacks).
type fixture struct {
	upstream *httptest.Server
	cache    *httptest.Server
	upHost   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	up := httptest.NewServer(ggcrregistry.New(ggcrregistry.WithReferrersSupport(true), ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(up.Close)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client, err := upstream.New(config.Upstream{Name: "up.test", URL: up.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := policy.Rules{Default: policy.Rule{Pull: policy.Always, StaleIfError: true, UpstreamTimeout: 2 * time.Second}}
	c := cache.New(st, map[string]*upstream.Client{"up.test": client}, rules, slog.New(slog.DiscardHandler))
	router := reference.NewRouter([]reference.Upstream{{Name: "up.test"}})
	srv := httptest.NewServer(New(c, router, slog.New(slog.DiscardHandler), nil))
	t.Cleanup(srv.Close)
	return &fixture{upstream: up, cache: srv, upHost: strings.TrimPrefix(up.URL, "http://")}
}

func (f *fixture) push(t *testing.T, repoTag string, img v1.Image) v1.Hash {
	t.Helper()
	ref, err := name.ParseReference(f.upHost + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func TestReferrersCachedLikeATag(t *testing.T) {
	f := newFixture(t)
	subject, _ := random.Image(256, 1)
	subjectDigest := f.push(t, "team/app:v1", subject)
	sig := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	sig = mutate.ConfigMediaType(sig, "application/vnd.example.signature")
	sd, _ := subject.Digest()
	ssize, _ := subject.Size()
	smt, _ := subject.MediaType()
	sig = mutate.Subject(sig, v1.Descriptor{Digest: sd, Size: ssize, MediaType: smt}).(v1.Image)
	sigDigest := f.push(t, "team/app:sig", sig)

	url := f.cache.URL + "/v2/up.test/team/app/referrers/" + subjectDigest.String()
	resp, body := get(t, url)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "MISS" {
		t.Fatalf("referrers: %d %s %s", resp.StatusCode, resp.Header.Get("X-Cache"), body)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(body, &idx); err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sigDigest {
		t.Fatalf("referrers index %s: %v", body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != string(types.OCIImageIndex) {
		t.Fatalf("Content-Type %q", ct)
	}

	f.upstream.Close()
	resp, stale := get(t, url)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "STALE" || string(stale) != string(body) {
		t.Fatalf("referrers with the upstream down: %d %s %s", resp.StatusCode, resp.Header.Get("X-Cache"), stale)
	}
}

func TestTagListPaginationLinkPointsAtTheCache(t *testing.T) {
	f := newFixture(t)
	img, _ := random.Image(64, 1)
	for _, tag := range []string{"a", "b", "c"} {
		f.push(t, "team/app:"+tag, img)
	}
	resp, body := get(t, f.cache.URL+"/v2/up.test/team/app/tags/list?n=1")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var list struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	json.Unmarshal(body, &list)
	if len(list.Tags) != 1 || list.Tags[0] != "a" {
		t.Fatalf("first page %s", body)
	}
	if link := resp.Header.Get("Link"); link != "" && !strings.HasPrefix(link, "</v2/up.test/team/app/tags/list?") {
		t.Fatalf("Link %q points at the upstream's path, not the name the client used", link)
	}
}

func TestRewriteLink(t *testing.T) {
	for _, tc := range []struct{ link, name, ns, want string }{
		{`</v2/library/nginx/tags/list?last=a&n=1>; rel="next"`, "docker.io/library/nginx", "",
			`</v2/docker.io/library/nginx/tags/list?last=a&n=1>; rel="next"`},
		{`</v2/team/app/tags/list?last=a&n=1>; rel="next"`, "team/app", "reg.example:5000",
			`</v2/team/app/tags/list?last=a&n=1&ns=reg.example:5000>; rel="next"`},
		{`garbage`, "x", "", `garbage`},
	} {
		if got := rewriteLink(tc.link, tc.name, tc.ns); got != tc.want {
			t.Errorf("rewriteLink(%q) = %q, want %q", tc.link, got, tc.want)
		}
	}
}
