// Package faultproxy is an HTTP reverse proxy that sits between a client under test and a real upstream
// (a registry or file server), counts what passes through and injects faults on demand: refused
// connections, delays, error statuses, truncated, corrupted or stalled bodies. It is for tests only.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Request is one entry of the proxy's log.
type Request struct {
	Time   time.Time
	Method string
	Path   string // path and query as the client sent them
	Kind   string // see KindOf
	Status int    // status the proxy answered with; 0 if the connection was cut before headers
	Fault  string // the fault applied, "" if none

	seq uint64
}

// Proxy forwards to one upstream. The zero value is not usable; call New.
type Proxy struct {
	target *url.URL
	rp     *httputil.ReverseProxy
	addr   string // fixed at New so that Resume re-listens on the same port

	mu     sync.Mutex
	srv    *http.Server
	closed bool
	counts map[[2]string]int
	total  int
	log    []Request
	seq    uint64
	rules  map[effect]rule
}

// Option changes how a Proxy talks to its upstream.
type Option func(*Proxy)

// WithTransport sets the transport to the upstream, e.g. one that trusts a test CA.
func WithTransport(rt http.RoundTripper) Option {
	return func(p *Proxy) { p.rp.Transport = rt }
}

// New starts a proxy on a free port of 127.0.0.1 in front of upstream (e.g. "http://127.0.0.1:5000").
func New(upstream string, opts ...Option) (*Proxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: parse upstream %q: %w", upstream, err)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Without this the transport would ask for gzip and decode it, dropping Content-Length: the client
	// under test must see the upstream's bytes and headers unchanged.
	t.DisableCompression = true
	p := &Proxy{
		target: target,
		counts: map[[2]string]int{},
		rules:  map[effect]rule{},
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// Keep the client's Host so that the upstream builds Location headers (uploads, redirects)
			// that point back at the proxy.
			r.Out.Host = r.In.Host
		},
		Transport: t,
		// Flush every write: a truncated or stalled body must reach the client up to the cut, not sit
		// in a buffer.
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	for _, o := range opts {
		o(p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

// Addr is host:port of the proxy, e.g. for a registry reference.
func (p *Proxy) Addr() string { return p.addr }

// URL is the proxy's base URL, e.g. for an upstream url in a config.
func (p *Proxy) URL() string { return "http://" + p.addr }

func (p *Proxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0)}
	p.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

// Refuse closes the listener and every open connection, as if the upstream process had died: new
// connections are refused and requests in flight are cut.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		_ = p.srv.Close()
		p.srv = nil
	}
}

// Resume listens again on the same port after Refuse.
func (p *Proxy) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: resume after close")
	}
	if p.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("faultproxy: listen again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Close stops the proxy for good.
func (p *Proxy) Close() error {
	p.Refuse()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// Count returns how many requests with this method and kind arrived since the last Reset, including
// those answered with a fault. An empty method or kind matches any.
func (p *Proxy) Count(method, kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if method != "" && kind != "" {
		return p.counts[[2]string{method, kind}]
	}
	n := 0
	for k, c := range p.counts {
		if (method == "" || k[0] == method) && (kind == "" || k[1] == kind) {
			n += c
		}
	}
	return n
}

// Total returns how many requests arrived since the last Reset.
func (p *Proxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Requests returns a copy of the request log since the last Reset, oldest first.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.log...)
}

// Reset zeroes the counters and the log (faults stay as they are).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = map[[2]string]int{}
	p.total = 0
	p.log = nil
}

// record counts a request on arrival, so that a test can see a request that is still held by a fault.
// It returns a function that fills in the outcome once the answer is done.
func (p *Proxy) record(r *http.Request, kind string) func(status int, fault string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[[2]string{r.Method, kind}]++
	p.total++
	p.seq++
	seq := p.seq
	p.log = append(p.log, Request{Time: time.Now(), Method: r.Method, Path: r.URL.RequestURI(), Kind: kind, seq: seq})
	return func(status int, fault string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		// Search from the end by sequence number: a Reset may have dropped the entry meanwhile.
		for i := len(p.log) - 1; i >= 0 && p.log[i].seq >= seq; i-- {
			if p.log[i].seq == seq {
				p.log[i].Status, p.log[i].Fault = status, fault
			}
		}
	}
}

// ServeHTTP applies the faults that match the request's kind and forwards the rest.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := KindOf(r.URL.Path)
	done := p.record(r, kind)
	rec := &recorder{ResponseWriter: w}
	applied := ""
	// Deferred so that the log is completed even when the reverse proxy aborts the connection by panicking.
	defer func() { done(rec.status, applied) }()

	rules := p.matching(kind)
	if d, ok := rules[effectDelay]; ok {
		applied = "delay"
		select {
		case <-time.After(d.delay):
		case <-r.Context().Done():
			return
		}
	}
	if s, ok := rules[effectStatus]; ok {
		applied = joinFault(applied, "status")
		writeStatus(rec, r, s)
		return
	}
	if b, ok := bodyRule(rules); ok {
		applied = joinFault(applied, b.name())
		r = r.WithContext(context.WithValue(r.Context(), bodyRuleKey{}, b))
	}
	p.rp.ServeHTTP(rec, r)
}

func joinFault(a, b string) string {
	if a == "" {
		return b
	}
	return a + "+" + b
}

// recorder remembers the status for the log. Unwrap lets the reverse proxy reach the real writer's Flush.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
