package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

var body = bytes.Repeat([]byte("0123456789"), 1000)

func newProxy(t *testing.T) (*Proxy, *httptest.Server) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Docker-Content-Digest", "sha256:abc")
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(up.Close)
	p, err := New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, up
}

// client has no keep-alive so that Refuse/Resume are seen by the next request at once.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, []byte, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func TestKindOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v2/":                                 KindPing,
		"/v2":                                  KindPing,
		"/v2/library/nginx/manifests/1.27":     KindManifest,
		"/v2/a/blobs/b/manifests/sha256:1":     KindManifest,
		"/v2/a/manifests/blobs/sha256:1":       KindBlob,
		"/v2/a/b/tags/list":                    KindTags,
		"/v2/a/referrers/sha256:1":             KindReferrers,
		"/v2/a/blobs/uploads/":                 KindBlob,
		"/v2/a/blobs/uploads/1234-5678":        KindBlob,
		"/token":                               KindToken,
		"/auth/token":                          KindToken,
		"/v2/_catalog":                         KindOther,
		"/files/ipa/ipa.tar.gz":                KindOther,
		"/v2/docker.io/library/x/manifests/v1": KindManifest,
	} {
		if got := KindOf(path); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestForwardAndCount(t *testing.T) {
	p, _ := newProxy(t)
	c := client()
	resp, b, err := get(t, c, p.URL()+"/v2/a/blobs/sha256:1")
	if err != nil || !bytes.Equal(b, body) || resp.Header.Get("Docker-Content-Digest") != "sha256:abc" {
		t.Fatalf("forward: err=%v len=%d headers=%v", err, len(b), resp.Header)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length %d, want %d", resp.ContentLength, len(body))
	}
	req, _ := http.NewRequest(http.MethodHead, p.URL()+"/v2/a/manifests/v1", nil)
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	if got := p.Count("GET", KindBlob); got != 1 {
		t.Errorf("GET blob count %d", got)
	}
	if got := p.Count("HEAD", KindManifest); got != 1 {
		t.Errorf("HEAD manifest count %d", got)
	}
	if got := p.Count("", ""); got != 2 || p.Total() != 2 {
		t.Errorf("any count %d total %d", got, p.Total())
	}
	log := p.Requests()
	if len(log) != 2 || log[0].Status != 200 || log[1].Method != "HEAD" || log[0].Path != "/v2/a/blobs/sha256:1" {
		t.Errorf("log %+v", log)
	}
	p.Reset()
	if p.Total() != 0 || len(p.Requests()) != 0 {
		t.Errorf("after Reset: total %d log %v", p.Total(), p.Requests())
	}
}

func TestRefuseResume(t *testing.T) {
	p, _ := newProxy(t)
	c := client()
	addr := p.Addr()
	p.Refuse()
	if _, _, err := get(t, c, p.URL()+"/v2/"); err == nil {
		t.Fatal("request succeeded while refused")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, p.Addr())
	}
	if _, _, err := get(t, c, p.URL()+"/v2/"); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

func TestRefuseCutsOpenConnections(t *testing.T) {
	p, _ := newProxy(t)
	p.Stall(10)
	c := client()
	errc := make(chan error, 1)
	go func() {
		_, _, err := get(t, c, p.URL()+"/v2/a/blobs/sha256:1")
		errc <- err
	}()
	waitFor(t, func() bool { return p.Total() == 1 })
	p.Refuse()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("stalled request completed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Refuse did not cut the stalled request")
	}
}

func TestDelay(t *testing.T) {
	p, _ := newProxy(t)
	p.Delay(300*time.Millisecond, KindManifest)
	c := client()
	start := time.Now()
	if _, _, err := get(t, c, p.URL()+"/v2/a/blobs/sha256:1"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("blob delayed %v by a manifest-only fault", d)
	}
	start = time.Now()
	if _, _, err := get(t, c, p.URL()+"/v2/a/manifests/v1"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("manifest answered after %v, want >= 300ms", d)
	}
}

func TestStatus(t *testing.T) {
	p, _ := newProxy(t)
	p.Status(http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}})
	resp, b, err := get(t, client(), p.URL()+"/v2/a/manifests/v1")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || !bytes.Contains(b, []byte("TOOMANYREQUESTS")) {
		t.Errorf("got %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if r := p.Requests()[0]; r.Status != 429 || r.Fault != "status" {
		t.Errorf("log %+v", r)
	}
	p.Clear()
	if resp, _, err := get(t, client(), p.URL()+"/v2/a/manifests/v1"); err != nil || resp.StatusCode != 200 {
		t.Errorf("after Clear: %v %v", resp, err)
	}
}

func TestTruncate(t *testing.T) {
	p, _ := newProxy(t)
	p.Truncate(100, KindBlob)
	resp, b, err := get(t, client(), p.URL()+"/v2/a/blobs/sha256:1")
	if err == nil {
		t.Fatal("truncated body read without error")
	}
	if resp.ContentLength != int64(len(body)) || len(b) != 100 || !bytes.Equal(b, body[:100]) {
		t.Errorf("Content-Length %d, got %d bytes", resp.ContentLength, len(b))
	}
	// A body no longer than the cut arrives whole.
	p.Truncate(int64(len(body)), KindBlob)
	if _, b, err := get(t, client(), p.URL()+"/v2/a/blobs/sha256:1"); err != nil || len(b) != len(body) {
		t.Errorf("cut at the length: %d bytes, %v", len(b), err)
	}
}

func TestCorrupt(t *testing.T) {
	p, _ := newProxy(t)
	p.Corrupt()
	_, b, err := get(t, client(), p.URL()+"/v2/a/blobs/sha256:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != len(body) || bytes.Equal(b, body) || !bytes.Equal(b[:len(b)-1], body[:len(body)-1]) {
		t.Errorf("want same length and only the last byte changed")
	}
}

func TestStall(t *testing.T) {
	p, _ := newProxy(t)
	p.Stall(50)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/v2/a/blobs/sha256:1", nil)
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if !errors.Is(err, context.DeadlineExceeded) || len(b) != 50 {
		t.Errorf("got %d bytes, err %v; want 50 bytes then the client's deadline", len(b), err)
	}
}

// waitFor polls cond: requests reach the proxy on other goroutines.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
