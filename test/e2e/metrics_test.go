package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"imagecache.io/imagecache/internal/metrics"
)

// TestMetricsCountExactly runs a scripted sequence against a real registry behind the fault proxy, under the
// default Always policy, and checks every imagecache counter it moves against what happened: one manifest
// miss, one hit by digest, one stale answer with the upstream refusing connections, and a blob miss and hit.
func TestMetricsCountExactly(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	digest, img := pushImage(t, reg.Host, "metrics/app:v1", "oci", 1, 2048)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
defaultPolicy: {upstreamTimeout: 2s}
`, px.URL()))
	layer := blobDigests(t, img)[1]
	rawManifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	layerSize := blobSize(t, img, layer)

	miss := manifest(t, c, http.MethodGet, "metrics/app", "v1")
	expect(t, miss, 200, "MISS", "first GET by tag")
	expect(t, manifest(t, c, http.MethodGet, "metrics/app", digest), 200, "HIT", "GET by digest")
	blobMiss := call(t, http.MethodGet, c.URL+"/v2/metrics/app/blobs/"+layer)
	expect(t, blobMiss, 200, "MISS", "first GET of the layer")
	expect(t, call(t, http.MethodGet, c.URL+"/v2/metrics/app/blobs/"+layer), 200, "HIT", "second GET of the layer")
	upstreamSeen := px.Requests() // everything that reached the upstream while it was up
	px.Refuse()
	stale := manifest(t, c, http.MethodGet, "metrics/app", "v1")
	expect(t, stale, 200, "STALE", "GET by tag with the upstream refusing connections")
	if len(miss.Body) != len(rawManifest) || len(blobMiss.Body) != int(layerSize) {
		t.Fatalf("bodies: manifest %d bytes (want %d), layer %d (want %d)", len(miss.Body), len(rawManifest), len(blobMiss.Body), layerSize)
	}

	fams := scrape(t, c)
	// Every series of imagecache_requests_total, not just the ones expected: nothing else may have counted.
	assertSeries(t, fams, "imagecache_requests_total", map[string]float64{
		`api="manifest",result="miss"`:  1,
		`api="manifest",result="hit"`:   1,
		`api="manifest",result="stale"`: 1,
		`api="blob",result="miss"`:      1,
		`api="blob",result="hit"`:       1,
	})
	m := int64(len(rawManifest))
	assertSeries(t, fams, "imagecache_served_bytes_total", map[string]float64{
		`source="upstream"`: float64(m + layerSize),   // the miss's manifest and the layer streamed while fetched
		`source="cache"`:    float64(2*m + layerSize), // the hit and the stale manifest, the layer's second GET
	})

	// Upstream traffic, by method and code: what the proxy received, plus the connection refused at the end.
	// Per the design: the miss by tag (nothing cached, so nothing to check) costs one GET, plus the registry
	// ping of a new repository; the digest and blob hits cost nothing; the stale answer one HEAD that got no
	// answer. go-containerregistry's https attempt of its ping at this http upstream is refused inside the
	// process and must not count.
	want := map[string]float64{}
	for _, r := range upstreamSeen {
		want[fmt.Sprintf(`code="%d",method="%s",upstream="upstream.test"`, r.Status, r.Method)]++
	}
	want[`code="error",method="HEAD",upstream="upstream.test"`]++
	assertSeries(t, fams, "imagecache_upstream_requests_total", want)
	kinds := map[string]int{}
	for _, r := range upstreamSeen {
		kinds[r.Method+" "+r.Kind]++
	}
	if kinds["GET manifest"] != 1 || kinds["GET blob"] != 1 || kinds["GET ping"] != 1 || len(upstreamSeen) != 3 {
		t.Errorf("upstream saw %v; want 1 GET ping, 1 GET manifest and 1 GET blob", kinds)
	}
	// Latency is observed for every request that got an answer, and only those.
	assertSeries(t, fams, "imagecache_upstream_response_seconds", map[string]float64{`upstream="upstream.test"`: float64(len(upstreamSeen))})
	assertSeries(t, fams, "imagecache_downloads_in_flight", map[string]float64{"": 0})
}

// TestMetricsCardinalityBounded pulls 200 different repositories through the cache and checks that no
// imagecache_ metric grew a series for them: the series after 200 repositories are the series after 20, and
// no label value names a repository.
func TestMetricsCardinalityBounded(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
`, reg.URL))
	const n = 200
	repos := make([]string, n)
	for i := range repos {
		repos[i] = fmt.Sprintf("cardinality/repo%03d", i)
	}
	parallel(t, repos, func(ctx context.Context, repo string) error {
		img, err := random.Image(256, 1)
		if err != nil {
			return err
		}
		ref, err := name.ParseReference(reg.Host+"/"+repo+":v1", name.Insecure)
		if err != nil {
			return err
		}
		return remote.Write(ref, img, remote.WithContext(ctx))
	})
	pull := func(ctx context.Context, repo string) error {
		ref, err := name.ParseReference(c.Host+"/"+repo+":v1", name.Insecure)
		if err != nil {
			return err
		}
		img, err := remote.Image(ref, remote.WithContext(ctx))
		if err != nil {
			return err
		}
		return readLayers(img)
	}
	parallel(t, repos[:20], pull)
	after20 := seriesByFamily(scrape(t, c))
	parallel(t, repos[20:], pull)
	fams := scrape(t, c)
	after200 := seriesByFamily(fams)

	if got := sumSeries(fams, "imagecache_requests_total", `api="manifest",result="miss"`); got != n {
		t.Fatalf("manifest misses: %v, want %d (the pulls did not all go through the cache)", got, n)
	}
	for fam, series := range after200 {
		if !slices.Equal(series, after20[fam]) {
			t.Errorf("%s: %d series after 20 repositories, %d after 200:\n%v\nthen\n%v", fam, len(after20[fam]), len(series), after20[fam], series)
		}
		for _, s := range series {
			if strings.Contains(s, "cardinality") || strings.Contains(s, "repo") || strings.Contains(s, "sha256") {
				t.Errorf("%s has a label naming a repository or digest: {%s}", fam, s)
			}
		}
	}
	t.Logf("after %d repositories: %d imagecache_ families, %d series", n, len(after200), countAll(after200))
}

