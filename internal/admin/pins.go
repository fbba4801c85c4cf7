package admin

import (
	"net/http"

	"imagecache.io/imagecache/internal/store"
)

// Pins serves GET /api/v1/pins: every pin, by owner (the config, or a custom resource).
func Pins(st *store.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			writeError(w, http.StatusMethodNotAllowed, "use GET /api/v1/pins")
			return
		}
		pins, err := st.Pins()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if pins == nil {
			pins = []store.Pin{}
		}
		writeJSON(w, http.StatusOK, map[string][]store.Pin{"pins": pins})
	}
}
