package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/internal/ui"
)

// TestUIInChromium loads /ui in a real headless Chromium after two images were pulled through the cache, a
// file set was published and the upstream went away (one stale answer), and checks that the page shows the
// cached images and the storage figures the admin API reports. The screenshot is kept in test-artifacts/.
func TestUIInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed: hack/test-tools.sh installs the Debian package chromium")
	}
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	site := startFileServer(t)
	site.Set("/tools/kubectl", []byte("#!/bin/sh\necho kubectl\n"), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
storage:
  maxSize: 10Mi
pins: [upstream.test/team/alpha:v1]
files:
  - set: tools
    url: %q
defaultPolicy: {upstreamTimeout: 2s}
`, px.URL(), site.URL+"/tools/kubectl"))
	alpha, _ := pushImage(t, reg.Host, "team/alpha:v1", "oci", 2, 64<<10)
	beta, _ := pushImage(t, reg.Host, "team/beta:v2", "docker", 1, 16<<10)
	pullImage(t, c.Host, "team/alpha:v1", alpha, types.OCIManifestSchema1)
	pullImage(t, c.Host, "team/beta:v2", beta, types.DockerManifestSchema2)
	waitSetState(t, c, "tools", "Ready", nil)
	px.Refuse()
	expect(t, manifest(t, c, http.MethodGet, "team/beta", "v2"), 200, "STALE", "tag with the upstream refusing connections")

	artifacts := filepath.Join(repoRoot(), "test-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "ui.png")
	os.Remove(shot)
	dom := runChromium(t, chromium, "--dump-dom", c.URL+"/ui")
	runChromium(t, chromium, "--screenshot="+shot, c.URL+"/ui")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (%d bytes); want a rendered page", shot, err, sizeOf(fi))
	}
	t.Logf("screenshot: %s", shot)

	// The same figures through the admin API, read after the page: nothing is pulled in between.
	a := call(t, http.MethodGet, c.URL+"/api/v1/stats")
	if a.Status != http.StatusOK {
		t.Fatalf("GET /api/v1/stats: %d %s", a.Status, a.Body)
	}
	var st struct {
		Storage struct {
			UsedBytes, Objects, LimitBytes, PinnedBytes int64
		} `json:"storage"`
		LastHour struct{ Hits, Misses, Stale int64 } `json:"lastHour"`
	}
	if err := json.Unmarshal(a.Body, &st); err != nil {
		t.Fatalf("GET /api/v1/stats: %v", err)
	}
	s := st.Storage
	if s.UsedBytes == 0 || s.PinnedBytes == 0 || s.PinnedBytes >= s.UsedBytes || s.LimitBytes != 10<<20 {
		t.Fatalf("admin API storage %+v: want some bytes used, the pinned image part of them, a 10Mi limit", s)
	}
	// And through /metrics, which must agree with the API.
	if got := sumSeries(scrape(t, c), "imagecache_store_bytes", ""); int64(got) != s.UsedBytes {
		t.Errorf("imagecache_store_bytes %v, admin API usedBytes %d", got, s.UsedBytes)
	}

	text := func(id string) string {
		m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Errorf("the page has no element %q", id)
			return ""
		}
		return m[1]
	}
	for id, want := range map[string]string{
		"storage-bytes":       ui.Num(s.UsedBytes),
		"storage-objects":     ui.Num(s.Objects),
		"storage-used":        ui.Bytes(s.UsedBytes),
		"storage-limit":       ui.Bytes(s.LimitBytes),
		"storage-limit-bytes": ui.Num(s.LimitBytes),
		"storage-pinned":      ui.Bytes(s.PinnedBytes),
	} {
		if got := text(id); got != want {
			t.Errorf("page shows %s %q; the admin API says %q", id, got, want)
		}
	}
	section := func(id string) string {
		i := strings.Index(dom, `id="`+id+`"`)
		if i < 0 {
			t.Fatalf("the page has no section %q", id)
		}
		return dom[i : i+strings.Index(dom[i:], "</section>")]
	}
	for _, id := range []string{"largest", "most-used"} {
		images := section(id)
		for _, ref := range []string{"upstream.test/team/alpha:v1", "upstream.test/team/beta:v2"} {
			if !strings.Contains(images, ref) {
				t.Errorf("section %s does not show %s", id, ref)
			}
		}
	}
	// beta was asked for once more (the stale answer), so it is the more used.
	if used := section("most-used"); strings.Index(used, "team/beta") > strings.Index(used, "team/alpha") {
		t.Errorf("most used images: want beta (pulled, then served stale) before alpha (pulled once)")
	}
	if largest := section("largest"); strings.Index(largest, "team/alpha") > strings.Index(largest, "team/beta") ||
		!strings.Contains(largest, `class="badge pinned"`) {
		t.Errorf("largest images: want alpha (pinned, 2 layers of 64 KiB) before beta")
	}
	mustShow := map[string][]string{
		"summary":   {"upstream upstream.test is failing", "connection refused", "1 stale answer in the last hour"},
		"traffic":   {"<svg", "stale <strong>1</strong>"},
		"upstreams": {"upstream.test", "failing"},
		"sets":      {"tools", "Ready", "kubectl"},
		"problems":  {"stale", "upstream.test/team/beta:v2"},
	}
	for id, wants := range mustShow {
		got := section(id)
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("section %s does not show %q", id, w)
			}
		}
	}
	if st.LastHour.Stale != 1 || text("hit-ratio") == "–" {
		t.Errorf("last hour: API %+v, page hit ratio %q", st.LastHour, text("hit-ratio"))
	}
}

// runChromium runs headless Chromium once, isolated from any profile and from the network beyond the page.
func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1600"}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}
