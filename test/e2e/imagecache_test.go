package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string // removed by TestMain
	buildBin  string
	buildErr  error
)

// buildImagecache builds ./cmd/imagecache once per test binary: tests that never start the cache do not
// pay for (or fail on) the build.
func buildImagecache(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "imagecache-e2e-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "imagecache")
		args := []string{"build", "-o", buildBin}
		if os.Getenv("E2E_RACE") != "" {
			args = append(args, "-race") // E2E_RACE=1: find data races in the server under real traffic
		}
		cmd := exec.Command("go", append(args, "./cmd/imagecache")...)
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/imagecache: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// cacheProc is `imagecache serve` on 127.0.0.1 with its own storage directory.
type cacheProc struct {
	proc
	Host       string // 127.0.0.1:PORT
	URL        string // http://Host
	StorageDir string
	ConfigPath string
}

// startImagecache runs `imagecache serve --config FILE` and waits for /readyz. configYAML holds what the
// test is about (upstreams, policies, ...); listen and storage.path are filled in here, so a test never
// picks ports or directories. The process is stopped when the test ends, and its log tail is printed if
// the test failed.
func startImagecache(t testing.TB, configYAML string) *cacheProc {
	t.Helper()
	return startImagecacheWith(t, configYAML)
}

// startImagecacheWith is startImagecache with more flags for serve (e.g. --kubeconfig).
func startImagecacheWith(t testing.TB, configYAML string, extraArgs ...string) *cacheProc {
	t.Helper()
	bin := buildImagecache(t)
	dir := t.TempDir()
	c := &cacheProc{
		Host:       freeAddr(t),
		StorageDir: filepath.Join(dir, "storage"),
		ConfigPath: filepath.Join(dir, "imagecache.yaml"),
	}
	c.URL = "http://" + c.Host
	cfg, err := fillCacheConfig(configYAML, c.Host, c.StorageDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ConfigPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	c.proc = proc{
		name:    "imagecache",
		path:    bin,
		args:    append([]string{"serve", "--config", c.ConfigPath}, extraArgs...),
		logPath: filepath.Join(dir, "imagecache.log"),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("imagecache log tail (%s):\n%s", c.logPath, c.logTail(8192))
		}
		c.proc.stop(t, 10*time.Second)
		if log := c.Log(); strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in imagecache (E2E_RACE build):\n%s", log[strings.Index(log, "WARNING: DATA RACE"):])
		}
	})
	c.Start(t)
	return c
}

// fillCacheConfig sets listen and storage.path, keeping whatever else the test wrote (a storage.maxSize,
// say). It edits text rather than round-tripping YAML so that the test's lines keep their numbers (new keys
// go at the end) and so that it needs no YAML module. A block-style top-level "storage:" gets a "path:"
// line inserted right under it, indented like its next line.
func fillCacheConfig(configYAML, listen, storagePath string) ([]byte, error) {
	var lines []string
	if strings.TrimSpace(configYAML) != "" {
		lines = strings.Split(strings.TrimRight(configYAML, "\n"), "\n")
	}
	storageAt := -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "listen:"):
			return nil, fmt.Errorf("test config sets listen; startImagecache picks the address:\n%s", configYAML)
		case strings.HasPrefix(l, "storage:"):
			if strings.TrimSpace(strings.TrimPrefix(l, "storage:")) != "" {
				return nil, fmt.Errorf("test config: write storage as a block so path can be added:\n%s", configYAML)
			}
			storageAt = i
		}
	}
	path := fmt.Sprintf("path: %q", storagePath)
	if storageAt < 0 {
		lines = append(lines, "storage:", "  "+path)
	} else {
		indent := "  "
		if storageAt+1 < len(lines) {
			next := lines[storageAt+1]
			if trimmed := strings.TrimLeft(next, " "); len(trimmed) < len(next) {
				indent = next[:len(next)-len(trimmed)]
			}
		}
		lines = slices.Insert(lines, storageAt+1, indent+path)
	}
	lines = append(lines, fmt.Sprintf("listen: %q", listen))
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// Start starts the cache (again) on the same port, config and storage, waiting until /readyz is 200.
func (c *cacheProc) Start(t testing.TB) {
	t.Helper()
	c.proc.start(t)
	c.waitHTTP200(t, &http.Client{Timeout: 2 * time.Second}, c.URL+"/readyz", 20*time.Second)
}

// Stop sends SIGTERM and waits, then SIGKILL after 10s.
func (c *cacheProc) Stop(t testing.TB) {
	t.Helper()
	c.proc.stop(t, 10*time.Second)
}

// Kill sends SIGKILL, e.g. in the middle of a download.
func (c *cacheProc) Kill(t testing.TB) {
	t.Helper()
	c.proc.kill(t)
}

// Restart stops the cache if it is running and starts it on the same storage and port.
func (c *cacheProc) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// Log returns everything the cache printed so far, over all its starts.
func (c *cacheProc) Log() string { return c.logTail(1 << 30) }
