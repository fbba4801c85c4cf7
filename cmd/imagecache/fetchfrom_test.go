package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"imagecache.io/imagecache/internal/files"
)

// fakeSet serves /files/ipa/<file> as an imagecache would, with the set version that version picks for the
// n-th request (from 1) for that file; version 0 sends no X-Set-Version. A file's body names its version.
type fakeSet struct {
	version func(file string, n int) int

	mu       sync.Mutex
	requests map[string]int
}

func (f *fakeSet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	file := path.Base(r.URL.Path)
	f.mu.Lock()
	f.requests[file]++
	n := f.requests[file]
	f.mu.Unlock()
	v := f.version(file, n)
	if v != 0 {
		w.Header().Set(setVersionHeader, strconv.Itoa(v))
	}
	fmt.Fprintf(w, "%s of version %d", file, v)
}

func (f *fakeSet) count(file string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[file]
}

// runFromFake runs fetch --from against a fakeSet and returns the plan, the log and the run's error.
func runFromFake(t *testing.T, version func(file string, n int) int) (*fetchPlan, *fakeSet, string, error) {
	t.Helper()
	set := &fakeSet{version: version, requests: map[string]int{}}
	srv := httptest.NewServer(set)
	t.Cleanup(srv.Close)
	p, err := fetchOptions{from: srv.URL + "/files/ipa", sharedDir: t.TempDir()}.plan()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	next, _, err := p.run(context.Background(), log, &files.Fetcher{Timeout: 10 * time.Second}, nil)
	if err == nil && next == nil {
		t.Fatal("no state and no error")
	}
	if next != nil {
		t.Logf("set version %q", next.SetVersion)
	}
	return p, set, logBuf.String(), err
}

// published reads what the run left under the outputs' names; "" for a missing file.
func published(t *testing.T, p *fetchPlan) (kernel, initramfs string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(p.dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return read(p.outputs[0]), read(p.outputs[1])
}

func TestFetchFromRefetchesTheOlderFile(t *testing.T) {
	// The cache publishes version 2 after it served the first kernel.
	p, set, log, err := runFromFake(t, func(file string, n int) int {
		if strings.HasSuffix(file, ".kernel") && n == 1 {
			return 1
		}
		return 2
	})
	if err != nil {
		t.Fatal(err)
	}
	kernel, initramfs := published(t, p)
	if kernel != "ironic-python-agent.kernel of version 2" || initramfs != "ironic-python-agent.initramfs of version 2" {
		t.Errorf("published %q and %q, want both of version 2", kernel, initramfs)
	}
	if k, i := set.count(p.outputs[0]), set.count(p.outputs[1]); k != 2 || i != 1 {
		t.Errorf("%d kernel and %d initramfs requests, want the kernel again and the initramfs once", k, i)
	}
	if !strings.Contains(log, "published a new version of its file set") || !strings.Contains(log, "again=ironic-python-agent.kernel") {
		t.Errorf("the log does not say what was fetched again:\n%s", log)
	}
}

func TestFetchFromGivesUpWhenEveryRoundMixes(t *testing.T) {
	var mu sync.Mutex
	next := 0
	p, _, _, err := runFromFake(t, func(string, int) int { // a new version for every request
		mu.Lock()
		defer mu.Unlock()
		next++
		return next
	})
	var mixed *mixedVersionsError
	if !errors.As(err, &mixed) || mixed.rounds != fromRounds {
		t.Fatalf("got %v, want a mixedVersionsError after %d rounds", err, fromRounds)
	}
	if kernel, initramfs := published(t, p); kernel != "" || initramfs != "" {
		t.Errorf("published %q and %q of different versions", kernel, initramfs)
	}
	if ents, _ := os.ReadDir(p.dir); len(ents) != 0 {
		t.Errorf("left %v behind", ents)
	}
	if line := p.failed(slog.New(slog.DiscardHandler), err, false, time.Time{}).Error(); !strings.Contains(line, "run again") {
		t.Errorf("the error does not say what to do: %s", line)
	}
}

func TestFetchFromWithoutSetVersionWarns(t *testing.T) {
	p, _, log, err := runFromFake(t, func(string, int) int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	if kernel, _ := published(t, p); kernel == "" {
		t.Error("nothing published")
	}
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "is --from an imagecache?") {
		t.Errorf("no warning that the versions could not be compared:\n%s", log)
	}
}
