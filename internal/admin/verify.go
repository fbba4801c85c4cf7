package admin

import (
	"net/http"
	"sync"

	"imagecache.io/imagecache/internal/store"
)

// Verify serves POST /api/v1/verify: re-hash every stored object while the server keeps serving, quarantine
// what is corrupt, drop what is missing, and answer the store.VerifyReport as JSON. The request waits for the
// whole run; a client that hangs up cancels it.
func Verify(st *store.Store) http.HandlerFunc {
	// One run at a time: a second one would only read every byte again, competing with the first for the disk.
	var running sync.Mutex
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST /api/v1/verify")
			return
		}
		if !running.TryLock() {
			writeError(w, http.StatusConflict, "a verify is already running on this server; wait for it to finish")
			return
		}
		defer running.Unlock()
		rep, err := st.Verify(r.Context(), nil)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, rep)
	}
}
