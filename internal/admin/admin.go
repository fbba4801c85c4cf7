package admin

import (
	"log/slog"
	"net/http"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/stats"
	"imagecache.io/imagecache/internal/store"
)

// Deps is everything the admin API reads or drives.
type Deps struct {
	Config  *config.Config
	Store   *store.Store
	Cache   *cache.Cache
	Files   *files.Manager
	Evictor *eviction.Evictor
	Stats   *stats.Stats
	Router  *reference.Router
	Log     *slog.Logger
}

// New serves the admin API under /api/v1, behind the admin token (see protect).
func New(d Deps) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/sets", d.Files.ServeAPI)
	mux.HandleFunc("/api/v1/sets/", d.Files.ServeAPI)
	mux.Handle("/api/v1/gc", GC(d.Evictor))
	mux.Handle("/api/v1/verify", Verify(d.Store))
	mux.Handle("/api/v1/pins", Pins(d.Store))
	mux.Handle("/api/v1/images", Images(d.Evictor, d.Router))
	mux.Handle("/api/v1/pull", Pull(d.Cache, d.Router))
	mux.Handle("/api/v1/refresh", Refresh(d.Cache, d.Store, d.Files, d.Router))
	mux.Handle("/api/v1/stats", Stats(d.Stats, d.Store, d.Evictor, d.Config))
	return protect(d.Config, mux)
}
