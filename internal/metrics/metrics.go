// Package metrics defines every Prometheus metric imagecache exports, in one place so that names, labels and
// their bounded cardinality are documented together. No label ever carries a repository, tag or digest.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds the collectors; create one per process with New.
type Metrics struct {
	Registry *prometheus.Registry

	// Requests counts OCI API requests by api (manifest, blob, tags, referrers, other) and result (hit, miss,
	// revalidated, stale, error).
	Requests *prometheus.CounterVec
	// UpstreamRequests counts HTTP requests sent to upstreams by upstream name, method and status code
	// ("error" when no answer arrived). Pings and token requests are included: it is the real traffic.
	UpstreamRequests *prometheus.CounterVec
	// UpstreamLatency is the time to an upstream's response headers, by upstream.
	UpstreamLatency *prometheus.HistogramVec
	// ServedBytes counts content bytes sent to clients by source (cache, upstream).
	ServedBytes *prometheus.CounterVec
	// OnUpstream, when set, also hears every upstream round trip (the status page's upstream health).
	OnUpstream func(upstream string, failed bool, message string)
	// Evictions counts evicted units by kind (image, set, blob); EvictedBytes the bytes they freed.
	Evictions    *prometheus.CounterVec
	EvictedBytes prometheus.Counter
}

// New registers all metrics (and the Go and process collectors) on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imagecache_requests_total",
			Help: "OCI API requests by api (manifest, blob, tags, referrers, other) and cache result (hit, miss, revalidated, stale, error).",
		}, []string{"api", "result"}),
		UpstreamRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imagecache_upstream_requests_total",
			Help: "HTTP requests sent to upstreams by upstream, method and status code (error when no answer arrived).",
		}, []string{"upstream", "method", "code"}),
		UpstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "imagecache_upstream_response_seconds",
			Help:    "Time until an upstream's response headers arrived, by upstream.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 13),
		}, []string{"upstream"}),
	}
	m.ServedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "imagecache_served_bytes_total",
		Help: "Content bytes sent to clients, by source: cache (stored content) or upstream (streamed while fetched).",
	}, []string{"source"})
	m.Evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "imagecache_evictions_total",
		Help: "Units evicted to stay under storage.maxSize, by kind (image, set, blob).",
	}, []string{"kind"})
	m.EvictedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "imagecache_evicted_bytes_total",
		Help: "Bytes freed by eviction.",
	})
	m.Registry.MustRegister(m.Requests, m.UpstreamRequests, m.UpstreamLatency, m.ServedBytes, m.Evictions, m.EvictedBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest counts one API request.
func (m *Metrics) ObserveRequest(api, result string) { m.Requests.WithLabelValues(api, result).Inc() }

// ObserveServed counts content bytes sent to clients.
func (m *Metrics) ObserveServed(fromCache bool, n int64) {
	source := "upstream"
	if fromCache {
		source = "cache"
	}
	m.ServedBytes.WithLabelValues(source).Add(float64(n))
}

// GaugeFunc registers a gauge whose value is read from f at scrape time.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter whose value is read from f at scrape time.
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// WatchUpstreamSilence exports imagecache_upstream_silent{upstream}: 1 while the upstream is known not to
// answer (requests for it fail at once until a probe is answered), else 0.
func (m *Metrics) WatchUpstreamSilence(upstream string, silent func() bool) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "imagecache_upstream_silent",
		Help:        "1 while an upstream leaves requests unanswered and requests for it fail at once until a probe of its /v2/ is answered.",
		ConstLabels: prometheus.Labels{"upstream": upstream},
	}, func() float64 {
		if silent() {
			return 1
		}
		return 0
	}))
}

// WrapUpstream instruments the bottom transport of an upstream client.
func (m *Metrics) WrapUpstream(upstream string, rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
			m.UpstreamLatency.WithLabelValues(upstream).Observe(time.Since(start).Seconds())
		}
		m.UpstreamRequests.WithLabelValues(upstream, req.Method, code).Inc()
		if m.OnUpstream != nil {
			switch {
			case err != nil:
				m.OnUpstream(upstream, true, err.Error())
			case resp.StatusCode >= 500 || resp.StatusCode == 429:
				m.OnUpstream(upstream, true, req.Method+" "+req.URL.Path+": "+resp.Status)
			default:
				m.OnUpstream(upstream, false, "")
			}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
