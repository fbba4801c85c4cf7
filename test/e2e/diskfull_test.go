package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/test/faultproxy"
)

// diskFullMountTmpfs mounts a tmpfs of size on dir until the test ends. The cache c (whose storage dir
// it is) is stopped before the unmount, so the mount is never busy. It skips the test when the mount
// cannot be made (not root, no tmpfs in this sandbox).
func diskFullMountTmpfs(t *testing.T, dir, size string, c *cacheProc) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a small tmpfs as the storage path; run as root to cover ENOSPC")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("disk-full test: mount -t tmpfs -o size=%s tmpfs %s failed (%v: %s); skipping", size, dir, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		c.Stop(t)
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
}

// diskFullCheckBlobsOnDisk re-hashes every file under <storage>/blobs: each must hash to its name.
func diskFullCheckBlobsOnDisk(t *testing.T, storage string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(storage, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != d.Name() {
			t.Errorf("stored file %s hashes to %s", p, got)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s/blobs: %v", storage, err)
	}
	return n
}

// diskFullNextSecond waits until the wall clock is in a later second than after: access times are kept in
// whole seconds, so images pulled in distinct seconds have a well-defined least-recently-used order.
func diskFullNextSecond(after int64) {
	for time.Now().Unix() <= after {
		time.Sleep(10 * time.Millisecond)
	}
}

// diskFullImagePresent reports whether the image (manifest by digest) is served from the cache; when it is,
// every blob it names must be served complete and correct (a manifest left without its blobs fails the
// test: "cached" means pullable with the upstream down).
func diskFullImagePresent(t *testing.T, c *cacheProc, repo, digest string, blobs []string) bool {
	t.Helper()
	a := manifest(t, c, http.MethodGet, repo, digest)
	if a.Status != http.StatusOK {
		if a.Status != http.StatusBadGateway && a.Status != http.StatusGatewayTimeout && a.Status != http.StatusNotFound {
			t.Errorf("%s@%s with the upstream down: %d, want 200 (cached) or a clean 502/504/404 (evicted)", repo, digest, a.Status)
		}
		return false
	}
	if got := "sha256:" + sha256Hex(a.Body); got != digest {
		t.Errorf("%s@%s: manifest body hashes to %s", repo, digest, got)
	}
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	for _, d := range blobs {
		g := fetchBlob(client, c.URL+"/v2/"+repo+"/blobs/"+d)
		if g.err != nil || g.status != http.StatusOK || g.sum != d {
			t.Errorf("%s@%s is served but its blob %s is not: status %d, %d bytes hashing to %s, err %v %s", repo, digest, d, g.status, g.n, g.sum, g.err, g.body)
		}
	}
	return true
}

// diskFullFixture is a cache whose storage is a 48 MiB tmpfs with storage.maxSize 40Mi, behind a fault
// proxy to a registry that holds five images of one 8.5 MiB layer each (four fit under 40Mi, a fifth
// passes it), a sixth ("team/late:v1") and bare blobs of 64 MiB (more than the whole tmpfs) and 24 MiB
// (under maxSize, but more than the space left next to four images).
type diskFullFixture struct {
	px                  *faultproxy.Proxy
	c                   *cacheProc
	client              *http.Client
	imgs                []diskFullImage
	lateDigest          string
	hugeDigest          string
	fitDigest           string
	layerSize, hugeSize int64
	fitSize             int64
}

type diskFullImage struct {
	repo, digest string
	blobs        []string
}

func newDiskFullFixture(t *testing.T) diskFullFixture {
	t.Helper()
	f := diskFullFixture{layerSize: 8<<20 + 512<<10, hugeSize: 64 << 20, fitSize: 24 << 20}
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a small tmpfs as the storage path; run as root to cover ENOSPC")
	}
	reg := startRegistry(t, registryOpts{})
	f.px = startProxy(t, reg.URL)
	for i := range 5 {
		repo := fmt.Sprintf("team/app%d", i)
		d, img := pushImage(t, reg.Host, repo+":v1", "oci", 1, f.layerSize)
		f.imgs = append(f.imgs, diskFullImage{repo: repo, digest: d, blobs: blobDigests(t, img)})
	}
	f.lateDigest, _ = pushImage(t, reg.Host, "team/late:v1", "oci", 1, f.layerSize)
	f.hugeDigest = pushBlobOfSize(t, reg.Host, "team/huge", f.hugeSize)
	f.fitDigest = pushBlobOfSize(t, reg.Host, "team/fit", f.fitSize)

	f.c = startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
defaultPolicy: {upstreamTimeout: 5s}
storage:
  maxSize: 40Mi
`, f.px.URL()))
	f.c.Stop(t)
	diskFullMountTmpfs(t, f.c.StorageDir, "48m", f.c)
	f.c.Start(t)
	f.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

// pull pulls the first n images through the cache, each in its own second so that the least recently
// used one is well defined.
func (f diskFullFixture) pull(t *testing.T, n int) {
	t.Helper()
	for i, img := range f.imgs[:n] {
		if i > 0 {
			diskFullNextSecond(time.Now().Unix())
		}
		pullImage(t, f.c.Host, img.repo+":v1", img.digest, types.OCIManifestSchema1)
	}
}

func (f diskFullFixture) waitTmpEmpty(t *testing.T, what string) {
	t.Helper()
	waitFor(t, 10*time.Second, what, func() error {
		entries, err := os.ReadDir(filepath.Join(f.c.StorageDir, "tmp"))
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			return fmt.Errorf("tmp/ holds %d entries, e.g. %s", len(entries), entries[0].Name())
		}
		return nil
	})
}

// TestDiskFull runs the cache on a 48 MiB tmpfs with storage.maxSize 40Mi (issue 4 item 6): a blob larger
// than the whole filesystem must fail cleanly (an error or a broken connection, never a complete 200 with
// wrong bytes, never a hang), the log must show the storage-full handling and eviction, what is cached must
// stay intact and pullable with the upstream down, the server must keep answering, no temp file may be
// left, and a smaller pull must succeed afterwards.
func TestDiskFull(t *testing.T) {
	f := newDiskFullFixture(t)
	c := f.c
	// The fifth image takes the store past 40Mi: eviction must take it back under the limit, least
	// recently used first.
	f.pull(t, 5)
	waitFor(t, 20*time.Second, "an eviction run after the store passed 40Mi", func() error {
		if !diskFullLogHasEviction(c.Log()) {
			return fmt.Errorf("no eviction in the log")
		}
		return nil
	})

	// The huge blob: the download runs out of space part-way.
	start := time.Now()
	g := fetchBlob(f.client, c.URL+"/v2/team/huge/blobs/"+f.hugeDigest)
	took := time.Since(start)
	t.Logf("GET of the %d MiB blob on a 48 MiB disk: status %d, %d of %d bytes, err %v, took %s %s", f.hugeSize>>20, g.status, g.n, g.contentLength, g.err, took.Round(time.Millisecond), g.body)
	switch {
	case g.status == http.StatusOK && g.err == nil && (g.n != f.hugeSize || g.sum != f.hugeDigest):
		t.Errorf("a complete 200 of %d bytes hashing to %s, want %d bytes of %s (or a failure)", g.n, g.sum, f.hugeSize, f.hugeDigest)
	case g.status == http.StatusOK && g.err != nil && g.n >= g.contentLength:
		t.Errorf("a broken 200 that still delivered all %d bytes of Content-Length %d", g.n, g.contentLength)
	case g.status != http.StatusOK && g.err == nil && g.status < 500:
		t.Errorf("status %d %s, want a 5xx (507 for a full disk) or a broken connection", g.status, g.body)
	}
	if took > 30*time.Second {
		t.Errorf("the failing GET took %s", took)
	}
	waitFor(t, 10*time.Second, "the storage-full failure in the log", func() error {
		log := strings.ToLower(c.Log())
		if !strings.Contains(log, "storage is full") && !strings.Contains(log, "no space left on device") && !strings.Contains(log, "no room in the cache's storage") {
			return fmt.Errorf("the log does not mention the full storage")
		}
		return nil
	})
	f.waitTmpEmpty(t, "tmp/ emptied after the failed download")
	if found := crashFilesNamed(filepath.Join(c.StorageDir, "blobs"), f.hugeDigest); len(found) > 0 {
		t.Errorf("blobs/ holds %v for the blob that did not fit", found)
	}

	// Nothing cached was damaged: every stored file hashes to its name, and with the upstream gone the most
	// recently used images pull completely; the least recently used one went at the eviction.
	if n := diskFullCheckBlobsOnDisk(t, c.StorageDir); n == 0 {
		t.Error("no stored file under blobs/ after the disk-full failure")
	}
	f.px.Refuse()
	var kept []string
	for i, img := range f.imgs {
		present := diskFullImagePresent(t, c, img.repo, img.digest, img.blobs)
		switch {
		case present:
			kept = append(kept, img.repo)
		case i == len(f.imgs)-1:
			t.Errorf("the most recently used image %s is not served with the upstream down", img.repo)
		}
		if i == 0 && present {
			t.Errorf("the least recently used image %s is still cached: 5 images of %d bytes are over maxSize 40Mi", img.repo, f.layerSize)
		}
	}
	t.Logf("still cached after eviction and the disk-full failure: %v", kept)
	last := f.imgs[len(f.imgs)-1]
	pullImage(t, c.Host, last.repo+"@"+last.digest, last.digest, types.OCIManifestSchema1)
	expect(t, manifest(t, c, http.MethodGet, last.repo, "v1"), 200, "STALE", "most recently used image by tag, upstream down")
	for _, path := range []string{"/healthz", "/v2/"} {
		if a := call(t, http.MethodGet, c.URL+path); a.Status != http.StatusOK {
			t.Errorf("GET %s after the disk-full failure: %d", path, a.Status)
		}
	}

	// Upstream back: a smaller image pulls.
	if err := f.px.Resume(); err != nil {
		t.Fatal(err)
	}
	pullImage(t, c.Host, "team/late:v1", f.lateDigest, types.OCIManifestSchema1)
	diskFullCheckBlobsOnDisk(t, c.StorageDir)
	f.waitTmpEmpty(t, "tmp/ empty at the end")
}

// TestDiskFullRetryFindsRoom: four images (34 MiB, under maxSize 40Mi) on the 48 MiB tmpfs, then a 24 MiB
// blob, which fits maxSize but not the 14 MiB left. The answer to the first attempt says "the cache's
// storage is full; eviction has started, retry shortly": so a retry must succeed within seconds, eviction
// having made room (least recently used images first) for an object the limit allows. Until then every
// attempt must fail cleanly and leave nothing behind.
func TestDiskFullRetryFindsRoom(t *testing.T) {
	f := newDiskFullFixture(t)
	c := f.c
	f.pull(t, 4)
	fitURL := c.URL + "/v2/team/fit/blobs/" + f.fitDigest
	var outcomes []string
	served := false
	deadline := time.Now().Add(20 * time.Second)
	for !served && time.Now().Before(deadline) {
		g := fetchBlob(f.client, fitURL)
		switch {
		case g.status == http.StatusOK && g.err == nil && g.n == f.fitSize && g.sum == f.fitDigest:
			served = true
		case g.status == http.StatusOK && g.err == nil:
			t.Fatalf("GET of the %d MiB blob: a complete 200 of %d bytes hashing to %s", f.fitSize>>20, g.n, g.sum)
		default:
			outcomes = append(outcomes, fmt.Sprintf("status %d, %d of %d bytes, err %v %s", g.status, g.n, g.contentLength, g.err, strings.TrimSpace(g.body)))
			time.Sleep(200 * time.Millisecond) // pace the retries, as a client would
		}
	}
	if !served {
		b, objects := diskFullUsage(c)
		t.Errorf("a %d MiB blob (under maxSize 40Mi) was never served in 20s of retries on a full disk (%d attempts, store %s in %s objects, log evictions: %v): eviction does not make room for it; first: %s; last: %s",
			f.fitSize>>20, len(outcomes), b, objects, diskFullLogHasEviction(c.Log()), outcomes[0], outcomes[len(outcomes)-1])
	} else {
		t.Logf("the %d MiB blob was served after %d failed attempts", f.fitSize>>20, len(outcomes))
		// The most recently used image must have survived the room-making.
		last := f.imgs[3]
		f.px.Refuse()
		if !diskFullImagePresent(t, c, last.repo, last.digest, last.blobs) {
			t.Errorf("the most recently used image %s was evicted to make room", last.repo)
		}
		if err := f.px.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	f.waitTmpEmpty(t, "tmp/ empty after the retries")
	diskFullCheckBlobsOnDisk(t, c.StorageDir)
}

// diskFullLogHasEviction reports whether an eviction run that removed something was logged (JSON or text).
func diskFullLogHasEviction(log string) bool {
	return strings.Contains(log, `"msg":"evicted"`) || strings.Contains(log, "msg=evicted")
}

// diskFullUsage reads the store's figures from /metrics, for failure messages.
func diskFullUsage(c *cacheProc) (bytes, objects string) {
	resp, err := http.Get(c.URL + "/metrics")
	if err != nil {
		return "?", "?"
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	bytes, objects = "?", "?"
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "imagecache_store_bytes "); ok {
			bytes = v + " bytes"
		}
		if v, ok := strings.CutPrefix(l, "imagecache_store_objects "); ok {
			objects = v
		}
	}
	return bytes, objects
}
