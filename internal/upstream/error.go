package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Error is a failed upstream request, with enough detail for the cache to decide whether a stale answer may
// be served and for the client to be told what happened.
type Error struct {
	Upstream   string
	Op         string        // what was being done, e.g. "HEAD manifest library/nginx:1.27"
	Status     int           // upstream HTTP status; 0 when no answer arrived
	Timeout    time.Duration // set when the upstream did not answer within it
	RetryAfter string        // the upstream's Retry-After, passed on with a 429
	Code       string        // the upstream's OCI error code, when it sent one
	Message    string        // the upstream's OCI error message, when it sent one
	// SilentSince is set when the request was not sent: the upstream has left requests unanswered since then.
	SilentSince time.Time
	Err         error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on upstream %s: ", e.Op, e.Upstream)
	switch {
	case !e.SilentSince.IsZero():
		b.WriteString(e.Err.Error())
	case e.Timeout > 0:
		fmt.Fprintf(&b, "no answer within %s", e.Timeout)
	case e.Status != 0:
		fmt.Fprintf(&b, "status %d %s", e.Status, http.StatusText(e.Status))
		if e.Message != "" {
			fmt.Fprintf(&b, " (%s)", e.Message)
		}
	case e.Err != nil:
		b.WriteString(withoutSchemeRefusals(e.Err.Error()))
	}
	return b.String()
}

// withoutSchemeRefusals drops, from go-containerregistry's "https error; http error" ping message, the half
// that pinnedScheme refused on purpose, so the message names only the real failure.
func withoutSchemeRefusals(msg string) string {
	parts := strings.Split(msg, "; ")
	kept := parts[:0]
	for _, p := range parts {
		if !strings.Contains(p, "not using http") {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return msg
	}
	return strings.Join(kept, "; ")
}

func (e *Error) Unwrap() error { return e.Err }

// Unavailable reports whether the upstream is down, overloaded or rate limiting (as opposed to answering
// authoritatively): the cases in which a stale answer may be served instead.
func (e *Error) Unavailable() bool {
	if errors.Is(e.Err, ErrManifestTooLarge) {
		return false
	}
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// IsUnavailable reports whether err is an upstream Error for which the upstream counts as unavailable.
func IsUnavailable(err error) bool {
	var ue *Error
	return errors.As(err, &ue) && ue.Unavailable()
}

// StatusOf returns the upstream status of err, or 0.
func StatusOf(err error) int {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Status
	}
	return 0
}

// fromResponse makes an Error of a non-success answer, keeping the upstream's OCI error message.
func fromResponse(op, upstream string, resp *http.Response) *Error {
	e := &Error{Upstream: upstream, Op: op, Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	var body struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &body) == nil && len(body.Errors) > 0 {
		e.Code, e.Message = body.Errors[0].Code, body.Errors[0].Message
	}
	return e
}

// fromTransport turns an error from the auth handshake or the round trip into an Error.
func fromTransport(op, upstream string, err error, timedOut bool, timeout time.Duration) *Error {
	e := &Error{Upstream: upstream, Op: op, Err: err}
	if timedOut {
		e.Timeout = timeout
	}
	var te *transport.Error
	if errors.As(err, &te) {
		e.Status = te.StatusCode
		if len(te.Errors) > 0 {
			e.Code, e.Message = string(te.Errors[0].Code), te.Errors[0].Message
		}
	}
	return e
}
