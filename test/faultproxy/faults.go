package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// effect is one kind of fault. Faults of different effects combine (a delay before a 503, a delay before a
// truncated body); setting an effect again replaces its earlier setting.
type effect int

const (
	effectDelay effect = iota
	effectStatus
	effectTruncate
	effectCorrupt
	effectStall
)

type rule struct {
	effect effect
	kinds  []string // empty: every kind
	delay  time.Duration
	code   int
	header http.Header
	n      int64
}

func (r rule) matches(kind string) bool {
	return len(r.kinds) == 0 || slices.Contains(r.kinds, kind)
}

func (r rule) name() string {
	return [...]string{"delay", "status", "truncate", "corrupt", "stall"}[r.effect]
}

func (p *Proxy) set(r rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules[r.effect] = r
}

func (p *Proxy) matching(kind string) map[effect]rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[effect]rule{}
	for e, r := range p.rules {
		if r.matches(kind) {
			m[e] = r
		}
	}
	return m
}

// Delay holds matching requests for d before they are forwarded (so before any header is answered).
// No kinds means every request.
func (p *Proxy) Delay(d time.Duration, kinds ...string) {
	p.set(rule{effect: effectDelay, kinds: kinds, delay: d})
}

// Status answers matching requests with code and header without contacting the upstream, e.g.
// Status(429, http.Header{"Retry-After": {"7"}}) or Status(503, nil). The body is OCI error JSON.
func (p *Proxy) Status(code int, header http.Header, kinds ...string) {
	p.set(rule{effect: effectStatus, kinds: kinds, code: code, header: header.Clone()})
}

// Truncate forwards the upstream's status and headers, Content-Length included, but cuts the body after n
// bytes and closes the connection, so the client sees a short read.
func (p *Proxy) Truncate(n int64, kinds ...string) {
	p.set(rule{effect: effectTruncate, kinds: kinds, n: n})
}

// Corrupt forwards everything but flips the bits of one body byte (the last one when the length is known,
// so a client only finds out at the very end), keeping the length.
func (p *Proxy) Corrupt(kinds ...string) {
	p.set(rule{effect: effectCorrupt, kinds: kinds})
}

// Stall forwards status, headers and the first after bytes of the body, then sends nothing more until the
// client goes away (or the proxy is refused or closed).
func (p *Proxy) Stall(after int64, kinds ...string) {
	p.set(rule{effect: effectStall, kinds: kinds, n: after})
}

// Clear removes every fault except Refuse, which Resume undoes.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = map[effect]rule{}
}

func writeStatus(w http.ResponseWriter, r *http.Request, s rule) {
	for k, v := range s.header {
		w.Header()[k] = v
	}
	code := "UNKNOWN"
	switch s.code {
	case http.StatusTooManyRequests:
		code = "TOOMANYREQUESTS"
	case http.StatusUnauthorized:
		code = "UNAUTHORIZED"
	case http.StatusServiceUnavailable:
		code = "UNAVAILABLE"
	}
	body := fmt.Sprintf(`{"errors":[{"code":%q,"message":"faultproxy: injected %d"}]}`+"\n", code, s.code)
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(s.code)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// bodyRule picks the one body fault to apply; they do not combine, and the more drastic one wins.
func bodyRule(rules map[effect]rule) (rule, bool) {
	for _, e := range []effect{effectTruncate, effectStall, effectCorrupt} {
		if r, ok := rules[e]; ok {
			return r, true
		}
	}
	return rule{}, false
}

type bodyRuleKey struct{}

// modifyResponse wraps the upstream body in the fault chosen in ServeHTTP. A read error from the wrapped
// body makes the ReverseProxy abort the connection (http.ErrAbortHandler), which is the cut we want.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	b, ok := resp.Request.Context().Value(bodyRuleKey{}).(rule)
	if !ok {
		return nil
	}
	ctx := resp.Request.Context()
	switch b.effect {
	case effectTruncate:
		resp.Body = &cutBody{ReadCloser: resp.Body, left: b.n, ctx: nil}
	case effectStall:
		resp.Body = &cutBody{ReadCloser: resp.Body, left: b.n, ctx: ctx}
	case effectCorrupt:
		at := int64(0)
		if resp.ContentLength > 0 {
			at = resp.ContentLength - 1
		}
		resp.Body = &flipBody{ReadCloser: resp.Body, at: at}
	}
	return nil
}

var errCut = errors.New("faultproxy: body cut")

// cutBody passes left bytes, then fails (truncate) or first waits for ctx to end (stall).
type cutBody struct {
	io.ReadCloser
	left int64
	ctx  context.Context
}

func (c *cutBody) Read(b []byte) (int, error) {
	if c.left <= 0 {
		// A body that ends right at the cut is complete: let it end normally.
		var probe [1]byte
		if n, err := c.ReadCloser.Read(probe[:]); n == 0 && err == io.EOF {
			return 0, io.EOF
		}
		if c.ctx != nil {
			<-c.ctx.Done()
		}
		return 0, errCut
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.ReadCloser.Read(b)
	c.left -= int64(n)
	return n, err
}

// flipBody inverts the byte at offset at.
type flipBody struct {
	io.ReadCloser
	off, at int64
}

func (f *flipBody) Read(b []byte) (int, error) {
	n, err := f.ReadCloser.Read(b)
	if f.at >= f.off && f.at < f.off+int64(n) {
		b[f.at-f.off] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}
