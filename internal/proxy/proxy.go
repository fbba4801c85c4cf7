// Package proxy is imagecache's intercepting HTTPS proxy, for clients that have proxy settings but no
// registry-mirror setting (kapp-controller, CI jobs with HTTPS_PROXY, the Docker daemon's proxy).
//
// A CONNECT to a configured upstream's host is answered by imagecache itself: the proxy terminates TLS
// with a certificate for that host signed by imagecache's CA and hands the requests inside to the cache's
// registry handler, addressed to that upstream, so they get the same cache, policies and headers as the
// mirror. A CONNECT to any other host is refused (403), or tunnelled untouched with Passthrough, which
// still never reaches imagecache's own machine (passthrough.go).
package proxy

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Options configure a Proxy.
type Options struct {
	CA        *CA
	Upstreams []Upstream
	// Registry serves the OCI API (/v2/...) for intercepted requests, rewritten to address the upstream
	// by path prefix (/v2/<upstream name>/<repository>/...).
	Registry http.Handler
	// Passthrough tunnels CONNECTs (and forwards plain requests) to hosts that are not upstreams, except
	// to imagecache's own listeners through a local address, link-local and multicast: see passthrough.go.
	Passthrough bool
	// OwnPorts are the ports of imagecache's own listeners (the registry and admin API, this proxy), which
	// passthrough never reaches on loopback, unspecified addresses or localhost.
	OwnPorts []string
	// Username and Password, when Username is set, are the Basic credentials clients must send.
	Username, Password string
	Log                *slog.Logger
	// DialTimeout bounds connecting to a passthrough host; 0 means 10s.
	DialTimeout time.Duration
}

// Proxy is an http.Handler for the proxy listener; Serve runs it.
type Proxy struct {
	o       Options
	hosts   *hostTable
	outer   *http.Server
	inner   *http.Server
	innerLn *chanListener
	// forwarder, lookup and dial serve passthrough; tests replace lookup and dial.
	forwarder *httputil.ReverseProxy
	lookup    func(ctx context.Context, network, host string) ([]netip.Addr, error)
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

const handshakeTimeout = 10 * time.Second

// New builds a Proxy.
func New(o Options) (*Proxy, error) {
	if o.CA == nil || o.Registry == nil {
		return nil, errors.New("proxy: a CA and a registry handler are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	hosts, err := newHostTable(o.Upstreams)
	if err != nil {
		return nil, err
	}
	p := &Proxy{o: o, hosts: hosts, innerLn: newChanListener(), tunnels: map[net.Conn]struct{}{}}
	p.lookup = net.DefaultResolver.LookupNetIP
	p.dial = (&net.Dialer{Timeout: o.DialTimeout}).DialContext
	errLog := slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug)
	p.outer = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: errLog}
	p.inner = &http.Server{
		Handler:           http.HandlerFunc(p.intercepted),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := c.(*interceptedConn); ok {
				return context.WithValue(ctx, targetKey{}, ic.target)
			}
			return ctx
		},
	}
	p.forwarder = p.newForwarder(errLog)
	return p, nil
}

// Serve accepts proxy clients on ln until Shutdown.
func (p *Proxy) Serve(ln net.Listener) error {
	go func() { _ = p.inner.Serve(p.innerLn) }()
	err := p.outer.Serve(&screenListener{Listener: ln, log: p.o.Log})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, lets intercepted requests in progress finish until ctx ends, and closes
// passthrough tunnels.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	return errors.Join(p.outer.Shutdown(ctx), p.inner.Shutdown(ctx))
}

// ServeHTTP handles what clients send to the proxy port: CONNECT, or absolute-form plain http requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Host == "" || !r.URL.IsAbs() {
		p.refuse(w, r, http.StatusBadRequest, "this port is imagecache's HTTP proxy: send CONNECT host:port or an absolute http:// URL "+
			"(point HTTPS_PROXY/httpsProxy at it); the registry API itself is served on imagecache's main listen address")
		return
	}
	if !p.authorized(w, r) {
		return
	}
	if r.URL.Scheme != "http" {
		p.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("scheme %q cannot be proxied as a plain request; https goes through CONNECT", r.URL.Scheme))
		return
	}
	host, port := splitHostPort(r.URL.Host)
	if port == "" {
		port = "80"
	}
	tgt, known := p.hosts.lookup(host, port, "80")
	switch {
	case tgt != nil:
		p.serveRegistry(w, r, tgt)
	case p.o.Passthrough:
		p.forward(w, r)
	case known:
		p.refuse(w, r, http.StatusForbidden, p.wrongPort(host, port, "80"))
	default:
		p.refuse(w, r, http.StatusForbidden, p.notUpstream(host))
	}
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	// Go parses "CONNECT host:port" into URL.Host; a path, or nothing, is not a CONNECT we understand.
	if r.URL.Path != "" || r.URL.Host == "" {
		p.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("malformed CONNECT %q: want CONNECT host:port", r.RequestURI))
		return
	}
	host, port, err := parseAuthority(r.URL.Host)
	if err != nil {
		p.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("malformed CONNECT: %v; want CONNECT host:port", err))
		return
	}
	if !p.authorized(w, r) {
		return
	}
	tgt, known := p.hosts.lookup(host, port, "443")
	switch {
	case tgt != nil:
		p.intercept(w, r, tgt)
	case p.o.Passthrough:
		// An upstream's host on another port is another service: only 443 and the upstream's own
		// port carry registry traffic, and those are always intercepted.
		p.tunnel(w, r, net.JoinHostPort(host, port))
	case known:
		p.refuse(w, r, http.StatusForbidden, p.wrongPort(host, port, "443"))
	default:
		p.refuse(w, r, http.StatusForbidden, p.notUpstream(host))
	}
}

