// Package ui serves the status page at /ui: one HTML page, rendered on the server from embedded templates,
// for the person on call who needs to see in seconds whether the cache is serving, how full it is, which
// upstream is failing and what was served stale. It needs no JavaScript and loads nothing from elsewhere
// (the charts are inline SVG), so it works from a laptop behind any proxy and in a text-only incident.
package ui

import (
	"bytes"
	"cmp"
	"embed"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/stats"
)

//go:embed templates/*.html
var templateFS embed.FS

// page is parsed once: a template that does not parse stops the binary at start (and the unit tests), not
// the first person who opens the page during an incident.
var page = template.Must(template.New("page.html").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))

// Deps is what the page reads. Every field is read at request time, so the page is always current.
type Deps struct {
	Config  *config.Config                   // upstream names and storage limits (no secret is shown)
	Stats   func() stats.Snapshot            // last hour, upstream health, recent problems
	Usage   func() (bytes, objects int64)    // the store's running totals (imagecache_store_bytes)
	Images  func() ([]eviction.Image, error) // image units, as eviction sees them
	Pinned  func() (int64, error)            // bytes pins keep, now (not as of the last eviction run)
	Sets    func() []files.Status            // file sets, in config order
	Version string
	Log     *slog.Logger
	Now     func() time.Time // nil: time.Now
}

// New returns the handler for /ui and /ui/. The page shows no secret, so it is served like /metrics.
func New(d Deps) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return handler{d}
}

type handler struct{ d Deps }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ui" && r.URL.Path != "/ui/" {
		http.Error(w, "not found: the status page is at /ui", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the status page is read-only: use GET", http.StatusMethodNotAllowed)
		return
	}
	// Render to memory first: a failure becomes a clean 500, never half a page that looks complete.
	var buf bytes.Buffer
	if err := h.renderTo(&buf); err != nil {
		h.d.Log.Error("render status page", "error", err)
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	// The page is self-contained; the policy makes sure it stays so (no script, no remote style, font or image).
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = buf.WriteTo(w)
}

func (h handler) renderTo(w io.Writer) error { return page.Execute(w, h.view()) }

// view gathers everything the template shows, in one pass, at one instant.
func (h handler) view() *view {
	d := h.d
	v := &view{Now: d.Now().UTC(), Version: d.Version}
	snap := d.Stats()
	v.Since, v.LastHour, v.Recent = snap.Since, snap.LastHour, snap.Recent
	v.Requests, v.Bytes = requestChart(snap.Minutes), bytesChart(snap.Minutes)
	v.Upstreams = upstreams(d.Config, snap.Upstreams)

	used, objects := d.Usage()
	v.Storage = storage{Used: used, Objects: objects, Limit: d.Config.Storage.MaxSize, Low: d.Config.Storage.LowWatermark}
	// The page still shows everything else when the index cannot be read: that is when it is needed most.
	if pinned, err := d.Pinned(); err != nil {
		v.InventoryError = err.Error()
	} else {
		v.Storage.Pinned, v.Storage.Known = pinned, true
	}
	if images, err := d.Images(); err != nil {
		v.InventoryError = err.Error()
	} else {
		v.Largest, v.MostUsed, v.ImageCount = topImages(images, 10)
	}
	v.Sets = d.Sets()
	v.Alerts = v.alerts()
	return v
}

// topImages returns the largest and the most used images: the most requested, the most recently used
// first among equals.
func topImages(all []eviction.Image, n int) (largest, used []image, count int) {
	images := make([]image, 0, len(all))
	for _, img := range all {
		images = append(images, newImage(img))
	}
	byDigest := func(a, b image) int { return strings.Compare(a.Digest, b.Digest) } // a stable order for ties
	largest = slices.Clone(images)
	slices.SortFunc(largest, func(a, b image) int {
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		return byDigest(a, b)
	})
	used = slices.Clone(images)
	slices.SortFunc(used, func(a, b image) int {
		if c := cmp.Compare(b.Uses, a.Uses); c != 0 {
			return c
		}
		if c := b.LastUse.Compare(a.LastUse); c != 0 {
			return c
		}
		return byDigest(a, b)
	})
	return largest[:min(n, len(largest))], used[:min(n, len(used))], len(images)
}

// image is one row of an image table.
type image struct {
	Refs    []string // upstream/repository:tag; upstream/repository@digest when no tag points at it
	Digest  string
	Size    int64
	LastUse time.Time
	Uses    int64 // requests for its root manifest
	Pinned  bool
	Missing int // objects its manifests name that are not stored: not pullable with the upstream down
}

func newImage(img eviction.Image) image {
	out := image{Digest: img.Digest, Size: img.Size, LastUse: img.LastUse, Uses: img.Uses, Pinned: len(img.PinnedBy) > 0, Missing: img.Missing}
	for _, t := range img.Tags {
		out.Refs = append(out.Refs, t.Upstream+"/"+t.Repository+":"+t.Tag)
	}
	slices.Sort(out.Refs)
	if len(out.Refs) == 0 {
		for _, r := range img.Repositories {
			out.Refs = append(out.Refs, r+"@"+shortDigest(img.Digest))
		}
	}
	return out
}

// upstreams lists every configured upstream, contacted or not, then any other the stats know about.
func upstreams(cfg *config.Config, seen []stats.Upstream) []upstream {
	byName := map[string]stats.Upstream{}
	for _, u := range seen {
		byName[u.Name] = u
	}
	var out []upstream
	add := func(name, url string) {
		u, ok := byName[name]
		delete(byName, name)
		if !ok {
			u = stats.Upstream{Name: name}
		}
		out = append(out, upstream{Upstream: u, URL: url, Contacted: ok})
	}
	for _, u := range cfg.Upstreams {
		add(u.Name, u.URL)
	}
	for _, u := range seen {
		if _, left := byName[u.Name]; left {
			add(u.Name, "")
		}
	}
	return out
}
