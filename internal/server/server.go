// Package server assembles the HTTP surface (the OCI API, health, metrics) and the access log around it.
package server

import (
	"crypto/rand"
	"encoding/hex"
	"imagecache.io/imagecache/internal/reqlog"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Routes are the handlers the server mounts.
type Routes struct {
	Registry http.Handler                          // /v2/
	Files    http.Handler                          // /files/
	API      http.Handler                          // /api/v1/
	UI       http.Handler                          // /ui (nil: not served)
	Metrics  http.Handler                          // /metrics
	Ready    func() (warnings []string, err error) // err: not ready; warnings: ready, but someone should look
}

// Handler builds the mux. When accessLog is set, one line is logged per request.
func Handler(r Routes, log *slog.Logger, accessLog bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		warnings, err := r.Ready()
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
		for _, msg := range warnings {
			io.WriteString(w, "warning: "+msg+"\n")
		}
	})
	mux.Handle("/metrics", r.Metrics)
	mux.Handle("/files/", r.Files)
	mux.Handle("/api/v1/", r.API)
	if r.UI != nil {
		mux.Handle("/ui", r.UI)
		mux.Handle("/ui/", r.UI)
	}
	// /v2 bypasses the mux: ServeMux answers paths with "..", "." or "//" with a redirect to the cleaned
	// path, which would send a client to another repository (or a write to be retried there) instead of
	// telling it that its name is invalid. The registry handler validates every path itself.
	top := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v2" || strings.HasPrefix(req.URL.Path, "/v2/") {
			r.Registry.ServeHTTP(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	})
	return withRequestLog(top, log, accessLog)
}

// withRequestLog gives every request an id (the client's X-Request-Id, or a new one) and logs it.
func withRequestLog(next http.Handler, log *slog.Logger, accessLog bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 64 {
			id = newID()
		}
		w.Header().Set("X-Request-Id", id)
		r = r.WithContext(reqlog.WithID(r.Context(), id))
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		defer func() {
			if !accessLog {
				return
			}
			log.InfoContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
				"status", rec.status, "bytes", rec.bytes, "cache", w.Header().Get("X-Cache"),
				"ms", float64(time.Since(start).Microseconds())/1000, "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(rec, r)
	})
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// recorder notes the status and size of a response. It keeps ReadFrom so that files still go out with
// sendfile, and Unwrap so http.ResponseController reaches the real writer.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(r.ResponseWriter, src)
	r.bytes += n
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
