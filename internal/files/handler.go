package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/store"
)

// ServeHTTP serves /files/ (every set's status), /files/<set>/ (one set's status) and /files/<set>/<file>.
func (m *Manager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "file sets are read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/files")
	rest = strings.TrimPrefix(rest, "/")
	if rest == "" {
		writeJSON(w, http.StatusOK, map[string][]Status{"sets": m.Statuses()})
		return
	}
	name, file, _ := strings.Cut(rest, "/")
	s, ok := m.get(name)
	if !ok {
		http.Error(w, fmt.Sprintf("no file set named %q; sets served: %s", name, strings.Join(m.Names(), ", ")), http.StatusNotFound)
		return
	}
	if file == "" {
		writeJSON(w, http.StatusOK, m.status(s))
		return
	}
	m.serveFile(w, r, s, file)
}

func (m *Manager) serveFile(w http.ResponseWriter, r *http.Request, s *set, name string) {
	v := s.current.Load() // the version this request is served from, even if a refresh publishes another
	if v == nil {
		state, err := s.state()
		msg := fmt.Sprintf("file set %s has no published version yet (%s)", s.cfg.Set, state)
		if err != nil {
			msg += ": " + err.Error()
		}
		w.Header().Set("Retry-After", strconv.Itoa(m.retryAfter(s)))
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	f, ok := v.Files[name]
	if !ok {
		http.Error(w, fmt.Sprintf("file set %s has no file %q; it has: %s", s.cfg.Set, name, strings.Join(sortedNames(v.Files), ", ")), http.StatusNotFound)
		return
	}
	content, _, err := m.store.Open(f.Digest)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, fmt.Sprintf("the content of %s/%s is missing from the store; it will be fetched again", s.cfg.Set, name), http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, "read "+s.cfg.Set+"/"+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer content.Close()
	m.store.Touch(f.Digest)
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("ETag", `"`+f.Digest+`"`)
	w.Header().Set("X-Set-Version", strconv.Itoa(v.Version))
	http.ServeContent(w, r, name, f.LastModified, content)
}

// retryAfter is how many seconds until the next attempt, at least 1.
func (m *Manager) retryAfter(s *set) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(1, int(time.Until(s.nextCheck).Seconds()+0.999))
}

// ServeAPI serves the admin part: GET /api/v1/sets, GET /api/v1/sets/<set>, POST /api/v1/sets/<set>/refresh.
func (m *Manager) ServeAPI(w http.ResponseWriter, r *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/v1/sets"), "/")
	name, action, _ := strings.Cut(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string][]Status{"sets": m.Statuses()})
	case action == "" && r.Method == http.MethodGet:
		if s, ok := m.get(name); ok {
			writeJSON(w, http.StatusOK, m.status(s))
			return
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no file set named %q", name)})
	case action == "refresh" && r.Method == http.MethodPost:
		st, err := m.Refresh(r.Context(), name)
		switch {
		case err != nil && st.Set == "":
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusBadGateway, st)
		default:
			writeJSON(w, http.StatusOK, st)
		}
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown endpoint; use GET /api/v1/sets[/<set>] or POST /api/v1/sets/<set>/refresh"})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func sortedNames(files map[string]store.SetFile) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
