package admin

import (
	"fmt"
	"net/http"
	"strings"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
)

// RefreshRequest is the body of POST /api/v1/refresh: one of ref (a tag) or set (a file set).
type RefreshRequest struct {
	Ref string `json:"ref,omitempty"`
	Set string `json:"set,omitempty"`
}

// RefreshResult is the answer for a tag.
type RefreshResult struct {
	Ref      string `json:"ref"`
	Digest   string `json:"digest"`
	Previous string `json:"previous,omitempty"` // what the tag pointed at before; empty when it was not cached
	Changed  bool   `json:"changed"`
	Result   string `json:"result"` // REVALIDATED (one HEAD, unchanged or moved to content already stored) or MISS (fetched)
}

// SetRefreshResult is the answer for a file set.
type SetRefreshResult struct {
	Set    string       `json:"set"`
	Status files.Status `json:"status"`
	Error  string       `json:"error,omitempty"`
}

// Refresh serves POST /api/v1/refresh: check a tag with its upstream now, whatever the policy and its
// revalidateAfter say (one HEAD; a GET only when the tag moved), or refresh a file set now.
func Refresh(c *cache.Cache, st *store.Store, sets *files.Manager, router *reference.Router) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, `use POST /api/v1/refresh with {"ref": "<image:tag>"} or {"set": "<file set>"}`)
			return
		}
		var req RefreshRequest
		if err := decodeBody(r, &req); err != nil || (req.Ref == "") == (req.Set == "") {
			writeError(w, http.StatusBadRequest, `send {"ref": "<image:tag>"} or {"set": "<file set>"}, one of them`+errSuffix(err))
			return
		}
		if req.Set != "" {
			refreshSet(w, r, sets, req.Set)
			return
		}
		up, repo, tag, err := router.ResolveImage(req.Ref)
		if err != nil {
			writeRefError(w, err)
			return
		}
		if strings.Contains(tag, ":") {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s names a digest, which never changes: there is nothing to refresh (refresh a tag)", req.Ref))
			return
		}
		res := RefreshResult{Ref: up + "/" + repo + ":" + tag}
		if prev, err := st.Tag(up, repo, tag); err == nil {
			res.Previous = prev.Digest
		}
		m, err := c.Refresh(r.Context(), up, repo, tag)
		if err != nil {
			msg := fmt.Sprintf("refresh %s: %v", res.Ref, err)
			if res.Previous != "" {
				msg += fmt.Sprintf("; nothing changed, the cache keeps serving %s", res.Previous)
			}
			writeError(w, cacheStatus(err), msg)
			return
		}
		res.Digest, res.Result = m.Digest, string(m.Result)
		res.Changed = res.Previous != "" && res.Previous != m.Digest
		writeJSON(w, http.StatusOK, res)
	}
}

func refreshSet(w http.ResponseWriter, r *http.Request, sets *files.Manager, name string) {
	if _, ok := sets.Status(name); !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no file set named %q (GET /api/v1/sets lists them)", name))
		return
	}
	st, err := sets.Refresh(r.Context(), name)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, SetRefreshResult{Set: name, Status: st, Error: fmt.Sprintf("refresh file set %s: %v", name, err)})
		return
	}
	writeJSON(w, http.StatusOK, SetRefreshResult{Set: name, Status: st})
}
