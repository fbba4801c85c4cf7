package upstream

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"imagecache.io/imagecache/internal/config"
)

// seededRegistry is an in-memory registry holding one random image at team/app:v1.
func seededRegistry(t *testing.T) (http.Handler, string, string) {
	t.Helper()
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(reg)
	defer srv.Close()
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/team/app:v1")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	return reg, d.String(), ld.String()
}

func newClient(t *testing.T, u config.Upstream) *Client {
	t.Helper()
	if u.Name == "" {
		u.Name = "upstream.test"
	}
	c, err := New(u, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBearerTokenFlow(t *testing.T) {
	reg, digest, _ := seededRegistry(t)
	var tokens atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if !strings.Contains(r.URL.Query().Get("scope"), "repository:team/app:pull") {
				t.Errorf("token request without the repository pull scope: %s", r.URL.RawQuery)
			}
			tokens.Add(1)
			io.WriteString(w, `{"token":"secret-token"}`)
			return
		}
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := newClient(t, config.Upstream{URL: srv.URL})
	for range 3 {
		m, err := c.GetManifest(context.Background(), "team/app", "v1", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != digest {
			t.Fatalf("digest %s, want %s", m.Digest, digest)
		}
	}
	if n := tokens.Load(); n != 1 {
		t.Fatalf("token endpoint asked %d times for 3 requests, want 1 (the token is reused)", n)
	}
}

func TestBasicCredentials(t *testing.T) {
	reg, _, _ := seededRegistry(t)
	srv := httptest.NewServer(basicAuth(reg, "alice", "s3cret"))
	defer srv.Close()

	c := newClient(t, config.Upstream{URL: srv.URL, Credentials: config.Credentials{Username: "alice", Password: "s3cret"}})
	if _, err := c.HeadManifest(context.Background(), "team/app", "v1", 5*time.Second); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	anon := newClient(t, config.Upstream{URL: srv.URL})
	_, err := anon.HeadManifest(context.Background(), "team/app", "v1", 5*time.Second)
	if StatusOf(err) != http.StatusUnauthorized || IsUnavailable(err) {
		t.Fatalf("anonymous: got %v, want a 401 that does not count as unavailable", err)
	}
}

func TestDockerConfigCredentials(t *testing.T) {
	reg, _, _ := seededRegistry(t)
	srv := httptest.NewServer(basicAuth(reg, "bob", "hunter2"))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	path := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("bob:hunter2"))
	os.WriteFile(path, []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600)

	c := newClient(t, config.Upstream{URL: srv.URL, Credentials: config.Credentials{DockerConfig: path}})
	if _, err := c.GetManifest(context.Background(), "team/app", "v1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A registry that redirects blob downloads to storage on another host must not receive our credentials
// there: the storage host would learn them.
func TestRedirectDoesNotLeakCredentials(t *testing.T) {
	reg, _, layer := seededRegistry(t)
	var storageAuth []string
	var mu sync.Mutex
	var regURL string
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		storageAuth = append(storageAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		// Serve the blob by asking the registry directly, as object storage would hold it.
		req, _ := http.NewRequest(http.MethodGet, regURL+"/v2/team/app/blobs/"+r.URL.Query().Get("d")+"?direct=1", nil)
		req.SetBasicAuth("alice", "s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}))
	defer storage.Close()
	front := httptest.NewServer(basicAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") && r.URL.Query().Get("direct") == "" {
			d := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
			http.Redirect(w, r, storage.URL+"/bucket?d="+d, http.StatusTemporaryRedirect)
			return
		}
		reg.ServeHTTP(w, r)
	}), "alice", "s3cret"))
	defer front.Close()
	regURL = front.URL

	c := newClient(t, config.Upstream{URL: front.URL, Credentials: config.Credentials{Username: "alice", Password: "s3cret"}})
	resp, err := c.GetBlob(context.Background(), "team/app", layer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(body) == 0 {
		t.Fatalf("blob through redirect: %d bytes, %v", len(body), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(storageAuth) != 1 || storageAuth[0] != "" {
		t.Fatalf("storage host saw Authorization %q, want one request without credentials", storageAuth)
	}
}

func TestTimeoutBoundsTheFirstAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, config.Upstream{URL: srv.URL})
	start := time.Now()
	_, err := c.HeadManifest(context.Background(), "team/app", "v1", 300*time.Millisecond)
	var ue *Error
	if !errors.As(err, &ue) || ue.Timeout != 300*time.Millisecond || !ue.Unavailable() {
		t.Fatalf("got %v, want a timeout error that counts as unavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s to give up, want about 300ms", d)
	}
	if !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("message %q does not say what timed out", err)
	}
}

func TestStalledBodyIsCut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Length", "1000")
		w.Write(make([]byte, 10))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, config.Upstream{URL: srv.URL})
	resp, err := c.GetBlob(context.Background(), "team/app", "sha256:"+strings.Repeat("a", 64), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n != 10 {
		t.Fatalf("read %d bytes, err %v; want 10 bytes then an error", n, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("stall cut after %s, want about 300ms", d)
	}
}

func TestTooManyRequestsKeepsRetryAfter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"errors":[{"code":"TOOMANYREQUESTS","message":"pull rate limit"}]}`)
	}))
	defer srv.Close()
	c := newClient(t, config.Upstream{URL: srv.URL})
	_, err := c.GetManifest(context.Background(), "team/app", "v1", time.Second)
	var ue *Error
	if !errors.As(err, &ue) || ue.RetryAfter != "7" || ue.Code != "TOOMANYREQUESTS" || !ue.Unavailable() {
		t.Fatalf("got %#v", err)
	}
}

func TestOversizedManifestRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Write(make([]byte, MaxManifestSize+1))
	}))
	defer srv.Close()
	c := newClient(t, config.Upstream{URL: srv.URL})
	_, err := c.GetManifest(context.Background(), "team/app", "v1", 5*time.Second)
	if !errors.Is(err, ErrManifestTooLarge) || IsUnavailable(err) {
		t.Fatalf("got %v, want ErrManifestTooLarge (not an availability problem)", err)
	}
}

func basicAuth(next http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestSilentUpstreamFailsFastUntilItAnswers: once an upstream leaves a request unanswered, the next ones
// fail at once without being sent (so a stale copy needs no wait), a probe of /v2/ watches it, and requests
// go through again as soon as it answers.
func TestSilentUpstreamFailsFastUntilItAnswers(t *testing.T) {
	reg, digest, _ := seededRegistry(t)
	var hang atomic.Bool
	var manifests, probes atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" && hang.Load() {
			probes.Add(1)
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		if hang.Load() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, config.Upstream{URL: srv.URL})
	c.silence.probeEvery = 10 * time.Millisecond
	ctx := context.Background()
	if _, err := c.HeadManifest(ctx, "team/app", "v1", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	hang.Store(true)
	_, err := c.HeadManifest(ctx, "team/app", "v1", 100*time.Millisecond)
	var ue *Error
	if !errors.As(err, &ue) || ue.Timeout == 0 || errors.Is(err, ErrSilent) {
		t.Fatalf("unanswered HEAD: %v, want a timeout", err)
	}
	sent := manifests.Load()
	_, err = c.HeadManifest(ctx, "team/app", "v1", 5*time.Second)
	if !errors.Is(err, ErrSilent) || !IsUnavailable(err) || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("HEAD while silent: %v, want an unavailable error saying the upstream is silent", err)
	}
	if manifests.Load() != sent {
		t.Fatal("a request was sent to the silent upstream")
	}
	deadline := time.Now().Add(5 * time.Second)
	for probes.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes of the silent upstream, want them repeated", probes.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}

	hang.Store(false)
	for {
		desc, err := c.HeadManifest(ctx, "team/app", "v1", 5*time.Second)
		if err == nil {
			if desc.Digest != digest {
				t.Fatalf("digest %s, want %s", desc.Digest, digest)
			}
			break
		}
		if !errors.Is(err, ErrSilent) || time.Now().After(deadline) {
			t.Fatalf("after the upstream answers again: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSilenceIsForgottenWhenNobodyAsks: probing stops when no request wanted the upstream for a while, and
// the next request is sent again (and may find the upstream back).
func TestSilenceIsForgottenWhenNobodyAsks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	c := newClient(t, config.Upstream{URL: srv.URL})
	c.silence.probeEvery, c.silence.forgetAfter = 10*time.Millisecond, 50*time.Millisecond
	if _, err := c.HeadManifest(context.Background(), "team/app", "v1", 50*time.Millisecond); errors.Is(err, ErrSilent) || err == nil {
		t.Fatalf("first request: %v, want a timeout", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.silence.mu.Lock()
		probing := c.silence.probing
		c.silence.mu.Unlock()
		if !probing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still probing an upstream nobody asked for")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.HeadManifest(context.Background(), "team/app", "v1", 50*time.Millisecond); errors.Is(err, ErrSilent) {
		t.Fatalf("after silence was forgotten: %v, want the request sent", err)
	}
}
