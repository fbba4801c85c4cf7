// Package registry serves the read-only OCI Distribution API in front of the cache: it parses and validates
// each request, picks the upstream, and writes the cache's answers with the headers clients rely on.
package registry

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/reference"
)

// Observer is told what every API request did (for metrics and the status page): api is manifest, blob,
// tags, referrers or other; result is a cache.Result in lower case, or "error".
type Observer interface {
	Request(api, result string)
	// Served counts content bytes sent, by where they came from.
	Served(fromCache bool, bytes int64)
	// Problem records a stale answer ("stale") or a failure ("error") for name (upstream/repository:ref).
	Problem(kind, api, name, message string)
}

type nopObserver struct{}

func (nopObserver) Request(string, string)                 {}
func (nopObserver) Served(bool, int64)                     {}
func (nopObserver) Problem(string, string, string, string) {}

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
		observe = nopObserver{}
	}
	return &Handler{cache: c, router: router, log: log, observe: observe}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.fail(w, r, "other", errUnsupported)
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
		h.fail(w, r, "other", &regError{Status: http.StatusBadRequest, Code: reference.CodeNameInvalid,
			Message: "the path holds an escaped slash (%2F); write repository names with plain slashes"})
		return
	}
	req, err := reference.ParsePath(strings.TrimPrefix(rest, "/"))
	if err != nil {
		h.fail(w, r, "other", err)
		return
	}
	if req.Kind == reference.BlobUpload {
		h.fail(w, r, "blob", errUnsupported)
		return
	}
	ns := r.URL.Query().Get("ns")
	if ns != "" {
		w.Header().Set("OCI-Namespace", ns)
	}
	up, repository, err := h.router.Route(req.Name, ns)
	if err != nil {
		h.fail(w, r, apiName(req.Kind), err)
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

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, api string, err error) {
	re := asRegError(err)
	h.observe.Request(api, "error")
	if re.Status >= 500 || re.Status == http.StatusTooManyRequests {
		h.log.WarnContext(r.Context(), "request failed", "api", api, "status", re.Status, "error", re.Message)
		h.observe.Problem("error", api, "", re.Message)
	}
	re.write(w)
}

// answered counts an answer and, when it is stale, records it as a problem.
func (h *Handler) answered(api string, r cache.Result, name string) {
	h.observe.Request(api, strings.ToLower(string(r)))
	if r == cache.Stale {
		h.observe.Problem("stale", api, name, "the upstream could not be checked; served the last known good answer")
	}
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
		h.fail(w, r, "manifest", err)
		return
	}
	h.answered("manifest", m.Result, reference.Join(up+"/"+repository, ref))
	setResult(w, m.Result)
	immutable(w, m.Digest)
	w.Header().Set("Content-Type", m.MediaType)
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(m.Body))
	h.observe.Served(m.Result != cache.Miss, cw.n)
}

func (h *Handler) blob(w http.ResponseWriter, r *http.Request, up, repository, dgst string) {
	if r.Method == http.MethodHead {
		h.blobHead(w, r, up, repository, dgst)
		return
	}
	b, err := h.cache.Blob(r.Context(), up, repository, dgst)
	if err != nil {
		h.fail(w, r, "blob", err)
		return
	}
	defer b.Close()
	h.answered("blob", b.Result, up+"/"+repository+"@"+dgst)
	blobHeaders(w, dgst, b.Result)
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "", time.Time{}, b.Content)
	h.observe.Served(b.Result == cache.Hit, cw.n)
	if err := b.Err(); err != nil && r.Context().Err() == nil {
		// The promised Content-Length will not be met: break the connection so the client retries instead of
		// keeping a short or unverified body.
		h.log.WarnContext(r.Context(), "aborting blob response", "upstream", up, "repository", repository, "digest", dgst, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// blobHead answers a HEAD with the blob's headers and no download: a stored blob's size, or the upstream's.
func (h *Handler) blobHead(w http.ResponseWriter, r *http.Request, up, repository, dgst string) {
	size, result, err := h.cache.BlobSize(r.Context(), up, repository, dgst)
	if err != nil {
		h.fail(w, r, "blob", err)
		return
	}
	h.answered("blob", result, up+"/"+repository+"@"+dgst)
	blobHeaders(w, dgst, result)
	// ServeContent works out Content-Length and ranges from the size; for a HEAD it reads nothing.
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(noContent{}, 0, size))
}

// blobHeaders are a blob answer's headers, for GET and HEAD alike.
func blobHeaders(w http.ResponseWriter, dgst string, result cache.Result) {
	setResult(w, result)
	immutable(w, dgst)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "max-age=31536000, immutable")
}

// noContent stands in for a blob's bytes where none are read (a HEAD).
type noContent struct{}

func (noContent) ReadAt([]byte, int64) (int, error) { return 0, io.ErrUnexpectedEOF }

func (h *Handler) tags(w http.ResponseWriter, r *http.Request, up, repository, clientName string) {
	d, err := h.cache.Tags(r.Context(), up, repository, upstreamQuery(r))
	if err != nil {
		h.fail(w, r, "tags", err)
		return
	}
	if link := d.Header["Link"]; link != "" {
		d.Header["Link"] = rewriteLink(link, clientName, r.URL.Query().Get("ns"))
	}
	d.Body = renameTagList(d.Body, clientName)
	h.document(w, r, "tags", d)
}

// renameTagList puts the repository name the client asked for (with its upstream prefix, say) into a tag
// list's "name", where the upstream wrote its own. A body that is not a tag list is left as it is.
func renameTagList(body []byte, name string) []byte {
	var list struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if json.Unmarshal(body, &list) != nil || list.Name == name {
		return body
	}
	list.Name = name
	out, err := json.Marshal(list)
	if err != nil {
		return body
	}
	return out
}

func (h *Handler) referrers(w http.ResponseWriter, r *http.Request, up, repository, dgst string) {
	d, err := h.cache.Referrers(r.Context(), up, repository, dgst, upstreamQuery(r))
	if err != nil {
		h.fail(w, r, "referrers", err)
		return
	}
	h.document(w, r, "referrers", d)
}

func (h *Handler) document(w http.ResponseWriter, r *http.Request, api string, d *cache.Document) {
	h.answered(api, d.Result, r.URL.Path)
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

// countingWriter counts body bytes while keeping ReadFrom, so files still go out with sendfile.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, src)
	c.n += n
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
