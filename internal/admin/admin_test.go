package admin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/stats"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// counting counts the upstream's requests by method and kind (manifests or blobs).
type counting struct {
	next http.Handler
	mu   sync.Mutex
	n    map[string]int
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := "other"
	switch {
	case strings.Contains(r.URL.Path, "/manifests/"):
		kind = "manifest"
	case strings.Contains(r.URL.Path, "/blobs/"):
		kind = "blob"
	}
	c.mu.Lock()
	c.n[r.Method+" "+kind]++
	c.mu.Unlock()
	c.next.ServeHTTP(w, r)
}

func (c *counting) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

type env struct {
	t        *testing.T
	api      http.Handler
	st       *store.Store
	upstream *counting
	host     string // the upstream registry's host:port
}

// newEnv runs the admin API over a real store and cache, with an in-process registry as upstream "up".
func newEnv(t *testing.T, edit func(*config.Config)) *env {
	t.Helper()
	up := &counting{next: registry.New(registry.Logger(log.New(io.Discard, "", 0))), n: map[string]int{}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	cfg := config.Default()
	cfg.Storage.Path = t.TempDir()
	cfg.Upstreams = []config.Upstream{{Name: "up", URL: srv.URL, Default: true}}
	cfg.Policies = []policy.Rule{{Upstream: "*", Repository: "**", Tag: "*", Pull: policy.Always, RevalidateAfter: time.Hour, StaleIfError: true, UpstreamTimeout: 5 * time.Second}}
	if edit != nil {
		edit(cfg)
	}
	st, err := store.Open(cfg.Storage.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.SetPins("config", cfg.Pins); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	client, err := upstream.New(cfg.Upstreams[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(st, map[string]*upstream.Client{"up": client}, cfg.Rules(), log)
	router := reference.NewRouter([]reference.Upstream{{Name: "up", Default: true}})
	sets, err := files.NewManager(st, nil, c, router, log)
	if err != nil {
		t.Fatal(err)
	}
	api := New(Deps{Config: cfg, Store: st, Cache: c, Files: sets, Evictor: eviction.New(st, 0, 0.9, log),
		Stats: stats.New(), Router: router, Log: log})
	return &env{t: t, api: api, st: st, upstream: up, host: strings.TrimPrefix(srv.URL, "http://")}
}

// push puts a random image with layers of 4 KiB into the upstream as repo:tag.
func (e *env) push(repoTag string, layers int) v1.Image {
	e.t.Helper()
	img, err := random.Image(4096, int64(layers))
	if err != nil {
		e.t.Fatal(err)
	}
	ref, err := name.ParseReference(e.host+"/"+repoTag, name.Insecure)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		e.t.Fatal(err)
	}
	return img
}

func (e *env) do(method, target, body string, header ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("answer %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return v
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int, words ...string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body.String())
	}
	for _, w := range words {
		if !strings.Contains(rec.Body.String(), w) {
			t.Errorf("answer does not mention %q: %s", w, rec.Body.String())
		}
	}
}

func digestOf(t *testing.T, img v1.Image) string {
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestAdminToken(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Admin.Token = "s3cret"; c.Listen = "0.0.0.0:5000" })
	rec := e.do("GET", "/api/v1/stats", "")
	wantStatus(t, rec, http.StatusUnauthorized, "Authorization: Bearer")
	if rec.Header().Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	wantStatus(t, e.do("GET", "/api/v1/images", "", "Authorization", "Bearer wrong"), http.StatusUnauthorized, "wrong")
	wantStatus(t, e.do("POST", "/api/v1/gc", "", "Authorization", "Bearer s3cretX"), http.StatusUnauthorized)
	wantStatus(t, e.do("GET", "/api/v1/stats", "", "Authorization", "Bearer s3cret"), http.StatusOK)
	wantStatus(t, e.do("GET", "/api/v1/pins", "", "Authorization", "bearer s3cret"), http.StatusOK)
}

func TestAdminWithoutTokenOnlyOnLoopback(t *testing.T) {
	for listen, open := range map[string]bool{
		"127.0.0.1:5000": true, "localhost:5000": true, "[::1]:5000": true, "127.0.0.2:80": true,
		"0.0.0.0:5000": false, ":5000": false, "10.0.0.5:5000": false, "imagecache.example:5000": false, "[::]:5000": false,
	} {
		e := newEnv(t, func(c *config.Config) { c.Listen = listen })
		rec := e.do("GET", "/api/v1/stats", "")
		if open {
			wantStatus(t, rec, http.StatusOK)
		} else {
			wantStatus(t, rec, http.StatusForbidden, "admin.token", listen)
		}
	}
}

func TestAdminPullListPurge(t *testing.T) {
	e := newEnv(t, nil)
	img := e.push("team/app:v1", 2)
	want := digestOf(t, img)

	rec := e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`)
	wantStatus(t, rec, http.StatusOK)
	res := decode[PullResult](t, rec)
	if res.Digest != want || res.Upstream != "up" || res.Repository != "team/app" || res.Reference != "v1" {
		t.Errorf("pull: %+v, want digest %s", res, want)
	}
	used, objects := e.st.Usage()
	if res.Size != used || objects != 4 {
		t.Errorf("pull says %d bytes; the store holds %d bytes in %d objects (want 4: manifest, config, 2 layers)", res.Size, used, objects)
	}

	images := decode[map[string][]Image](t, e.do("GET", "/api/v1/images", ""))["images"]
	if len(images) != 1 {
		t.Fatalf("images: %+v", images)
	}
	got := images[0]
	if got.Name != "up/team/app" || got.Digest != want || strings.Join(got.Tags, ",") != "v1" || got.Size != used ||
		got.UniqueSize != used || got.Objects != 4 || got.State != "cached" || got.Pinned || got.LastUse.IsZero() {
		t.Errorf("image: %+v", got)
	}
	if n := len(decode[map[string][]Image](t, e.do("GET", "/api/v1/images?name=up/team/other", ""))["images"]); n != 0 {
		t.Errorf("?name=up/team/other lists %d images", n)
	}
	if n := len(decode[map[string][]Image](t, e.do("GET", "/api/v1/images?name=team/app", ""))["images"]); n != 1 {
		t.Errorf("?name=team/app (default upstream) lists %d images", n)
	}
	wantStatus(t, e.do("GET", "/api/v1/images?name=Bad//Name", ""), http.StatusBadRequest)

	wantStatus(t, e.do("DELETE", "/api/v1/images?ref=up/team/app:v2", ""), http.StatusNotFound, "not cached")
	rec = e.do("DELETE", "/api/v1/images?ref=up/team/app:v1", "")
	wantStatus(t, rec, http.StatusOK)
	purged := decode[eviction.Purged](t, rec)
	if len(purged.Objects) != 4 || purged.Bytes != used || purged.Digest != want || purged.Objects[0] != want {
		t.Errorf("purged %+v, want the 4 objects (manifest first), %d bytes", purged, used)
	}
	if used, objects := e.st.Usage(); used != 0 || objects != 0 {
		t.Errorf("after purge the store holds %d bytes in %d objects", used, objects)
	}
	if _, err := e.st.Tag("up", "team/app", "v1"); err == nil {
		t.Error("the tag record survived the purge")
	}
	if n := len(decode[map[string][]Image](t, e.do("GET", "/api/v1/images", ""))["images"]); n != 0 {
		t.Errorf("after purge: %d images listed", n)
	}
}

func TestAdminPullStreamsProgress(t *testing.T) {
	e := newEnv(t, nil)
	img := e.push("team/app:v1", 3)
	rec := e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`, "Accept", "application/x-ndjson")
	wantStatus(t, rec, http.StatusOK)
	if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	done, total := map[string]int64{}, map[string]int64{}
	var result *PullResult
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		var ev PullEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if ev.Layer != "" {
			done[ev.Layer], total[ev.Layer] = ev.Done, ev.Total
			if ev.Total <= 0 || ev.Done > ev.Total {
				t.Errorf("event %+v", ev)
			}
		}
		if ev.Result != nil {
			result = ev.Result
		}
	}
	if result == nil || result.Digest != digestOf(t, img) {
		t.Fatalf("no result, or the wrong one: %+v", result)
	}
	if len(done) != 4 { // config and three layers
		t.Errorf("progress for %d blobs, want 4: %v", len(done), done)
	}
	for d, n := range done {
		if n != total[d] {
			t.Errorf("blob %s: the last progress says %d of %d bytes", d, n, total[d])
		}
	}
	// Pulled again, every blob is cached.
	rec = e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`, "Accept", "application/x-ndjson")
	if !strings.Contains(rec.Body.String(), `"cached":true`) || !strings.Contains(rec.Body.String(), `"result"`) {
		t.Errorf("second pull: %s", rec.Body.String())
	}
}

func TestAdminPullBadInput(t *testing.T) {
	e := newEnv(t, nil)
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/Team/App:v1"}`), http.StatusBadRequest)
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "other.example/team/app:v1"}`), http.StatusNotFound, "not one of imagecache's upstreams")
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"reff": "up/team/app:v1"}`), http.StatusBadRequest, "unknown field")
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1", "platforms": ["linux"]}`), http.StatusBadRequest, "os/arch")
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/team/missing:v1"}`), http.StatusNotFound)
	wantStatus(t, e.do("GET", "/api/v1/pull", ""), http.StatusMethodNotAllowed)
	if used, _ := e.st.Usage(); used != 0 {
		t.Errorf("failed pulls stored %d bytes", used)
	}
}

