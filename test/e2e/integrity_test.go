package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/test/faultproxy"
)

// verifyRun is one `imagecache verify` process.
type verifyRun struct{ cliRun }

// runVerify runs `imagecache verify args...`; the developer's own IMAGECACHE_SERVER would send it elsewhere.
func runVerify(t *testing.T, args ...string) verifyRun {
	t.Helper()
	start := time.Now()
	r := runImagecache(t, "", cleanEnvWithout("IMAGECACHE_"), append([]string{"verify"}, args...)...)
	t.Logf("imagecache verify %s: exit %d in %v\n%s", strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond), r.stdout)
	return verifyRun{r}
}

// storedPath is where the cache keeps the content of dgst.
func storedPath(c *cacheProc, dgst string) string {
	hex := strings.TrimPrefix(dgst, "sha256:")
	return filepath.Join(c.StorageDir, "blobs", "sha256", hex[:2], hex)
}

// damage flips bytes in the middle of path, keeping its size; with keepTime it puts the modification time
// back, as silent bit rot would leave it.
func damage(t *testing.T, path string, keepTime bool) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+8 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	// The kernel stamps files from a coarse clock: wait a tick so that an ordinary write is seen to move
	// the modification time.
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if keepTime {
		if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
}

// layerOf returns the digest and bytes of the first layer of img.
func layerOf(t *testing.T, img v1.Image) (string, []byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return d.String(), body
}

// expectBlobFromUpstream GETs the blob through the cache and checks it is byte-exact and was fetched again
// from the upstream (one upstream blob GET, X-Cache MISS).
func expectBlobFromUpstream(t *testing.T, c *cacheProc, px *faultproxy.Proxy, repo, dgst string, want []byte) {
	t.Helper()
	px.Reset()
	a := call(t, http.MethodGet, c.URL+"/v2/"+repo+"/blobs/"+dgst)
	if a.Status != http.StatusOK || !bytes.Equal(a.Body, want) {
		t.Fatalf("GET blob %s: %d with %d bytes (equal: %v), want 200 with the %d original bytes", dgst, a.Status, len(a.Body), bytes.Equal(a.Body, want), len(want))
	}
	if x := a.Header.Get("X-Cache"); x != "MISS" {
		t.Errorf("GET blob %s: X-Cache %q, want MISS (fetched again)", dgst, x)
	}
	if n := px.Count(http.MethodGet, faultproxy.KindBlob); n != 1 {
		t.Errorf("upstream blob GETs: %d, want 1", n)
	}
}

func quarantinedFiles(t *testing.T, c *cacheProc, dgst string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(c.StorageDir, "corrupt", "sha256-"+strings.TrimPrefix(dgst, "sha256:")+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestIntegrityCorruptBlob damages a stored layer on disk and checks that no client is ever served the
// damaged bytes: a write that moves the file's time is caught when the blob is read, silent damage is caught
// by `imagecache verify`, and either way the next request fetches the blob again from the upstream.
func TestIntegrityCorruptBlob(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
`, px.URL()))
	imgDigest, img := pushImage(t, reg.Host, "team/app:v1", "oci", 2, 64<<10)
	pullImage(t, c.Host, "team/app:v1", imgDigest, types.OCIManifestSchema1)
	layer, want := layerOf(t, img)
	path := storedPath(c, layer)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("stored layer %s: %v (equal %v)", path, err, bytes.Equal(got, want))
	}

	t.Run("rewritten file is re-hashed on read", func(t *testing.T) {
		damage(t, path, false)
		expectBlobFromUpstream(t, c, px, "team/app", layer, want)
		if q := quarantinedFiles(t, c, layer); len(q) != 1 {
			t.Errorf("quarantine: %v, want the damaged file", q)
		}
	})

	t.Run("silent damage is found by verify on a stopped server", func(t *testing.T) {
		damage(t, path, true)
		c.Stop(t)
		r := runVerify(t, "--storage", c.StorageDir)
		if r.code != 2 || !strings.Contains(r.stdout, "corrupt: 1,") || !strings.Contains(r.stdout, layer) {
			t.Fatalf("verify: exit %d, want 2 and 1 corrupt (%s); stdout:\n%s\nstderr:\n%s", r.code, layer, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "verify") {
			t.Errorf("no progress on stderr:\n%s", r.stderr)
		}
		if q := quarantinedFiles(t, c, layer); len(q) != 2 {
			t.Errorf("quarantine: %v, want both damaged copies", q)
		}
		c.Start(t)
		expectBlobFromUpstream(t, c, px, "team/app", layer, want)
		pullImage(t, c.Host, "team/app:v1", imgDigest, types.OCIManifestSchema1)
	})

	t.Run("verify refuses a running server's storage", func(t *testing.T) {
		r := runVerify(t, "--storage", c.StorageDir)
		if r.code != 1 || !strings.Contains(r.stderr, "--server") {
			t.Fatalf("verify on a locked store: exit %d, want 1 with advice to use --server; stderr:\n%s", r.code, r.stderr)
		}
	})

	t.Run("verify through the server", func(t *testing.T) {
		if a := call(t, http.MethodGet, c.URL+"/api/v1/verify"); a.Status == http.StatusNotFound {
			t.Skip("POST /api/v1/verify is not mounted by serve yet (admin.Verify)")
		}
		r := runVerify(t, "--server", c.URL, "-o", "json")
		if r.code != 0 {
			t.Fatalf("verify --server on a clean store: exit %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		var rep struct{ Checked, Corrupt, Missing int }
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("-o json: %v\n%s", err, r.stdout)
		}
		if rep.Checked < 4 || rep.Corrupt != 0 || rep.Missing != 0 {
			t.Errorf("report %+v, want the manifest, config and layers checked and nothing wrong", rep)
		}
	})
}
