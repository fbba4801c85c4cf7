package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// gatedBlob is an upstream that serves one blob in two halves, the second only when the test says so, and
// counts blob GETs.
type gatedBlob struct {
	content []byte
	wrong   bool // send a different last byte
	release chan struct{}
	mu      sync.Mutex
	gets    int
}

func (g *gatedBlob) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v2/" {
		return
	}
	g.mu.Lock()
	g.gets++
	g.mu.Unlock()
	body := bytes.Clone(g.content)
	if g.wrong {
		body[len(body)-1] ^= 0xff
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	half := len(body) / 2
	w.Write(body[:half])
	w.(http.Flusher).Flush()
	<-g.release
	w.Write(body[half:])
}

func newTestCache(t testing.TB, h http.Handler) (*Cache, *store.Store) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client, err := upstream.New(config.Upstream{Name: "up", URL: srv.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := policy.Rules{Default: policy.Rule{Pull: policy.Always, StaleIfError: true, UpstreamTimeout: 5 * time.Second}}
	c := New(st, map[string]*upstream.Client{"up": client}, rules, slog.New(slog.DiscardHandler))
	// Downloads run detached from requests: let them finish before the store and its directory go.
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for c.DownloadsInFlight() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	})
	return c, st
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// readN reads exactly n bytes or fails the test after a deadline.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(r, buf); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the first %d bytes did not arrive while the download was still running", n)
	}
	return buf
}

func TestClientsReadWhileTheDownloadRuns(t *testing.T) {
	g := &gatedBlob{content: randomBytes(1 << 20), release: make(chan struct{})}
	c, st := newTestCache(t, g)
	dgst := digest.FromBytes(g.content).String()

	var blobs []*Blob
	for range 4 {
		b, err := c.Blob(context.Background(), "up", "team/app", dgst)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Size != int64(len(g.content)) || b.Result != Miss {
			t.Fatalf("size %d result %s", b.Size, b.Result)
		}
		blobs = append(blobs, b)
	}
	half := len(g.content) / 2
	for _, b := range blobs {
		if got := readN(t, b.Content, half); !bytes.Equal(got, g.content[:half]) {
			t.Fatal("first half differs")
		}
	}
	close(g.release)
	for _, b := range blobs {
		rest, err := io.ReadAll(b.Content)
		if err != nil || !bytes.Equal(rest, g.content[half:]) || b.Err() != nil {
			t.Fatalf("rest: %d bytes, %v, %v", len(rest), err, b.Err())
		}
	}
	if g.gets != 1 {
		t.Fatalf("%d upstream GETs for 4 concurrent clients, want 1", g.gets)
	}
	if _, err := st.Stat(dgst); err != nil {
		t.Fatalf("blob not stored after the download: %v", err)
	}
	hit, err := c.Blob(context.Background(), "up", "team/app", dgst)
	if err != nil || hit.Result != Hit {
		t.Fatalf("second request: %v %v", hit, err)
	}
	hit.Close()
}

func TestLastByteWaitsForVerification(t *testing.T) {
	g := &gatedBlob{content: randomBytes(64 << 10), wrong: true, release: make(chan struct{})}
	c, st := newTestCache(t, g)
	dgst := digest.FromBytes(g.content).String()

	b, err := c.Blob(context.Background(), "up", "team/app", dgst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	readN(t, b.Content, len(g.content)/2)
	close(g.release)
	rest, err := io.ReadAll(b.Content)
	if err == nil {
		t.Fatal("a body with a wrong last byte was read to the end without an error")
	}
	if len(g.content)/2+len(rest) >= len(g.content) {
		t.Fatalf("the client received all %d bytes of unverified content", len(g.content))
	}
	if b.Err() == nil {
		t.Fatal("Err() is nil after a digest mismatch: the handler would end the response normally")
	}
	var ce *Error
	if !errors.As(b.Err(), &ce) || ce.Status != http.StatusBadGateway {
		t.Fatalf("error %v, want a 502 about invalid upstream content", b.Err())
	}
	if _, err := st.Stat(dgst); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("content that failed verification was stored")
	}
}

func TestRangeOnUncachedBlob(t *testing.T) {
	g := &gatedBlob{content: randomBytes(256 << 10), release: make(chan struct{})}
	close(g.release)
	c, _ := newTestCache(t, g)
	dgst := digest.FromBytes(g.content).String()
	b, err := c.Blob(context.Background(), "up", "team/app", dgst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Range", "bytes=1000-1999")
	rec := httptest.NewRecorder()
	http.ServeContent(rec, req, "", time.Time{}, b.Content)
	if rec.Code != http.StatusPartialContent || !bytes.Equal(rec.Body.Bytes(), g.content[1000:2000]) {
		t.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
	}
}

// TestDiskFullMidWrite: a write that runs out of space fails the download (the client never gets the whole
// body), reports how much room it needed, and leaves nothing behind.
func TestDiskFullMidWrite(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	g := &gatedBlob{content: randomBytes(4 << 20), release: make(chan struct{})}
	close(g.release)
	srv := httptest.NewServer(g)
	defer srv.Close()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := upstream.New(config.Upstream{Name: "up", URL: srv.URL}, nil, nil)
	c := New(st, map[string]*upstream.Client{"up": client}, policy.Rules{Default: policy.Rule{Pull: policy.Always, UpstreamTimeout: 5 * time.Second}}, slog.New(slog.DiscardHandler))
	var asked atomic.Int64
	c.StorageFull = func(need int64) { asked.Store(need) }
	defer func() {
		for c.DownloadsInFlight() > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		st.Close()
	}()

	dgst := digest.FromBytes(g.content).String()
	b, err := c.Blob(context.Background(), "up", "team/app", dgst)
	if err == nil {
		n, _ := io.Copy(io.Discard, b.Content)
		if b.Err() == nil || n == int64(len(g.content)) {
			t.Fatalf("read %d of %d bytes with err %v: a full disk must break the response", n, len(g.content), b.Err())
		}
		var ce *Error
		if !errors.As(b.Err(), &ce) || ce.Status != http.StatusInsufficientStorage {
			t.Fatalf("error %v, want a 507 saying the storage is full", b.Err())
		}
		b.Close()
	}
	for c.DownloadsInFlight() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if asked.Load() <= 0 {
		t.Fatal("StorageFull was not told how much room the download needed")
	}
	if _, err := st.Stat(dgst); err == nil {
		t.Fatal("a blob that did not fit was indexed")
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(entries) != 0 {
		t.Fatalf("temp files left after the failed download: %v", entries)
	}
}
