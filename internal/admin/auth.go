package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"

	"imagecache.io/imagecache/internal/config"
)

// protect guards the whole admin API. With admin.token set, every request must carry it as a bearer token.
// Without one the API answers only when the server listens on a loopback address: on any other address
// anyone who can reach the OCI port could purge the cache, so it is never open by default there.
func protect(cfg *config.Config, next http.Handler) http.Handler {
	var token, listen string
	if cfg != nil {
		token, listen = cfg.Admin.Token, cfg.Listen
	}
	want := sha256.Sum256([]byte(token))
	loopback := isLoopback(listen)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case token != "":
			got, ok := bearer(r)
			// Hashing first makes the comparison constant-time in the length too.
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="imagecache admin API"`)
				msg := "the admin API needs the token from the server's admin.token: send Authorization: Bearer <token> (the imagecache CLI: --token or IMAGECACHE_TOKEN)"
				if ok {
					msg = "the admin token is wrong: send the server's admin.token as Authorization: Bearer <token> (the imagecache CLI: --token or IMAGECACHE_TOKEN)"
				}
				writeError(w, http.StatusUnauthorized, msg)
				return
			}
		case !loopback:
			writeError(w, http.StatusForbidden, fmt.Sprintf("the admin API is off: this server listens on %s, which is not a loopback address, and has no admin token; set admin.token (or admin.tokenFile) in its config and send it as Authorization: Bearer <token>", listen))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// isLoopback reports whether a listen address accepts connections from this machine only. An empty host
// (":5000") listens everywhere; a host name other than localhost may resolve to anything.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
