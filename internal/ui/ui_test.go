package ui

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/stats"
	"imagecache.io/imagecache/internal/store"
)

var now = time.Date(2026, 11, 29, 3, 12, 0, 0, time.UTC)

// fakeDeps is a cache that has served for an hour: two upstreams (one failing), three images, two file
// sets (one stale) and a few problems. Anything a test changes, it changes on its own copy.
func fakeDeps() Deps {
	minutes := make([]stats.Minute, 60)
	var hour stats.Counts
	for i := range minutes {
		m := stats.Minute{Start: now.Truncate(time.Minute).Add(time.Duration(i-59) * time.Minute)}
		m.Hits, m.Misses, m.BytesFromCache, m.BytesFromUpstream = int64(i%7), int64(i%3), int64(i)<<20, int64(i%3)<<20
		if i == 50 {
			m.Stale, m.Errors = 2, 1
		}
		minutes[i] = m
		hour.Hits += m.Hits
		hour.Misses += m.Misses
		hour.Stale += m.Stale
		hour.Errors += m.Errors
		hour.BytesFromCache += m.BytesFromCache
		hour.BytesFromUpstream += m.BytesFromUpstream
	}
	snap := stats.Snapshot{
		Since: now.Add(-26 * time.Hour), Total: hour, LastHour: hour, Minutes: minutes,
		Upstreams: []stats.Upstream{
			{Name: "docker.io", Requests: 40, LastSuccess: now.Add(-time.Minute)},
			{Name: "quay.io", Requests: 12, Errors: 3, LastSuccess: now.Add(-time.Hour), LastError: now.Add(-9 * time.Minute),
				LastMessage: "dial tcp 10.0.0.9:443: connect: connection refused"},
		},
		Recent: []stats.Event{
			{Time: now.Add(-9 * time.Minute), Kind: "stale", API: "manifest", Name: "quay.io/team/app:v1", Message: "the upstream could not be checked"},
			{Time: now.Add(-10 * time.Minute), Kind: "error", API: "blob", Message: `upstream said <script>alert("x")</script>`},
		},
	}
	cfg := config.Default()
	cfg.Storage.MaxSize, cfg.Storage.LowWatermark = 10<<30, 0.9
	cfg.Upstreams = []config.Upstream{
		{Name: "docker.io", URL: "https://registry-1.docker.io"},
		{Name: "quay.io", URL: "https://user:s3cret@quay.io"},
		{Name: "ghcr.io", URL: "https://ghcr.io"},
	}
	tag := func(up, repo, t string) store.TagRef { return store.TagRef{Upstream: up, Repository: repo, Tag: t} }
	images := []eviction.Image{
		{Digest: "sha256:aaaaaaaaaaaaaaaaaaaa", Tags: []store.TagRef{tag("docker.io", "library/nginx", "1.27")}, Size: 3 << 30,
			LastUse: now.Add(-2 * time.Hour), Uses: 1500, PinnedBy: []store.Pin{{Owner: "config", Reference: "docker.io/library/nginx:1.27"}}},
		{Digest: "sha256:bbbbbbbbbbbbbbbbbbbb", Tags: []store.TagRef{tag("quay.io", "team/app", "v1"), tag("quay.io", "team/app", "latest")},
			Size: 1 << 30, LastUse: now.Add(-30 * time.Second), Uses: 7, Missing: 2},
		{Digest: "sha256:cccccccccccccccccccc", Repositories: []string{"ghcr.io/org/tool"}, Size: 2 << 20, LastUse: now.Add(-26 * time.Hour)},
	}
	checked, next := now.Add(-5*time.Minute), now.Add(55*time.Minute)
	sets := []files.Status{
		{Set: "ipa", Source: "https://tarballs.example/ipa.tar.gz", State: files.Ready, Version: 3, CheckedAt: &checked, NextCheck: &next,
			Files: []files.FileStatus{{Name: "ironic-python-agent.kernel", URL: "/files/ipa/ironic-python-agent.kernel", Size: 12 << 20}}},
		{Set: "tools", Source: "https://example.com/tools.tar.gz", State: files.Stale, Version: 1, Message: "GET https://example.com/tools.tar.gz: 503", CheckedAt: &checked,
			Files: []files.FileStatus{{Name: "kubectl", URL: "/files/tools/kubectl", Size: 50 << 20}}},
	}
	return Deps{
		Config:  cfg,
		Stats:   func() stats.Snapshot { return snap },
		Usage:   func() (int64, int64) { return 7 << 30, 1234 },
		Images:  func() ([]eviction.Image, error) { return images, nil },
		Pinned:  func() (int64, error) { return 3 << 30, nil },
		Sets:    func() []files.Status { return sets },
		Version: "v1.2.3",
		Now:     func() time.Time { return now },
	}
}

