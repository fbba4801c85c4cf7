package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// A blackholed upstream (packets dropped, a process stopped with SIGSTOP, a hung load balancer) answers
// nothing: every request waits its whole upstreamTimeout before the cache can serve a stale copy or an
// error. When many different tags are checked at once, each of them waits.
//
// silence remembers that an upstream left a request unanswered. From then on, requests fail at once with
// the same kind of error (so a cached copy is served STALE without a wait and an uncached one fails fast),
// while one background probe asks the upstream's /v2/ until anything answers. An upstream that refuses
// connections or answers with errors is not silent: those answers are fast already and are passed on.
//
// The probe runs only while requests keep coming: after a minute without any, silence is forgotten and the
// next request asks the upstream itself.
type silence struct {
	mu      sync.Mutex
	since   time.Time     // zero: the upstream answers
	timeout time.Duration // the wait it did not answer within
	asked   time.Time     // the last request that was failed at once
	probing bool

	probeEvery  time.Duration // the pause between probes
	forgetAfter time.Duration // probing ends when nothing asked for the upstream for this long
}

func newSilence() silence { return silence{probeEvery: time.Second, forgetAfter: time.Minute} }

// ErrSilent is wrapped in the Error of a request that was not sent because the upstream is silent.
var ErrSilent = errors.New("the upstream is not answering")

// Silent reports whether requests for the upstream currently fail at once because it is not answering.
func (c *Client) Silent() bool {
	c.silence.mu.Lock()
	defer c.silence.mu.Unlock()
	return !c.silence.since.IsZero()
}

// silent returns the error for a request that is not sent because the upstream is silent, or nil.
func (c *Client) silent(op string) *Error {
	s := &c.silence
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return nil
	}
	s.asked = time.Now()
	return &Error{Upstream: c.name, Op: op, Timeout: s.timeout, SilentSince: s.since,
		Err: fmt.Errorf("%w: it gave no answer within %s at %s; imagecache asks again as soon as a probe of its /v2/ is answered",
			ErrSilent, s.timeout, s.since.Format(time.TimeOnly))}
}

// unanswered records that a request got no answer within timeout, and starts probing.
func (c *Client) unanswered(timeout time.Duration) {
	s := &c.silence
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		s.since, s.timeout, s.asked = time.Now(), timeout, time.Now()
		c.log.Warn("upstream is not answering: requests fail at once (cached tags are served stale) until it answers a probe",
			"upstream", c.name, "timeout", timeout)
	}
	if !s.probing {
		s.probing = true
		go c.probe()
	}
}

// probe asks the upstream's /v2/ until anything answers, then lets requests through again.
func (c *Client) probe() {
	u := url.URL{Scheme: c.scheme, Host: c.reg.RegistryStr(), Path: "/v2/"}
	for {
		s := &c.silence
		s.mu.Lock()
		timeout, since, pause := s.timeout, s.since, s.probeEvery
		if time.Since(s.asked) > s.forgetAfter {
			s.since, s.probing = time.Time{}, false
			s.mu.Unlock()
			c.log.Info("upstream not needed for a while: no longer probed; the next request asks it", "upstream", c.name)
			return
		}
		s.mu.Unlock()
		if c.answers(u.String(), timeout) {
			s.mu.Lock()
			s.since, s.probing = time.Time{}, false
			s.mu.Unlock()
			c.log.Info("upstream answers again", "upstream", c.name, "silentFor", time.Since(since).Round(time.Millisecond))
			return
		}
		time.Sleep(pause)
	}
}

// answers reports whether the upstream answers a GET of u within timeout. Any answer counts, an error
// status or a TLS failure too: only silence keeps requests from being sent.
func (c *Client) answers(u string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return true
	}
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		return true
	}
	return ctx.Err() == nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &te) && te.Timeout())
}
