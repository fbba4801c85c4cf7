// Package admin serves the operator's API under /api/v1: maintenance (gc, verify) and file-set control.
package admin

import (
	"encoding/json"
	"net/http"

	"imagecache.io/imagecache/internal/eviction"
)

// GC serves POST /api/v1/gc[?dryRun=true]: run eviction now (down to the low watermark when the store is over
// its limit) and answer the plan as JSON.
func GC(e *eviction.Evictor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, "use POST /api/v1/gc (add ?dryRun=true to only list what would go)")
			return
		}
		plan, err := e.Run(r.URL.Query().Get("dryRun") == "true")
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, plan)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
