package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/store"
)

func TestResolveTargetPrecedence(t *testing.T) {
	const env = "http://127.0.0.1:5001"
	for _, tt := range []struct {
		name, env  string
		args       []string
		wantServer string
		usage      bool
	}{
		{name: "nothing: the default storage", args: nil},
		{name: "IMAGECACHE_SERVER alone", env: env, wantServer: env},
		{name: "--server beats IMAGECACHE_SERVER", env: env, args: []string{"--server", "http://127.0.0.1:5002"}, wantServer: "http://127.0.0.1:5002"},
		{name: "--storage beats IMAGECACHE_SERVER", env: env, args: []string{"--storage", "/var/lib/imagecache"}},
		{name: "--config beats IMAGECACHE_SERVER", env: env, args: []string{"--config", "/etc/imagecache.yaml"}},
		{name: "--server with --storage", args: []string{"--server", env, "--storage", "x"}, usage: true},
		{name: "IMAGECACHE_SERVER is not a URL", env: "127.0.0.1:5000", usage: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("IMAGECACHE_SERVER", tt.env)
			var o storageOptions
			cmd := &cobra.Command{Use: "verify"}
			o.bindMaintenanceFlags(cmd)
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			_, err := o.resolveTarget(cmd)
			if tt.usage {
				if err == nil || exitCode(err) != exitUsage {
					t.Fatalf("got %v, want a usage error", err)
				}
				return
			}
			if err != nil || o.server != tt.wantServer {
				t.Fatalf("server %q, error %v; want server %q", o.server, err, tt.wantServer)
			}
		})
	}
}

// syncBuffer is stderr shared by the announcing goroutine and the test; it signals the first write.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		close(b.written)
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestVerifyOnServerAnnouncesOnlyWork: a refusal comes with no "re-hashing" line before it; a run that takes
// a while is announced while it goes on.
func TestVerifyOnServerAnnouncesOnlyWork(t *testing.T) {
	stderr := &syncBuffer{written: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"the admin API needs the token"}`))
			return
		}
		// Answer only once the client said the server is at work: the run "takes" that long.
		select {
		case <-stderr.written:
		case <-time.After(30 * time.Second):
		}
		json.NewEncoder(w).Encode(store.VerifyReport{Checked: 3})
	}))
	defer srv.Close()

	_, err := verifyOnServer(context.Background(), srv.URL, "", stderr)
	if err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("without the token: %v, want the server's refusal", err)
	}
	if s := stderr.String(); s != "" {
		t.Fatalf("a refused verify printed %q", s)
	}

	rep, err := verifyOnServer(context.Background(), srv.URL, "s3cret", stderr)
	if err != nil || rep.Checked != 3 {
		t.Fatalf("with the token: %+v, %v", rep, err)
	}
	if s := stderr.String(); !strings.Contains(s, "is re-hashing its storage") {
		t.Fatalf("a long verify was not announced: %q", s)
	}
}