func get(t *testing.T, h http.Handler, method, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(body)
}

// section returns the HTML of the element with the given id, up to its closing </section>.
func section(t *testing.T, html, id string) string {
	t.Helper()
	i := strings.Index(html, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no section %q in the page", id)
	}
	j := strings.Index(html[i:], "</section>")
	if j < 0 {
		t.Fatalf("section %q is not closed", id)
	}
	return html[i : i+j]
}

func mustContain(t *testing.T, where, html string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(html, w) {
			t.Errorf("%s lacks %q", where, w)
		}
	}
}

func TestPage(t *testing.T) {
	var buf strings.Builder
	h := handler{fakeDeps()}
	if err := h.renderTo(&buf); err != nil {
		t.Fatalf("template: %v", err) // a broken template fails here, not in front of a person
	}
	resp, html := get(t, New(fakeDeps()), http.MethodGet, "/ui")
	if resp.StatusCode != 200 || html != buf.String() {
		t.Fatalf("GET /ui: %d, body differs from a direct render: %v", resp.StatusCode, html != buf.String())
	}
	if os.Getenv("UI_DUMP") != "" { // UI_DUMP=/tmp/ui.html go test ./internal/ui: look at it in a browser
		os.WriteFile(os.Getenv("UI_DUMP"), []byte(html), 0o644)
	}
	for k, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q does not forbid remote content", csp)
	}
	mustContain(t, "head", html, `<meta http-equiv="refresh" content="30">`, "v1.2.3", "up 26h00m")

	// Nothing but the page itself: no script, no remote stylesheet, font or image.
	for _, bad := range []string{"<script", "<link", "@import", "url(", "src=\"http"} {
		if strings.Contains(strings.ToLower(html), strings.ToLower(bad)) {
			t.Errorf("page contains %q", bad)
		}
	}
	// A message from an upstream is text, never markup.
	mustContain(t, "problems", section(t, html, "problems"), "upstream said &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	if strings.Contains(html, "s3cret") {
		t.Error("the page shows the password of an upstream URL")
	}

	mustContain(t, "summary", section(t, html, "summary"), `class="banner bad"`,
		"upstream quay.io is failing (last error 9m ago): dial tcp 10.0.0.9:443: connect: connection refused",
		"file set tools is stale (serving version 1)", "2 stale answers in the last hour", "1 error in the last hour")

	mustContain(t, "storage", section(t, html, "storage"),
		`<span id="storage-used">7.00 GiB</span>`, `<span id="storage-limit">10.0 GiB</span>`, "(70.0%)",
		`<span id="storage-bytes">7,516,192,768</span> bytes in <span id="storage-objects">1,234</span> objects`,
		`<span id="storage-pinned">3.00 GiB</span> (3,221,225,472 bytes)`, `style="width: 70.0%"`, `style="width: 30.0%"`)

	traffic := section(t, html, "traffic")
	c := fakeDeps().Stats().LastHour
	mustContain(t, "traffic", traffic, fmt.Sprintf(`<span class="big" id="hit-ratio">%.1f%%</span>`, c.HitRatio()*100),
		"<svg", "hits <strong>"+Num(c.Hits)+"</strong>", "misses <strong>"+Num(c.Misses)+"</strong>",
		"stale <strong>2</strong>", "from cache <strong>"+Bytes(c.BytesFromCache)+"</strong>")
	if n := strings.Count(traffic, "<g><title>"); n != 2*60 {
		t.Errorf("charts have %d bars, want 60 per chart", n)
	}
	// The busiest request minute (6 hits + 2 misses) sets the scale: 10.
	mustContain(t, "request chart", traffic, `text-anchor="end">10</text>`)

	ups := section(t, html, "upstreams")
	mustContain(t, "upstreams", ups, "docker.io", `<span class="badge healthy">healthy</span>`,
		"quay.io", `<span class="badge failing">failing</span>`, "connection refused", "3 / 12",
		"ghcr.io", `<span class="badge unknown">unknown</span>`, "https://quay.io")
	if strings.Index(ups, "docker.io") > strings.Index(ups, "quay.io") || strings.Index(ups, "quay.io") > strings.Index(ups, "ghcr.io") {
		t.Error("upstreams are not in config order")
	}

	largest := section(t, html, "largest")
	mustContain(t, "largest", largest, "(3 cached)", "docker.io/library/nginx:1.27", "3.00 GiB", `<span class="badge pinned">pinned</span>`,
		"quay.io/team/app:latest", "quay.io/team/app:v1", ">partial</span>", "ghcr.io/org/tool@sha256:cccccccccccc")
	if strings.Index(largest, "nginx") > strings.Index(largest, "quay.io/team/app") {
		t.Error("largest images are not largest first")
	}
	used := section(t, html, "most-used")
	if strings.Index(used, "nginx") > strings.Index(used, "quay.io/team/app") || strings.Index(used, "quay.io/team/app") > strings.Index(used, "ghcr.io/org/tool") ||
		!strings.Contains(used, "1,500") || !strings.Contains(used, "30s ago") {
		t.Errorf("most used images are not the most requested first (nginx 1,500 uses, app 7, tool 0):\n%s", used)
	}

	mustContain(t, "sets", section(t, html, "sets"), "ipa", `<span class="badge ready">Ready</span>`, "5m ago", "next in 55m",
		`<a href="/files/ipa/ironic-python-agent.kernel">ironic-python-agent.kernel</a>`, "12.0 MiB",
		"tools", `<span class="badge stale">Stale</span>`, "GET https://example.com/tools.tar.gz: 503")

	mustContain(t, "problems", section(t, html, "problems"), `<span class="badge stale">stale</span>`, "quay.io/team/app:v1", "9m ago",
		`<span class="badge error">error</span>`)
}

