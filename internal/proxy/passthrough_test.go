package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPassthroughRefusesLocal: passthrough never tunnels or forwards to imagecache's own listeners through
// loopback or unspecified addresses, the name localhost or names that resolve to those, nor to link-local
// and multicast addresses on any port.
func TestPassthroughRefusesLocal(t *testing.T) {
	var hits atomic.Int32 // stands in for imagecache's own admin API on loopback
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"pins":[]}`)
	}))
	t.Cleanup(admin.Close)
	_, port, _ := net.SplitHostPort(admin.Listener.Addr().String())
	tp := startTestProxyHooked(t, func(o *Options) { o.Passthrough, o.OwnPorts = true, []string{port} }, func(p *Proxy) {
		p.lookup = fakeDNS(map[string][]string{
			"rebind.test": {"127.0.0.1"},
			"both.test":   {"192.0.2.10", "127.0.0.1"},
			"meta.test":   {"169.254.169.254"},
			"mapped.test": {"::ffff:127.0.0.1"},
		}, nil)
	})
	for _, host := range []string{"127.0.0.1", "127.1.2.3", "localhost", "LocalHost.", "api.localhost", "[::1]",
		"[::ffff:127.0.0.1]", "0.0.0.0", "0.1.2.3", "[::]", "169.254.169.254", "[fe80::1]", "224.0.0.1", "[ff02::1]",
		"rebind.test", "both.test", "meta.test", "mapped.test"} {
		line := "CONNECT " + host + ":" + port + " HTTP/1.1"
		resp, _, _ := rawConnect(t, tp.addr, line)
		if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "passthrough refuses") {
			t.Errorf("%s: %s %q, want 403 passthrough refuses", line, resp.Status, b)
		}
	}
	// Plain http is forwarded by passthrough too, and refused the same way.
	c := tp.client(t, nil)
	for _, host := range []string{"127.0.0.1", "localhost", "rebind.test"} {
		u := "http://" + host + ":" + port + "/api/v1/pins"
		resp, b := get(t, c, u)
		if resp.StatusCode != 403 || !strings.Contains(b, "passthrough refuses") {
			t.Errorf("GET %s: %s %q, want 403 passthrough refuses", u, resp.Status, b)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server was reached %d times through the proxy", n)
	}
	waitLog(t, tp.logs, `msg="proxy: refused" status=403 method=CONNECT target=rebind.test:`+port)
	waitLog(t, tp.logs, "it resolves to 127.0.0.1, a loopback address on port "+port+", one of imagecache's own")
	waitLog(t, tp.logs, `msg="proxy: refused" status=403 method=GET target=http://127.0.0.1:`+port+`/api/v1/pins`)
}

