// Package registry serves the read-only OCI Distribution API in front of the cache: it parses and validates
// each request, picks the upstream, and writes the cache's answers with the headers clients rely on.
package registry

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/reference"
)

// Observer is told the outcome of every API request (for metrics): api is manifest, blob, tags, referrers
// or other; result is a cache.Result in lower case, or "error".
type Observer func(api, result string)

// Handler serves /v2/.
type Handler struct {
	cache   *cache.Cache
	router  *reference.Router
	log     *slog.Logger
	observe Observer
}

// New returns the /v2/ handler.
func New(c *cache.Cache, router *reference.Router, log *slog.Logger, observe Observer) *Handler {
	if observe == nil {
		observe = func(string, string) {}
	}
	return &Handler{cache: c, router: router, log: log, observe: observe}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.fail(w, "other", errUnsupported)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v2")
	if rest == "" || rest == "/" {
		w.Header().Set("Content-Type", "application/json")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader([]byte("{}")))
		return
	}
	if strings.Contains(strings.ToLower(r.URL.EscapedPath()), "%2f") {
		// net/http has already decoded %2F into a "/", which would pass as a path separator.
		h.fail(w, "other", &regError{Status: http.StatusBadRequest, Code: reference.CodeNameInvalid,
			Message: "the path holds an escaped slash (%2F); write repository names with plain slashes"})
		return
	}
	req, err := reference.ParsePath(strings.TrimPrefix(rest, "/"))
	if err != nil {
		h.fail(w, "other", err)
		return
	}
	if req.Kind == reference.BlobUpload {
		h.fail(w, "blob", errUnsupported)
		return
	}
	ns := r.URL.Query().Get("ns")
	if ns != "" {
		w.Header().Set("OCI-Namespace", ns)
	}
	up, repository, err := h.router.Route(req.Name, ns)
	if err != nil {
		h.fail(w, apiName(req.Kind), err)
		return
	}
	switch req.Kind {
	case reference.Manifest:
		h.manifest(w, r, up, repository, req.Reference)
	case reference.Blob:
		h.blob(w, r, up, repository, req.Reference)
	case reference.TagsList:
		h.tags(w, r, up, repository, req.Name)
	case reference.Referrers:
		h.referrers(w, r, up, repository, req.Reference)
	}
}

func apiName(k reference.Kind) string {
	switch k {
	case reference.Manifest:
		return "manifest"
	case reference.Blob:
		return "blob"
	case reference.TagsList:
		return "tags"
	case reference.Referrers:
		return "referrers"
	}
	return "other"
}

func (h *Handler) fail(w http.ResponseWriter, api string, err error) {
	re := asRegError(err)
	h.observe(api, "error")
	if re.Status >= 500 {
		h.log.Warn("request failed", "api", api, "status", re.Status, "error", re.Message)
	}
	re.write(w)
}

func setResult(w http.ResponseWriter, r cache.Result) {
	w.Header().Set("X-Cache", string(r))
	if r == cache.Stale {
		w.Header().Set("Warning", `110 - "Response is Stale"`)
	}
}

// immutable marks answers addressed by digest: their bytes can never change.
func immutable(w http.ResponseWriter, dgst string) {
	w.Header().Set("Docker-Content-Digest", dgst)
	w.Header().Set("ETag", `"`+dgst+`"`)
}

func (h *Handler) manifest(w http.ResponseWriter, r *http.Request, up, repository, ref string) {
	m, err := h.cache.Manifest(r.Context(), up, repository, ref)
	if err != nil {
		h.fail(w, "manifest", err)
		return
	}
	h.observe("manifest", strings.ToLower(string(m.Result)))
	setResult(w, m.Result)
	immutable(w, m.Digest)
	w.Header().Set("Content-Type", m.MediaType)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(m.Body))
}

func (h *Handler) blob(w http.ResponseWriter, r *http.Request, up, repository, dgst string) {
	b, err := h.cache.Blob(r.Context(), up, repository, dgst)
	if err != nil {
		h.fail(w, "blob", err)
		return
	}
	defer b.Close()
	h.observe("blob", strings.ToLower(string(b.Result)))
	setResult(w, b.Result)
	immutable(w, dgst)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "max-age=31536000, immutable")
	http.ServeContent(w, r, "", time.Time{}, b.Content)
	if err := b.Err(); err != nil && r.Context().Err() == nil {
		// The promised Content-Length will not be met: break the connection so the client retries instead of
		// keeping a short or unverified body.
		h.log.Warn("aborting blob response", "upstream", up, "repository", repository, "digest", dgst, "error", err)
		panic(http.ErrAbortHandler)
	}
}

func (h *Handler) tags(w http.ResponseWriter, r *http.Request, up, repository, clientName string) {
	d, err := h.cache.Tags(r.Context(), up, repository, upstreamQuery(r))
	if err != nil {
		h.fail(w, "tags", err)
		return
	}
	if link := d.Header["Link"]; link != "" {
		d.Header["Link"] = rewriteLink(link, clientName, r.URL.Query().Get("ns"))
	}
	h.document(w, r, "tags", d)
}

func (h *Handler) referrers(w http.ResponseWriter, r *http.Request, up, repository, dgst string) {
	d, err := h.cache.Referrers(r.Context(), up, repository, dgst, upstreamQuery(r))
	if err != nil {
		h.fail(w, "referrers", err)
		return
	}
	h.document(w, r, "referrers", d)
}

func (h *Handler) document(w http.ResponseWriter, r *http.Request, api string, d *cache.Document) {
	h.observe(api, strings.ToLower(string(d.Result)))
	setResult(w, d.Result)
	for k, v := range d.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", d.ContentType)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(d.Body))
}

// upstreamQuery is the client's query without ns, which only addresses the cache.
func upstreamQuery(r *http.Request) string {
	q := r.URL.Query()
	q.Del("ns")
	return q.Encode()
}

// rewriteLink points a pagination Link from the upstream's path at the name the client used.
func rewriteLink(link, clientName, ns string) string {
	start, end := strings.IndexByte(link, '<'), strings.IndexByte(link, '>')
	if start < 0 || end < start {
		return link
	}
	target := link[start+1 : end]
	query := ""
	if i := strings.IndexByte(target, '?'); i >= 0 {
		query = target[i+1:]
	}
	if ns != "" && !strings.Contains(query, "ns=") {
		if query != "" {
			query += "&"
		}
		query += "ns=" + ns
	}
	path := "/v2/" + clientName + "/tags/list"
	if query != "" {
		path += "?" + query
	}
	return link[:start+1] + path + link[end:]
}