// TestMetricsDashboard checks deploy/grafana-dashboard.json: valid JSON, and every imagecache_ metric its
// queries name exists, either in the metrics package or in what a running server exports.
func TestMetricsDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard has title %q, uid %q and %d panels", dash.Title, dash.UID, len(dash.Panels))
	}

	known := map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	go func() { metrics.New().Registry.Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	// Gauges over the store and the downloads are registered by serve, next to what they read.
	c := startImagecache(t, `upstreams:
  - {name: upstream.test, url: "http://127.0.0.1:9", default: true}
`)
	for name := range scrape(t, c) {
		known[name] = true
	}

	metricName := regexp.MustCompile(`imagecache_[a-z_]+`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, name := range metricName.FindAllString(target.Expr, -1) {
				queried[name] = true
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && known[b] {
						base = b
					}
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which imagecache does not export", p.Title, name)
				}
			}
		}
	}
	// The dashboard covers what the issue asks an operator to see.
	for _, want := range []string{"imagecache_requests_total", "imagecache_served_bytes_total", "imagecache_upstream_requests_total",
		"imagecache_upstream_response_seconds_bucket", "imagecache_store_bytes", "imagecache_store_limit_bytes",
		"imagecache_evictions_total", "imagecache_pinned_bytes", "imagecache_downloads_in_flight"} {
		if !queried[want] {
			t.Errorf("the dashboard has no panel over %s", want)
		}
	}
}

// scrape reads the cache's /metrics with Prometheus' own parser.
func scrape(t testing.TB, c *cacheProc) map[string]*dto.MetricFamily {
	t.Helper()
	a := call(t, http.MethodGet, c.URL+"/metrics")
	if a.Status != 200 {
		t.Fatalf("GET /metrics: %d", a.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(a.Body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// labels renders a series' labels sorted by name, as `a="x",b="y"`.
func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// value is a counter's or gauge's value, or a histogram's sample count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}

// assertSeries checks that a family has exactly these series with these values.
func assertSeries(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			got[labels(m)] = value(m)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) { // fmt prints maps sorted by key
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

func sumSeries(fams map[string]*dto.MetricFamily, name, labelSet string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if labels(m) == labelSet {
			sum += value(m)
		}
	}
	return sum
}

// seriesByFamily lists the label sets of every imagecache_ family, sorted.
func seriesByFamily(fams map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "imagecache_") {
			continue
		}
		for _, m := range f.GetMetric() {
			out[name] = append(out[name], labels(m))
		}
		sort.Strings(out[name])
	}
	return out
}

func countAll(series map[string][]string) int {
	n := 0
	for _, s := range series {
		n += len(s)
	}
	return n
}

// parallel runs f for every item, 8 at a time, and fails the test with the first error.
func parallel(t *testing.T, items []string, f func(ctx context.Context, item string) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 8)
	for _, item := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, item); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%s: %w", item, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// blobSize is the size the manifest gives a layer.
func blobSize(t *testing.T, img v1.Image, digest string) int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		if l.Digest.String() == digest {
			return l.Size
		}
	}
	t.Fatalf("no layer %s in the manifest", digest)
	return 0
}