func TestAdminPurgePinned(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Pins = []string{"up/team/app:v1"} })
	e.push("team/app:v1", 1)
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`), http.StatusOK)
	before, objects := e.st.Usage()
	wantStatus(t, e.do("DELETE", "/api/v1/images?ref=up/team/app:v1", ""), http.StatusConflict, "pinned by config", "remove it from pins")
	if used, n := e.st.Usage(); used != before || n != objects {
		t.Errorf("a refused purge changed the store: %d bytes in %d objects, was %d in %d", used, n, before, objects)
	}
	if _, err := e.st.Tag("up", "team/app", "v1"); err != nil {
		t.Errorf("a refused purge dropped the tag: %v", err)
	}
	images := decode[map[string][]Image](t, e.do("GET", "/api/v1/images", ""))["images"]
	if len(images) != 1 || !images[0].Pinned || len(images[0].PinnedBy) != 1 || images[0].PinnedBy[0].Owner != "config" {
		t.Errorf("images: %+v", images)
	}
	st := decode[StatsReport](t, e.do("GET", "/api/v1/stats", ""))
	if st.Storage.PinnedBytes != before || st.Storage.UsedBytes != before || st.Storage.Objects != objects {
		t.Errorf("stats storage %+v, want %d bytes used and pinned", st.Storage, before)
	}
}

func TestAdminPurgeKeepsSharedAndOtherTags(t *testing.T) {
	e := newEnv(t, nil)
	img := e.push("team/app:v1", 1)
	ref, _ := name.ParseReference(e.host+"/team/app:latest", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v1", "latest"} {
		wantStatus(t, e.do("POST", "/api/v1/pull", fmt.Sprintf(`{"ref": "up/team/app:%s"}`, tag)), http.StatusOK)
	}
	before, _ := e.st.Usage()
	rec := e.do("DELETE", "/api/v1/images?ref=up/team/app:v1", "")
	wantStatus(t, rec, http.StatusOK, "up/team/app:latest")
	if p := decode[eviction.Purged](t, rec); len(p.Objects) != 0 || len(p.StillTagged) != 1 {
		t.Errorf("purge of one of two tags: %+v", p)
	}
	if used, _ := e.st.Usage(); used != before {
		t.Errorf("content went although another tag uses it: %d bytes, was %d", used, before)
	}
	// By digest: the image and every tag of it.
	rec = e.do("DELETE", "/api/v1/images?ref=up/team/app@"+digestOf(t, img), "")
	wantStatus(t, rec, http.StatusOK)
	if used, _ := e.st.Usage(); used != 0 {
		t.Errorf("after purge by digest %d bytes are left", used)
	}
}

func TestAdminRefreshForcesOneCheck(t *testing.T) {
	e := newEnv(t, nil) // revalidateAfter: 1h, so a client request would not check
	old := e.push("team/app:v1", 1)
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`), http.StatusOK)
	heads, gets := e.upstream.count("HEAD manifest"), e.upstream.count("GET manifest")

	rec := e.do("POST", "/api/v1/refresh", `{"ref": "up/team/app:v1"}`)
	wantStatus(t, rec, http.StatusOK)
	res := decode[RefreshResult](t, rec)
	if res.Changed || res.Digest != digestOf(t, old) || res.Result != "REVALIDATED" {
		t.Errorf("refresh of an unchanged tag: %+v", res)
	}
	if h, g := e.upstream.count("HEAD manifest")-heads, e.upstream.count("GET manifest")-gets; h != 1 || g != 0 {
		t.Errorf("refresh sent %d HEAD and %d GET for the manifest, want 1 and 0", h, g)
	}
	moved := e.push("team/app:v1", 1)
	res = decode[RefreshResult](t, e.do("POST", "/api/v1/refresh", `{"ref": "up/team/app:v1"}`))
	if !res.Changed || res.Digest != digestOf(t, moved) || res.Previous != digestOf(t, old) {
		t.Errorf("refresh of a moved tag: %+v", res)
	}

	wantStatus(t, e.do("POST", "/api/v1/refresh", `{"ref": "up/team/app@`+digestOf(t, old)+`"}`), http.StatusBadRequest, "never changes")
	wantStatus(t, e.do("POST", "/api/v1/refresh", `{"ref": "x", "set": "y"}`), http.StatusBadRequest, "one of them")
	wantStatus(t, e.do("POST", "/api/v1/refresh", `{"set": "nope"}`), http.StatusNotFound, "no file set")
	wantStatus(t, e.do("POST", "/api/v1/refresh", `{"ref": "up/team/gone:v1"}`), http.StatusNotFound)
}

func TestAdminPartialImage(t *testing.T) {
	e := newEnv(t, nil)
	img := e.push("team/app:v1", 2)
	wantStatus(t, e.do("POST", "/api/v1/pull", `{"ref": "up/team/app:v1"}`), http.StatusOK)
	layers, _ := img.Layers()
	d, _ := layers[0].Digest()
	if err := e.st.Remove(d.String()); err != nil {
		t.Fatal(err)
	}
	images := decode[map[string][]Image](t, e.do("GET", "/api/v1/images", ""))["images"]
	if len(images) != 1 || images[0].State != "partial" || images[0].Missing != 1 {
		t.Errorf("images: %+v", images)
	}
}
