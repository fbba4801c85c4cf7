package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Passthrough (Options.Passthrough) tunnels CONNECTs and forwards plain http requests to hosts that are
// not upstreams. It never reaches imagecache's own listeners through a local address (the admin API is open
// without a token on a loopback listen address, and must not become reachable for every proxy client), nor
// link-local addresses (a cloud's metadata service, 169.254.169.254) or multicast ones. Other ports on
// loopback stay reachable: passthrough is an explicit choice to tunnel what clients ask for, and on one
// machine (a laptop, a test) the registries it should reach listen there. A host name is resolved once and
// the checked address is what is dialled, so a name that resolves elsewhere the second time (DNS
// rebinding) cannot get around the check.

// refusedTarget is a passthrough target the proxy will not connect to.
type refusedTarget struct {
	host, why string
}

func (e *refusedTarget) Error() string {
	return fmt.Sprintf("passthrough refuses %s: %s; the proxy never connects to imagecache's own listeners or the local link, so that its clients "+
		"cannot reach them (imagecache's admin API among them); if it is a registry imagecache should serve, make it an upstream", e.host, e.why)
}

// refusedAddr says why passthrough must not reach a on port, or "" when it may.
func (p *Proxy) refusedAddr(a netip.Addr, port string) string {
	a = a.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast():
		return "a multicast address"
	case p.ownPort(port) && a.IsLoopback():
		return "a loopback address on port " + port + ", one of imagecache's own"
	case p.ownPort(port) && (a.IsUnspecified() || (a.Is4() && a.As4()[0] == 0)):
		return "an unspecified address (it reaches the local host) on port " + port + ", one of imagecache's own"
	}
	return ""
}

func (p *Proxy) ownPort(port string) bool { return slices.Contains(p.o.OwnPorts, port) }

// resolvePassthrough resolves host once and returns the addresses passthrough may dial on port, or a
// *refusedTarget when the host is, or resolves to, an address it must not reach there.
func (p *Proxy) resolvePassthrough(ctx context.Context, host, port string) ([]netip.Addr, error) {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if p.ownPort(port) && (name == "localhost" || strings.HasSuffix(name, ".localhost")) {
		return nil, &refusedTarget{host: host, why: "localhost names the loopback address, and port " + port + " is one of imagecache's own"}
	}
	if a, err := netip.ParseAddr(name); err == nil {
		if why := p.refusedAddr(a, port); why != "" {
			return nil, &refusedTarget{host: host, why: why}
		}
		return []netip.Addr{a}, nil
	}
	addrs, err := p.lookup(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	for _, a := range addrs {
		// One local address refuses the name: a name that points at both is not a stranger's server.
		if why := p.refusedAddr(a, port); why != "" {
			return nil, &refusedTarget{host: host, why: fmt.Sprintf("it resolves to %s, %s", a, why)}
		}
	}
	return addrs, nil
}

// dialPassthrough connects to addr (host:port) for passthrough, after resolvePassthrough's check.
func (p *Proxy) dialPassthrough(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := p.resolvePassthrough(ctx, host, port)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := p.dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// newForwarder is the reverse proxy that forwards plain http requests to hosts that are not upstreams.
func (p *Proxy) newForwarder(errLog *log.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = "" // the absolute URL's host
		},
		// Never the environment's proxy: that could be this one.
		Transport: &http.Transport{DialContext: p.dialPassthrough, TLSHandshakeTimeout: handshakeTimeout,
			ResponseHeaderTimeout: time.Minute, IdleConnTimeout: time.Minute},
		ErrorLog: errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if refused := (*refusedTarget)(nil); errors.As(err, &refused) {
				p.refuse(w, r, http.StatusForbidden, refused.Error())
				return
			}
			p.o.Log.Warn("proxy: passthrough request failed", "url", r.URL.String(), "remote", r.RemoteAddr, "error", err)
			http.Error(w, fmt.Sprintf("imagecache proxy: %s: %v", r.URL.Host, err), http.StatusBadGateway)
		},
	}
}

// forward passes a plain http request to a host that is not an upstream on, and logs it.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	in := &countingReader{r: r.Body}
	r.Body = in
	out := &countingWriter{ResponseWriter: w}
	p.forwarder.ServeHTTP(out, r)
	status := out.status
	if status == 0 {
		status = http.StatusOK
	}
	// The path but not the query, which may carry someone's token.
	p.o.Log.Info("proxy: passthrough request", "method", r.Method, "target", r.URL.Host, "path", r.URL.Path, "remote", r.RemoteAddr,
		"status", status, "bytesToTarget", in.n.Load(), "bytesFromTarget", out.n.Load(), "duration", time.Since(start))
}

// tunnel copies bytes both ways between the client and addr, untouched, and logs the tunnel.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, addr string) {
	start := time.Now()
	up, err := p.dialPassthrough(r.Context(), "tcp", addr)
	if refused := (*refusedTarget)(nil); errors.As(err, &refused) {
		p.refuse(w, r, http.StatusForbidden, refused.Error())
		return
	}
	if err != nil {
		p.o.Log.Warn("proxy: passthrough connect failed", "target", addr, "remote", r.RemoteAddr, "error", err)
		http.Error(w, fmt.Sprintf("imagecache proxy: cannot connect to %s: %v", addr, err), http.StatusBadGateway)
		return
	}
	conn, ok := p.hijack(w, r)
	if !ok {
		up.Close()
		return
	}
	if !p.track(conn, up) {
		conn.Close()
		up.Close()
		return
	}
	defer p.untrack(conn, up)
	log := p.o.Log.With("target", addr, "address", up.RemoteAddr().String(), "remote", r.RemoteAddr)
	log.Info("proxy: passthrough tunnel opened")
	var toTarget, fromTarget int64
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, n *int64) {
		*n, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, conn, &toTarget)
	go pipe(conn, up, &fromTarget)
	<-done
	<-done
	conn.Close()
	up.Close()
	log.Info("proxy: passthrough tunnel closed", "bytesToTarget", toTarget, "bytesFromTarget", fromTarget, "duration", time.Since(start))
}

type countingReader struct {
	r io.ReadCloser
	n atomic.Int64 // read after the handler returns, while the transport may still be sending
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

type countingWriter struct {
	http.ResponseWriter
	status int
	n      atomic.Int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 { // 1xx answers come before the real one
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController (which the reverse proxy flushes through) reach the connection.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