// TestPassthroughResolvesOnce: the address that passed the check is the one dialled; a name whose next
// answer is a loopback address (DNS rebinding) still reaches the first, checked address.
func TestPassthroughResolvesOnce(t *testing.T) {
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "public server")
	}))
	t.Cleanup(public.Close)
	_, port, _ := net.SplitHostPort(public.Listener.Addr().String())
	var (
		mu     sync.Mutex
		dialed []string
	)
	lookups := map[string]int{}
	tp := startTestProxyHooked(t, func(o *Options) { o.Passthrough = true }, func(p *Proxy) {
		p.lookup = fakeDNS(map[string][]string{"rebind.test": {"192.0.2.10"}, "rebind2.test": {"192.0.2.10"}}, func(host string) []string {
			mu.Lock()
			defer mu.Unlock()
			if lookups[host]++; lookups[host] > 1 {
				return []string{"127.0.0.1"} // the rebinding answer
			}
			return nil
		})
		// 192.0.2.10 (TEST-NET) stands for a public server; the test's is on loopback.
		p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			if addr != "192.0.2.10:"+port {
				return nil, fmt.Errorf("dialled %s, not the checked address", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, public.Listener.Addr().String())
		}
	})

	resp, conn, br := rawConnect(t, tp.addr, "CONNECT rebind.test:"+port+" HTTP/1.1")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT rebind.test: %s %q", resp.Status, body(resp))
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: rebind.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(resp); b != "public server" {
		t.Errorf("through the tunnel: %q", b)
	}
	resp, b := get(t, tp.client(t, nil), "http://rebind2.test:"+port+"/")
	if resp.StatusCode != 200 || b != "public server" {
		t.Errorf("forwarded: %s %q", resp.Status, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if lookups["rebind.test"] != 1 || lookups["rebind2.test"] != 1 {
		t.Errorf("lookups %v, want one per name", lookups)
	}
	for _, d := range dialed {
		if d != "192.0.2.10:"+port {
			t.Errorf("dialled %s, want only the checked 192.0.2.10:%s", d, port)
		}
	}
}

// fakeDNS answers from names, or from override when it returns addresses.
func fakeDNS(names map[string][]string, override func(host string) []string) func(context.Context, string, string) ([]netip.Addr, error) {
	return func(_ context.Context, _, host string) ([]netip.Addr, error) {
		ss := names[host]
		if override != nil {
			if o := override(host); o != nil {
				ss = o
			}
		}
		if ss == nil {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var as []netip.Addr
		for _, s := range ss {
			as = append(as, netip.MustParseAddr(s))
		}
		return as, nil
	}
}

// TestRefusedAddr: local addresses are refused on imagecache's own ports only; the local link and
// multicast on every port.
func TestRefusedAddr(t *testing.T) {
	p := &Proxy{o: Options{OwnPorts: []string{"5000", "3128"}}}
	for s, refused := range map[string]bool{
		"127.0.0.1": true, "127.255.0.1": true, "::1": true, "::ffff:127.0.0.1": true, "0.0.0.0": true, "0.0.0.1": true,
		"::": true, "169.254.1.1": true, "fe80::1": true, "224.0.0.251": true, "ff02::1": true, "239.1.1.1": true,
		"10.0.0.1": false, "192.168.1.1": false, "8.8.8.8": false, "2001:db8::1": false, "100.64.0.1": false,
	} {
		if got := p.refusedAddr(netip.MustParseAddr(s), "5000") != ""; got != refused {
			t.Errorf("%s:5000 refused=%v, want %v", s, got, refused)
		}
	}
	for s, refused := range map[string]bool{"127.0.0.1": false, "::1": false, "0.0.0.0": false, "169.254.169.254": true, "224.0.0.1": true} {
		if got := p.refusedAddr(netip.MustParseAddr(s), "5443"); (got != "") != refused {
			t.Errorf("%s:5443 (not imagecache's) refused=%q, want %v", s, got, refused)
		}
	}
}

// TestWritesAdviseNoProxy: a push through the proxy gets the registry's 405 UNSUPPORTED, with advice that
// fits a client behind the proxy (NO_PROXY), and never reaches the registry handler.
func TestWritesAdviseNoProxy(t *testing.T) {
	tp := startTestProxy(t, nil)
	c := tp.client(t, nil)
	for _, tt := range []struct{ method, url string }{
		{http.MethodPost, "https://registry.example.com/v2/team/app/blobs/uploads/"},
		{http.MethodPut, "https://registry.example.com/v2/team/app/manifests/v1"},
		{http.MethodPatch, "https://registry.example.com/v2/team/app/blobs/uploads/123"},
		{http.MethodDelete, "https://registry.example.com/v2/team/app/manifests/v1"},
		{http.MethodPost, "http://registry.example.com/v2/team/app/blobs/uploads/"},
	} {
		req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader("{}"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := body(resp)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" ||
			!strings.HasPrefix(b, `{"errors":[{"code":"UNSUPPORTED","message":"imagecache is a read-only pull-through cache`) ||
			!strings.Contains(b, "add registry.example.com to the client's NO_PROXY") {
			t.Errorf("%s %s: %s %v %s", tt.method, tt.url, resp.Status, resp.Header, b)
		}
	}
	if n := len(tp.reg.seen()); n != 0 {
		t.Errorf("writes reached the registry handler %d times", n)
	}
	waitLog(t, tp.logs, "writes are not supported through the cache")
}