func (p *Proxy) wrongPort(host, port, defaultPort string) string {
	return fmt.Sprintf("%s is a configured upstream, but imagecache only intercepts it on port %s, not %s; "+
		"fix the registry reference, add the host:port to the upstream's aliases, or set proxy.passthrough: true to tunnel it", host, p.hosts.portList(host, defaultPort), port)
}

func (p *Proxy) notUpstream(host string) string {
	return fmt.Sprintf("%s is not a configured upstream, and this proxy only serves the registries imagecache mirrors (%s); "+
		"add the registry to upstreams, add the host to the client's noProxy/NO_PROXY, or set proxy.passthrough: true to tunnel other hosts",
		host, p.hosts.names())
}

// refuse answers with a plain-text reason and logs it. A refused request never reaches the cache.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	p.o.Log.Warn("proxy: refused", "status", status, "method", r.Method, "target", r.RequestURI, "remote", r.RemoteAddr, "reason", reason)
	w.Header().Set("Connection", "close")
	http.Error(w, "imagecache proxy: "+reason, status)
}

// authorized checks Basic proxy credentials when they are configured, answering 407 when they are not good.
func (p *Proxy) authorized(w http.ResponseWriter, r *http.Request) bool {
	if p.o.Username == "" {
		return true
	}
	user, pass, ok := parseBasic(r.Header.Get("Proxy-Authorization"))
	reason := "proxy credentials required (Proxy-Authorization: Basic); put them in the proxy URL, e.g. http://user:password@imagecache:3128"
	if ok {
		// Both compared, always: the time taken says nothing about which one was wrong.
		u := subtle.ConstantTimeCompare([]byte(user), []byte(p.o.Username))
		pw := subtle.ConstantTimeCompare([]byte(pass), []byte(p.o.Password))
		if u&pw == 1 {
			return true
		}
		reason = "wrong proxy credentials: check the user and password in the client's proxy URL against proxy.auth"
	}
	w.Header().Set("Proxy-Authenticate", `Basic realm="imagecache"`)
	p.refuse(w, r, http.StatusProxyAuthRequired, reason)
	return false
}

func parseBasic(h string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// hijack takes the client connection over and answers the CONNECT with 200. The returned conn reads what
// the client already sent after the CONNECT (a ClientHello may come in the same packet).
func (p *Proxy) hijack(w http.ResponseWriter, r *http.Request) (net.Conn, bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.refuse(w, r, http.StatusInternalServerError, "the connection cannot be taken over (HTTP/2 CONNECT is not supported); use HTTP/1.1")
		return nil, false
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		p.o.Log.Warn("proxy: hijack failed", "remote", r.RemoteAddr, "error", err)
		return nil, false
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err == nil {
		err = rw.Flush()
	}
	if err != nil {
		conn.Close()
		return nil, false
	}
	if rw.Reader.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: rw.Reader}, true
	}
	return conn, true
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// intercept terminates TLS for tgt with a leaf from imagecache's CA and hands the connection to the
// inner server.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, tgt *target) {
	conn, ok := p.hijack(w, r)
	if !ok {
		return
	}
	log := p.o.Log.With("host", r.URL.Host, "upstream", tgt.upstream, "remote", r.RemoteAddr)
	var sniErr error
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if sni := strings.TrimSuffix(hello.ServerName, "."); sni != "" && !strings.EqualFold(sni, tgt.host) {
				sniErr = fmt.Errorf("the TLS client hello asks for %q, but the CONNECT was for %q; refusing to present a certificate for another host", sni, tgt.host)
				// No certificate and no error: crypto/tls then answers with the alert
				// unrecognized_name, which says what is wrong; an error would be internal_error.
				return nil, nil
			}
			return p.o.CA.Leaf(tgt.host)
		},
	}
	tc := tls.Server(conn, cfg)
	ctx, cancel := context.WithTimeout(r.Context(), handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		switch {
		case sniErr != nil:
			log.Warn("proxy: refused", "reason", sniErr.Error())
		case strings.Contains(err.Error(), "bad certificate") || strings.Contains(err.Error(), "unknown certificate authority"):
			log.Warn("proxy: the client rejected imagecache's certificate: give it imagecache's CA (`imagecache ca print`: kapp-controller caCerts, SSL_CERT_FILE, the system trust store)", "error", err)
		default:
			log.Warn("proxy: TLS handshake with the client failed", "error", err)
		}
		tc.Close()
		return
	}
	log.Debug("proxy: intercepting")
	if !p.innerLn.deliver(&interceptedConn{Conn: tc, target: tgt}) {
		tc.Close()
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.tunnels, c)
	}
}

