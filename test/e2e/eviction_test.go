package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const evictLimit = 64 << 20

// sharedBaseImages pushes images that all start with one base layer, each with a layer of its own.
func sharedBaseImages(t *testing.T, host string, base v1.Layer, names []string, ownSize int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		own, err := random.Layer(ownSize, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		img, err = mutate.AppendLayers(img, base, own)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(parseRef(t, host, n), img, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		out[n] = digestOf(t, img)
	}
	return out
}

// blobBytes is what the store holds on disk, counted file by file.
func blobBytes(t *testing.T, storage string) int64 {
	var total int64
	filepath.WalkDir(filepath.Join(storage, "blobs"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// TestEvictionKeepsTheLimit fills a 64 MiB cache past its limit with images that share a base layer and
// checks what DESIGN.md promises: the disk ends under the limit, the most recently used images and the
// pinned one still pull completely with the upstream gone, and the shared base layer is intact.
func TestEvictionKeepsTheLimit(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	base, err := random.Layer(8<<20, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("team/app%02d:v1", i))
	}
	digests := sharedBaseImages(t, reg.Host, base, append([]string{"team/pinned:v1"}, names...), 6<<20)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
storage:
  maxSize: 64Mi
pins: [upstream.test/team/pinned:v1]
`, reg.URL))

	pull := func(name string) { pullImage(t, c.Host, name, digests[name], types.OCIManifestSchema1) }
	pull("team/pinned:v1") // the least recently used of all: only its pin keeps it
	for _, n := range names {
		pull(n)
	}
	waitFor(t, 30*time.Second, "eviction brings the disk under the limit", func() error {
		if got := blobBytes(t, c.StorageDir); got > evictLimit {
			return fmt.Errorf("%d bytes on disk, limit %d", got, evictLimit)
		}
		return nil
	})
	if !strings.Contains(c.Log(), `"msg":"evicted"`) {
		t.Fatal("the log does not report an eviction")
	}

	reg.Stop(t)
	for _, n := range append([]string{"team/pinned:v1"}, names[len(names)-3:]...) {
		pull(n) // every layer, including the shared base, read and verified
	}
	gone := 0
	for _, n := range names[:3] {
		repo, _, _ := strings.Cut(n, ":")
		if a := manifest(t, c, http.MethodGet, repo, digests[n]); a.Status != 200 {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("none of the three least recently used images was evicted")
	}
	if got := blobBytes(t, c.StorageDir); got > evictLimit {
		t.Fatalf("%d bytes on disk after the pulls, limit %d", got, evictLimit)
	}
	metrics := call(t, http.MethodGet, c.URL+"/metrics")
	for _, m := range []string{`imagecache_evictions_total{kind="image"}`, "imagecache_pinned_bytes", "imagecache_store_bytes", "imagecache_store_limit_bytes 6.7108864e+07"} {
		if !strings.Contains(string(metrics.Body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestGCCommand runs `imagecache gc` through a running server and on a stopped server's storage.
func TestGCCommand(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	base, _ := random.Layer(2<<20, types.OCILayer)
	names := []string{"team/a:v1", "team/b:v1", "team/c:v1"}
	digests := sharedBaseImages(t, reg.Host, base, append(names, "team/pinned:v1"), 2<<20)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
pins: [upstream.test/team/pinned:v1]
`, reg.URL))
	for _, n := range append([]string{"team/pinned:v1"}, names...) {
		pullImage(t, c.Host, n, digests[n], types.OCIManifestSchema1)
	}
	bin := buildImagecache(t)

	// No limit configured: the server has nothing to evict, and says so.
	out, err := exec.Command(bin, "gc", "--server", c.URL, "--dry-run", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("gc --server: %v\n%s", err, out)
	}
	var plan struct {
		Evicted []struct{ Name string }
		DryRun  bool
	}
	if err := json.Unmarshal(out, &plan); err != nil || !plan.DryRun || len(plan.Evicted) != 0 {
		t.Fatalf("gc --server --dry-run: %s (%v)", out, err)
	}

	// A running server holds the storage: opening it directly is refused with advice.
	out, err = exec.Command(bin, "gc", "--storage", c.StorageDir, "--max-size", "1Mi").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--server") {
		t.Fatalf("gc on a locked storage: %v\n%s", err, out)
	}

	c.Stop(t)
	before := blobBytes(t, c.StorageDir)
	out, err = exec.Command(bin, "gc", "--storage", c.StorageDir, "--max-size", "7Mi", "--dry-run").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "would evict") || !strings.Contains(string(out), "upstream.test/team/a:v1") {
		t.Fatalf("gc --dry-run on the stopped storage: %v\n%s", err, out)
	}
	if blobBytes(t, c.StorageDir) != before {
		t.Fatal("a dry run changed the storage")
	}
	out, err = exec.Command(bin, "gc", "--storage", c.StorageDir, "--max-size", "7Mi", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if got := blobBytes(t, c.StorageDir); got > 7<<20*9/10 {
		t.Fatalf("after gc: %d bytes on disk, want at most the low watermark of 7 MiB", got)
	}
	if strings.Contains(string(out), "team/pinned") {
		t.Fatalf("gc evicted the pinned image:\n%s", out)
	}
	c.Start(t)
	reg.Stop(t)
	pullImage(t, c.Host, "team/pinned:v1", digests["team/pinned:v1"], types.OCIManifestSchema1)
}
