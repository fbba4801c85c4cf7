package admin

import (
	"net/http"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/stats"
	"imagecache.io/imagecache/internal/store"
)

// StatsReport is the answer of GET /api/v1/stats.
type StatsReport struct {
	Since            time.Time      `json:"since"` // when counting started (the server's start)
	Total            stats.Counts   `json:"total"`
	HitRatio         float64        `json:"hitRatio"` // of Total: answers with no content from the upstream
	LastHour         stats.Counts   `json:"lastHour"`
	LastHourHitRatio float64        `json:"lastHourHitRatio"`
	Storage          StorageReport  `json:"storage"`
	Upstreams        []UpstreamInfo `json:"upstreams"` // every configured upstream, in config order
	Recent           []stats.Event  `json:"recent"`    // stale answers and errors, newest first
	Minutes          []stats.Minute `json:"minutes"`   // the last 60, oldest first
}

// StorageReport is how full the store is.
type StorageReport struct {
	UsedBytes         int64 `json:"usedBytes"`
	Objects           int64 `json:"objects"`
	LimitBytes        int64 `json:"limitBytes"`        // storage.maxSize; 0 = unbounded
	LowWatermarkBytes int64 `json:"lowWatermarkBytes"` // what eviction brings the store down to
	PinnedBytes       int64 `json:"pinnedBytes"`
	PinnedOverLimit   bool  `json:"pinnedOverLimit"`
}

// UpstreamInfo is an upstream's health as seen from the requests sent to it since the start.
type UpstreamInfo struct {
	stats.Upstream
	URL     string `json:"url"`
	Healthy bool   `json:"healthy"` // the last request succeeded, or none failed
}

// Stats serves GET /api/v1/stats.
func Stats(s *stats.Stats, st *store.Store, e *eviction.Evictor, cfg *config.Config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "use GET /api/v1/stats")
			return
		}
		snap := s.Snapshot()
		rep := StatsReport{Since: snap.Since, Total: snap.Total, HitRatio: snap.Total.HitRatio(), LastHour: snap.LastHour,
			LastHourHitRatio: snap.LastHour.HitRatio(), Recent: snap.Recent, Minutes: snap.Minutes, Upstreams: []UpstreamInfo{}}
		if rep.Recent == nil {
			rep.Recent = []stats.Event{}
		}
		rep.Storage.UsedBytes, rep.Storage.Objects = st.Usage()
		rep.Storage.LimitBytes = cfg.Storage.MaxSize
		rep.Storage.LowWatermarkBytes = int64(float64(cfg.Storage.MaxSize) * cfg.Storage.LowWatermark)
		pinned, err := e.PinnedBytes()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "add up pinned content: "+err.Error())
			return
		}
		rep.Storage.PinnedBytes = pinned
		rep.Storage.PinnedOverLimit = cfg.Storage.MaxSize > 0 && pinned > cfg.Storage.MaxSize
		seen := map[string]bool{}
		for _, u := range cfg.Upstreams {
			info := UpstreamInfo{Upstream: stats.Upstream{Name: u.Name}, URL: u.URL}
			for _, su := range snap.Upstreams {
				if su.Name == u.Name {
					info.Upstream = su
				}
			}
			info.Healthy = info.Upstream.Healthy()
			rep.Upstreams = append(rep.Upstreams, info)
			seen[u.Name] = true
		}
		for _, su := range snap.Upstreams {
			if !seen[su.Name] {
				rep.Upstreams = append(rep.Upstreams, UpstreamInfo{Upstream: su, Healthy: su.Healthy()})
			}
		}
		writeJSON(w, http.StatusOK, rep)
	}
}
