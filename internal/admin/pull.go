package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/reference"
)

// PullRequest is the body of POST /api/v1/pull.
type PullRequest struct {
	Ref       string   `json:"ref"`
	Platforms []string `json:"platforms,omitempty"` // os/arch[/variant]; all when empty
}

// PullResult is the answer of POST /api/v1/pull (the last line of a streamed one).
type PullResult struct {
	Ref        string `json:"ref"`
	Upstream   string `json:"upstream"`
	Repository string `json:"repository"`
	Reference  string `json:"reference"` // the tag or digest pulled
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	Stale      bool   `json:"stale"` // the tag could not be checked; what was cached before is what is there
}

// PullEvent is one line of a streamed pull: a blob's progress, then the result or an error.
type PullEvent struct {
	Layer  string      `json:"layer,omitempty"`
	Done   int64       `json:"done,omitempty"`
	Total  int64       `json:"total,omitempty"`
	Cached bool        `json:"cached,omitempty"`
	Result *PullResult `json:"result,omitempty"`
	Error  string      `json:"error,omitempty"`
}

const ndjson = "application/x-ndjson"

// progressEvery spaces a blob's progress lines; the first and the last are always sent.
const progressEvery = 200 * time.Millisecond

// Pull serves POST /api/v1/pull: bring an image completely into the cache, as a client pull would. With
// Accept: application/x-ndjson the answer streams one PullEvent per line (blob progress, then the result or
// the error); otherwise it is one PullResult, or an error with the status a registry client would get.
func Pull(c *cache.Cache, router *reference.Router) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, `use POST /api/v1/pull with {"ref": "<image>", "platforms": ["linux/amd64"]}`)
			return
		}
		var req PullRequest
		if err := decodeBody(r, &req); err != nil || req.Ref == "" {
			writeError(w, http.StatusBadRequest, `send {"ref": "<image>", "platforms": ["os/arch", ...]} (platforms optional)`+errSuffix(err))
			return
		}
		for _, p := range req.Platforms {
			if n := len(strings.Split(p, "/")); n < 2 || n > 3 || strings.Contains(p, "//") || strings.HasSuffix(p, "/") {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("platform %q: want os/arch or os/arch/variant, e.g. linux/arm64", p))
				return
			}
		}
		up, repo, ref, err := router.ResolveImage(req.Ref)
		if err != nil {
			writeRefError(w, err)
			return
		}
		res := PullResult{Ref: req.Ref, Upstream: up, Repository: repo, Reference: ref}
		if !strings.Contains(r.Header.Get("Accept"), ndjson) {
			p, err := c.Prefetch(r.Context(), up, repo, ref, req.Platforms)
			if err != nil {
				writeError(w, cacheStatus(err), fmt.Sprintf("pull %s: %v", req.Ref, err))
				return
			}
			res.Digest, res.Size, res.Stale = p.Digest, p.Size, p.Stale
			writeJSON(w, http.StatusOK, res)
			return
		}
		stream := newEventStream(w)
		ctx := cache.WithProgress(r.Context(), stream.progress)
		p, err := c.Prefetch(ctx, up, repo, ref, req.Platforms)
		if err != nil {
			stream.send(PullEvent{Error: fmt.Sprintf("pull %s: %v", req.Ref, err)})
			return
		}
		res.Digest, res.Size, res.Stale = p.Digest, p.Size, p.Stale
		stream.send(PullEvent{Result: &res})
	}
}

// eventStream writes PullEvents as JSON lines, flushing each.
type eventStream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	enc  *json.Encoder
	last map[string]time.Time
}

func newEventStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", ndjson)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, enc: json.NewEncoder(w), last: map[string]time.Time{}}
}

func (s *eventStream) progress(digest string, done, total int64, cached bool) {
	s.mu.Lock()
	now := time.Now()
	due := done == 0 || done >= total || now.Sub(s.last[digest]) >= progressEvery
	if due {
		s.last[digest] = now
	}
	s.mu.Unlock()
	if due {
		s.send(PullEvent{Layer: digest, Done: done, Total: total, Cached: cached})
	}
}

func (s *eventStream) send(e PullEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enc.Encode(e)
	http.NewResponseController(s.w).Flush() // through the access log's wrapper

}

// cacheStatus is the status a registry client would get for a cache failure.
func cacheStatus(err error) int {
	var ce *cache.Error
	if errors.As(err, &ce) && ce.Status != 0 {
		return ce.Status
	}
	return http.StatusBadGateway
}

// decodeBody reads a small JSON request body, refusing unknown fields (a typo must not be ignored).
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}