// intercepted serves a request that arrived inside an intercepted TLS connection.
func (p *Proxy) intercepted(w http.ResponseWriter, r *http.Request) {
	tgt, _ := r.Context().Value(targetKey{}).(*target)
	if tgt == nil {
		http.Error(w, "imagecache proxy: internal error: no target for this connection", http.StatusInternalServerError)
		return
	}
	p.serveRegistry(w, r, tgt)
}

// serveRegistry hands a request for an upstream's host to the registry handler, addressed to that
// upstream by path prefix: /v2/<repository>/... becomes /v2/<upstream>/<repository>/.... The prefix wins
// over anything else in the router, so a repository whose first component happens to name another
// upstream still goes to the host the client asked.
func (p *Proxy) serveRegistry(w http.ResponseWriter, r *http.Request, tgt *target) {
	if r.URL.Path != "/v2" && !strings.HasPrefix(r.URL.Path, "/v2/") {
		p.o.Log.Warn("proxy: refused", "status", http.StatusNotFound, "method", r.Method, "host", tgt.host, "path", r.URL.Path, "remote", r.RemoteAddr,
			"reason", "not a registry API path")
		http.Error(w, fmt.Sprintf("imagecache proxy: only the registry API (/v2/) of %s is served through the cache, not %s", tgt.host, r.URL.Path), http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		p.refuseWrite(w, r, tgt)
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del("Proxy-Authorization")
	r2.URL.Scheme, r2.URL.Host, r2.Host = "", "", tgt.host
	// The CONNECT host chose the upstream, not ?ns=: without it the registry does not echo another
	// upstream's name in OCI-Namespace.
	if q := r2.URL.Query(); q.Has("ns") {
		q.Del("ns")
		r2.URL.RawQuery = q.Encode()
	}
	prefix := "/v2/" + tgt.upstream + "/"
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v2/"); ok && rest != "" {
		r2.URL.Path = prefix + rest
		if raw, ok := strings.CutPrefix(r.URL.RawPath, "/v2/"); ok {
			r2.URL.RawPath = prefix + raw
		} else {
			r2.URL.RawPath = ""
		}
	}
	r2.RequestURI = r2.URL.RequestURI()
	p.o.Registry.ServeHTTP(&linkWriter{ResponseWriter: w, prefix: prefix}, r2)
}

// refuseWrite answers a push, delete or other write to an intercepted upstream as the registry does
// (405 UNSUPPORTED), but with advice that fits a client that reaches the registry through this proxy:
// it cannot push until it goes to the registry directly.
func (p *Proxy) refuseWrite(w http.ResponseWriter, r *http.Request, tgt *target) {
	msg := fmt.Sprintf("imagecache is a read-only pull-through cache and answers %s for clients that use it as their HTTPS proxy: "+
		"push, delete and other writes are not supported through it; to push, go to the registry directly: "+
		"add %s to the client's NO_PROXY (noProxy), or push from a client without the proxy setting", tgt.host, tgt.host)
	p.o.Log.Warn("proxy: refused", "status", http.StatusMethodNotAllowed, "method", r.Method, "host", tgt.host, "path", r.URL.Path,
		"remote", r.RemoteAddr, "reason", "writes are not supported through the cache")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusMethodNotAllowed)
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewEncoder(w).Encode(map[string][]detail{"errors": {{Code: "UNSUPPORTED", Message: msg}}})
}

// linkWriter takes the upstream prefix the proxy added back out of a pagination Link header, so that the
// client, which follows it on the same host, is not addressed twice.
type linkWriter struct {
	http.ResponseWriter
	prefix string
	fixed  bool
}

func (l *linkWriter) fix() {
	if l.fixed {
		return
	}
	l.fixed = true
	h := l.ResponseWriter.Header()
	for i, v := range h.Values("Link") {
		h["Link"][i] = strings.Replace(v, "<"+l.prefix, "</v2/", 1)
	}
}

func (l *linkWriter) WriteHeader(code int) {
	l.fix()
	l.ResponseWriter.WriteHeader(code)
}

func (l *linkWriter) Write(b []byte) (int, error) {
	l.fix()
	return l.ResponseWriter.Write(b)
}

func (l *linkWriter) ReadFrom(src io.Reader) (int64, error) {
	l.fix()
	if rf, ok := l.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{l.ResponseWriter}, src)
}

func (l *linkWriter) Flush() {
	l.fix()
	if f, ok := l.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (l *linkWriter) Unwrap() http.ResponseWriter { return l.ResponseWriter }

type targetKey struct{}

type interceptedConn struct {
	net.Conn
	target *target
}

// chanListener hands intercepted connections to the inner http.Server.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
