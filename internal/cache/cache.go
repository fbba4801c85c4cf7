// Package cache is the heart of imagecache: for each request it applies the pull policy, answers from the
// store when it may, fetches from the upstream when it must (once per object, however many clients ask),
// and falls back to the last known good answer when the upstream fails.
package cache

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// Result says how an answer was produced; it is sent to clients as X-Cache.
type Result string

const (
	Hit         Result = "HIT"         // from the cache with no upstream contact
	Miss        Result = "MISS"        // fetched from the upstream
	Revalidated Result = "REVALIDATED" // the upstream confirmed the cached copy is current
	Stale       Result = "STALE"       // a check was needed, failed, and the last known good copy was served
)

// Cache answers manifest, blob, tag list and referrers requests for the configured upstreams.
type Cache struct {
	store     *store.Store
	upstreams map[string]*upstream.Client
	rules     policy.Rules
	log       *slog.Logger
	now       func() time.Time

	manifests singleflight.Group // one upstream check or fetch per manifest reference at a time

	mu        sync.Mutex
	downloads map[string]*download // blob digest -> the one download in progress

	// MaxObjectSize: blobs larger than this stream through to their clients and are not stored (0: no limit).
	MaxObjectSize int64
	// StorageFull is told how many bytes a write that failed for lack of space needed (to start eviction);
	// it must not block.
	StorageFull func(need int64)
	// MakeRoom is asked, before a blob download is accepted, to make room for its size; an error means
	// there is no room even after eviction.
	MakeRoom func(need int64) error

	inFlight atomic.Int64 // announced bytes of downloads that will be stored
}

// InFlightBytes is the announced size of the downloads in progress that will be stored.
func (c *Cache) InFlightBytes() int64 { return c.inFlight.Load() }

// noSpace reports a full disk (or quota) and asks for need bytes to be freed.
func (c *Cache) noSpace(err error, need int64) bool {
	if !isNoSpace(err) {
		return false
	}
	if c.StorageFull != nil {
		c.StorageFull(max(need, 1))
	}
	return true
}

// isNoSpace reports whether err is a full filesystem or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// New makes a Cache over s that fetches from the given upstream clients, keyed by upstream name.
func New(s *store.Store, upstreams map[string]*upstream.Client, rules policy.Rules, log *slog.Logger) *Cache {
	return &Cache{
		store: s, upstreams: upstreams, rules: rules, log: log, now: time.Now,
		downloads: map[string]*download{},
	}
}

// Error is a failure to answer, carrying the HTTP status and OCI error code the client should get.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter string
	Err        error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

func (c *Cache) client(name string) (*upstream.Client, error) {
	if u, ok := c.upstreams[name]; ok {
		return u, nil
	}
	return nil, &Error{Status: http.StatusNotFound, Code: "NAME_UNKNOWN", Message: fmt.Sprintf("no upstream named %q is configured", name)}
}

// forbidden is the answer when the policy says Never and nothing is cached.
func forbidden(what, upstreamName string) error {
	return &Error{Status: http.StatusNotFound, Code: unknownCode(what),
		Message: fmt.Sprintf("%s is not cached, and the pull policy Never forbids fetching it from upstream %s", what, upstreamName)}
}

func unknownCode(what string) string {
	if strings.HasPrefix(what, "blob") {
		return "BLOB_UNKNOWN"
	}
	return "MANIFEST_UNKNOWN"
}

// upstreamFailure turns an upstream error into what the client should see when nothing cached can answer.
func upstreamFailure(what string, err error) error {
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		return &Error{Status: http.StatusBadGateway, Code: "UNAVAILABLE", Message: fmt.Sprintf("%s: %v", what, err), Err: err}
	}
	e := &Error{Err: err, Message: fmt.Sprintf("%s: %v", what, err)}
	switch {
	case ue.Timeout > 0:
		e.Status, e.Code = http.StatusGatewayTimeout, "UNAVAILABLE"
		e.Message += "; nothing is cached for it, try again when the upstream is reachable"
	case ue.Status == 0 && isCertificateError(err):
		e.Status, e.Code = http.StatusBadGateway, "UNAVAILABLE"
		e.Message += "; the upstream's TLS certificate is not trusted: set caFile (or insecureSkipVerify) for upstream " + ue.Upstream
	case ue.Status == 0:
		e.Status, e.Code = http.StatusBadGateway, "UNAVAILABLE"
		e.Message += "; nothing is cached for it, try again when the upstream is reachable"
	case ue.Status == http.StatusTooManyRequests:
		e.Status, e.Code, e.RetryAfter = http.StatusTooManyRequests, "TOOMANYREQUESTS", ue.RetryAfter
	case ue.Status == http.StatusNotFound:
		e.Status, e.Code = http.StatusNotFound, notFoundCode(ue.Code, what)
	case ue.Status == http.StatusBadRequest:
		// The upstream refused what the client asked (a bad page size, say): the client's mistake, not an outage.
		e.Status, e.Code = http.StatusBadRequest, cmp.Or(ue.Code, "UNSUPPORTED")
	case ue.Status == http.StatusUnauthorized || ue.Status == http.StatusForbidden:
		e.Status, e.Code = http.StatusForbidden, "DENIED"
		e.Message += "; check the credentials configured for upstream " + ue.Upstream
	default:
		e.Status, e.Code = http.StatusBadGateway, "UNAVAILABLE"
	}
	return e
}

func isCertificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

func notFoundCode(upstreamCode, what string) string {
	switch upstreamCode {
	case "NAME_UNKNOWN", "MANIFEST_UNKNOWN", "BLOB_UNKNOWN":
		return upstreamCode
	}
	return unknownCode(what)
}

// badUpstreamContent is the answer when the upstream sent something the cache refuses to store.
func badUpstreamContent(what string, err error) error {
	return &Error{Status: http.StatusBadGateway, Code: "UNAVAILABLE", Err: err,
		Message: fmt.Sprintf("%s: the upstream sent invalid content, nothing was stored: %v", what, err)}
}

// DownloadsInFlight is the number of blob downloads in progress.
func (c *Cache) DownloadsInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.downloads)
}