func TestPageQuietAndEmpty(t *testing.T) {
	d := fakeDeps()
	d.Config.Storage.MaxSize = 0
	d.Config.Upstreams = nil
	d.Stats = func() stats.Snapshot { return stats.Snapshot{Since: now, Minutes: make([]stats.Minute, 60)} }
	d.Usage = func() (int64, int64) { return 0, 0 }
	d.Images = func() ([]eviction.Image, error) { return nil, errors.New("index closed") }
	d.Pinned = func() (int64, error) { return 0, errors.New("index closed") }
	d.Sets = func() []files.Status { return nil }
	resp, html := get(t, New(d), http.MethodGet, "/ui/")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, html)
	}
	mustContain(t, "page", html, "could not list the store: index closed", "no limit", "no traffic in the last hour",
		"Nothing cached yet.", "No file set configured.", "None since the server started.", `id="hit-ratio">–<`)
}

func TestPageAllGood(t *testing.T) {
	d := fakeDeps()
	snap := d.Stats()
	snap.Upstreams, snap.Recent = snap.Upstreams[:1], nil
	snap.LastHour.Stale, snap.LastHour.Errors = 0, 0
	d.Stats = func() stats.Snapshot { return snap }
	d.Config.Upstreams = d.Config.Upstreams[:1]
	sets := d.Sets()[:1]
	d.Sets = func() []files.Status { return sets }
	_, html := get(t, New(d), http.MethodGet, "/ui")
	mustContain(t, "summary", section(t, html, "summary"), `class="banner ok"`, "All good")
}

func TestMethodsAndPaths(t *testing.T) {
	h := New(fakeDeps())
	if resp, _ := get(t, h, http.MethodPost, "/ui"); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ui: %d Allow=%q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, body := get(t, h, http.MethodHead, "/ui"); resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Length") == "" {
		t.Errorf("HEAD /ui: %d, %d body bytes, Content-Length %q", resp.StatusCode, len(body), resp.Header.Get("Content-Length"))
	}
	if resp, _ := get(t, h, http.MethodGet, "/ui/other"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/other: %d", resp.StatusCode)
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB", 10 << 20: "10.0 MiB", 300 << 30: "300 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := Num(n); got != want {
			t.Errorf("Num(%d) = %q, want %q", n, got, want)
		}
	}
	for v, want := range map[int64]int64{1: 1, 3: 5, 7: 10, 11: 20, 150: 200, 999: 1000} {
		if got := roundUp(v, false); got != want {
			t.Errorf("roundUp(%d) = %d, want %d", v, got, want)
		}
	}
	if got := roundUp(3<<20, true); got != 5<<20 {
		t.Errorf("roundUp(3 MiB) = %d, want 5 MiB", got)
	}
	// Every bar of a chart stays inside the plot, whatever the figures.
	c := requestChart([]stats.Minute{{Counts: stats.Counts{Hits: 1}}, {Counts: stats.Counts{Hits: 1 << 40, Misses: 3}}})
	pos := regexp.MustCompile(`^[0-9.]+$`)
	for _, b := range c.Bars {
		for _, p := range b.Parts {
			if p.Y < -0.001 || p.Y+p.H > chartHeight+0.001 || !pos.MatchString(fmt.Sprint(p.H)) {
				t.Errorf("bar part %+v leaves the plot", p)
			}
		}
	}
}
