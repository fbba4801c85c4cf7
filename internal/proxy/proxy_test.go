package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is the stand-in registry handler: it answers with the path it was given.
type recorder struct {
	mu    sync.Mutex
	paths []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.paths = append(rec.paths, r.URL.RequestURI())
	rec.mu.Unlock()
	if strings.HasSuffix(r.URL.Path, "/tags/list") {
		w.Header().Set("Link", `<`+r.URL.Path+`?last=b&n=1>; rel="next"`)
	}
	if r.Header.Get("Proxy-Authorization") != "" {
		http.Error(w, "Proxy-Authorization leaked to the registry handler", http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "served %s", r.URL.RequestURI())
}

func (rec *recorder) seen() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.paths...)
}

type testProxy struct {
	addr string
	ca   *CA
	reg  *recorder
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startTestProxy(t *testing.T, mutate func(*Options)) *testProxy {
	t.Helper()
	return startTestProxyHooked(t, mutate, nil)
}

// startTestProxyHooked is startTestProxy with hook called on the Proxy before it serves (to replace its
// resolver or dialer).
func startTestProxyHooked(t *testing.T, mutate func(*Options), hook func(*Proxy)) *testProxy {
	t.Helper()
	tp := &testProxy{ca: newTestCA(t), reg: &recorder{}, logs: &syncBuffer{}}
	o := Options{
		CA: tp.ca,
		Upstreams: []Upstream{
			{Name: "registry.example.com", URL: "https://registry.example.com"},
			{Name: "local", Aliases: []string{"registry.test:5000"}, URL: "https://10.99.0.1:5443"},
		},
		Registry: tp.reg,
		Log:      slog.New(slog.NewTextHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", tp.logs)
		}
	})
	tp.addr = ln.Addr().String()
	return tp
}

// client trusts only the proxy's CA and goes through the proxy, as HTTPS_PROXY does.
func (tp *testProxy) client(t *testing.T, proxyUser *url.Userinfo) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(tp.ca.Cert)
	u := &url.URL{Scheme: "http", Host: tp.addr, User: proxyUser}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestInterceptRewritesToUpstream(t *testing.T) {
	tp := startTestProxy(t, nil)
	c := tp.client(t, nil)
	for _, tt := range []struct{ url, want string }{
		{"https://registry.example.com/v2/", "/v2/"},
		{"https://registry.example.com/v2/team/app/manifests/v1", "/v2/registry.example.com/team/app/manifests/v1"},
		// The host decides: a repository named like another upstream stays on this one, and ?ns= is
		// dropped so that the registry does not echo another upstream in OCI-Namespace.
		{"https://registry.example.com/v2/local/app/manifests/v1?ns=local", "/v2/registry.example.com/local/app/manifests/v1"},
		{"https://registry.example.com/v2/app/tags/list?n=1&ns=local&last=a", "/v2/registry.example.com/app/tags/list?last=a&n=1"},
		{"https://registry.test:5000/v2/team/app/blobs/sha256:abc", "/v2/local/team/app/blobs/sha256:abc"},
		{"https://10.99.0.1:5443/v2/team/app/manifests/v1", "/v2/local/team/app/manifests/v1"},
		{"https://REGISTRY.test/v2/a/manifests/v1", "/v2/local/a/manifests/v1"}, // 443 is always allowed
	} {
		resp, body := get(t, c, tt.url)
		if resp.StatusCode != 200 || body != "served "+tt.want {
			t.Errorf("GET %s: %s %q, want the registry handler to see %s", tt.url, resp.Status, body, tt.want)
		}
	}
	resp, _ := get(t, c, "https://registry.example.com/v2/team/app/tags/list")
	if link := resp.Header.Get("Link"); link != `</v2/team/app/tags/list?last=b&n=1>; rel="next"` {
		t.Errorf("Link %q: the upstream prefix was not taken back out", link)
	}
	resp, body := get(t, c, "https://registry.example.com/api/v1/stats")
	if resp.StatusCode != 404 || !strings.Contains(body, "only the registry API") {
		t.Errorf("non-/v2 path: %s %q, want 404", resp.Status, body)
	}
	// Plain http absolute-form requests go the same way.
	resp, body = get(t, c, "http://registry.example.com/v2/team/app/manifests/v1")
	if resp.StatusCode != 200 || body != "served /v2/registry.example.com/team/app/manifests/v1" {
		t.Errorf("plain http: %s %q", resp.Status, body)
	}
}

func TestUntrustingClientFailsHandshake(t *testing.T) {
	tp := startTestProxy(t, nil)
	u, _ := url.Parse("http://" + tp.addr)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	_, err := c.Get("https://registry.example.com/v2/")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client without imagecache's CA: %v, want a certificate error", err)
	}
	if len(tp.reg.seen()) != 0 {
		t.Error("a request reached the registry handler over an untrusted connection")
	}
	waitLog(t, tp.logs, "rejected imagecache's certificate")
}

// rawConnect sends line (e.g. "CONNECT host:443 HTTP/1.1") plus headers and reads the proxy's answer.
func rawConnect(t *testing.T, addr, line string, headers ...string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := line + "\r\nHost: x\r\n" + strings.Join(headers, "") + "\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: read response: %v", line, err)
	}
	return resp, conn, br
}

func body(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

func TestConnectRefusals(t *testing.T) {
	tp := startTestProxy(t, nil)
	for _, tt := range []struct {
		name, line string
		status     int
		want       string
	}{
		{"stranger", "CONNECT example.org:443 HTTP/1.1", 403, "example.org is not a configured upstream"},
		{"wrong port", "CONNECT registry.example.com:22 HTTP/1.1", 403, "only intercepts it on port 443, not 22"},
		// An alias with a port is that port only; the url's port belongs to the url's host.
		{"alias port only", "CONNECT registry.test:5001 HTTP/1.1", 403, "port 443, 5000, not 5001"},
		{"url port on the alias host", "CONNECT registry.test:5443 HTTP/1.1", 403, "port 443, 5000, not 5443"},
		{"no port", "CONNECT registry.example.com HTTP/1.1", 400, "not host:port"},
		{"port zero", "CONNECT registry.example.com:0 HTTP/1.1", 400, "no valid port"},
		{"path form", "CONNECT /v2/ HTTP/1.1", 400, "malformed CONNECT"},
		{"origin form GET", "GET /v2/ HTTP/1.1", 400, "this port is imagecache's HTTP proxy"},
		// Lines net/http would refuse with a bare "400 Bad Request" get a reason too.
		{"bare CONNECT", "CONNECT", 400, `malformed request line "CONNECT": it has 1 space-separated parts, not 3`},
		{"too many parts", "CONNECT a b c", 400, "it has 4 space-separated parts"},
		{"no version", "CONNECT registry.example.com:443 HTTTP/1.1", 400, `"HTTTP/1.1" is not an HTTP version`},
		{"named port", "CONNECT registry.example.com:https HTTP/1.1", 400, "no valid port"},
		{"bad escape", "GET http://registry.example.com/%zz HTTP/1.1", 400, `malformed request target "http://registry.example.com/%zz"`},
		{"bad method", "CON(NECT registry.example.com:443 HTTP/1.1", 400, `"CON(NECT" is not a method`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, _ := rawConnect(t, tp.addr, tt.line)
			if b := body(resp); resp.StatusCode != tt.status || !strings.Contains(b, tt.want) {
				t.Errorf("%s: %s %q, want %d containing %q", tt.line, resp.Status, b, tt.status, tt.want)
			}
		})
	}
	if n := len(tp.reg.seen()); n != 0 {
		t.Errorf("refused requests reached the registry handler %d times", n)
	}
	waitLog(t, tp.logs, "example.org is not a configured upstream")
	waitLog(t, tp.logs, "it has 4 space-separated parts")
}

// TestScreenWaitsOnlyForTheLine: a client that sends a short CONNECT and waits for the answer gets it; the
// screen never waits for a full buffer.
func TestScreenWaitsOnlyForTheLine(t *testing.T) {
	tp := startTestProxy(t, nil)
	conn, err := net.DialTimeout("tcp", tp.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	for _, part := range []string{"CONN", "ECT example.org:4", "43 HTTP/1.1\r\n", "\r\n"} {
		io.WriteString(conn, part) // in pieces, as a slow client would
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "not a configured upstream") {
		t.Fatalf("%s %q", resp.Status, b)
	}
}

func TestSNIMustMatchConnectHost(t *testing.T) {
	tp := startTestProxy(t, nil)
	_, conn, _ := rawConnect(t, tp.addr, "CONNECT registry.example.com:443 HTTP/1.1")
	roots := x509.NewCertPool()
	roots.AddCert(tp.ca.Cert)
	// Even a client that would accept anything gets no certificate for another name.
	tc := tls.Client(conn, &tls.Config{ServerName: "evil.example.com", InsecureSkipVerify: true})
	err := tc.Handshake()
	if err == nil {
		t.Fatalf("handshake for SNI evil.example.com through CONNECT registry.example.com succeeded with %v",
			tc.ConnectionState().PeerCertificates[0].DNSNames)
	}
	// The alert says what is wrong (unrecognized_name), not internal_error.
	if !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake error %q, want the TLS alert unrecognized_name", err)
	}
	waitLog(t, tp.logs, `asks for \"evil.example.com\", but the CONNECT was for \"registry.example.com\"`)
}

func TestProxyAuth(t *testing.T) {
	tp := startTestProxy(t, func(o *Options) { o.Username, o.Password = "kapp", "s3cret" })
	for _, tt := range []struct {
		name   string
		header string
		want   string
	}{
		{"missing", "", "proxy credentials required"},
		{"wrong", "Proxy-Authorization: Basic " + basic("kapp", "nope") + "\r\n", "wrong proxy credentials"},
		{"garbage", "Proxy-Authorization: Bearer xyz\r\n", "proxy credentials required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, _ := rawConnect(t, tp.addr, "CONNECT registry.example.com:443 HTTP/1.1", tt.header)
			b := body(resp)
			if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") != `Basic realm="imagecache"` || !strings.Contains(b, tt.want) {
				t.Errorf("%s credentials: %s %q %q, want 407 with Proxy-Authenticate", tt.name, resp.Status, resp.Header.Get("Proxy-Authenticate"), b)
			}
		})
	}
	resp, body := get(t, tp.client(t, url.UserPassword("kapp", "s3cret")), "https://registry.example.com/v2/a/manifests/v1")
	if resp.StatusCode != 200 || body != "served /v2/registry.example.com/a/manifests/v1" {
		t.Errorf("with credentials: %s %q", resp.Status, body)
	}
	resp, _ = get(t, tp.client(t, nil), "http://registry.example.com/v2/")
	if resp.StatusCode != 407 {
		t.Errorf("plain http without credentials: %s, want 407", resp.Status)
	}
	if n := len(tp.reg.seen()); n != 1 {
		t.Errorf("the registry handler saw %d requests, want only the authorized one", n)
	}
}

func basic(u, p string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(u, p)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func TestPassthrough(t *testing.T) {
	real := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "the real server")
	}))
	t.Cleanup(real.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain real server, auth %q", r.Header.Get("Proxy-Authorization"))
	}))
	t.Cleanup(plain.Close)

	t.Run("off", func(t *testing.T) {
		tp := startTestProxy(t, nil)
		resp, _, _ := rawConnect(t, tp.addr, "CONNECT "+real.Listener.Addr().String()+" HTTP/1.1")
		if resp.StatusCode != 403 {
			t.Fatalf("CONNECT to a stranger without passthrough: %s, want 403", resp.Status)
		}
		resp, b := get(t, tp.client(t, nil), plain.URL+"/x")
		if resp.StatusCode != 403 || !strings.Contains(b, "not a configured upstream") {
			t.Fatalf("plain http to a stranger without passthrough: %s %q, want 403", resp.Status, b)
		}
	})
	t.Run("on", func(t *testing.T) {
		// The test servers are on loopback, which passthrough refuses by default (TestPassthroughRefusesLocal).
		tp := startTestProxy(t, func(o *Options) { o.Passthrough = true })
		u, _ := url.Parse("http://" + tp.addr)
		tr := real.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(u)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(real.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b := body(resp)
		if b != "the real server" || !resp.TLS.PeerCertificates[0].Equal(real.Certificate()) {
			t.Fatalf("passthrough: %q from %v, want the real server's certificate", b, resp.TLS.PeerCertificates[0].Subject)
		}
		resp, b = get(t, tp.client(t, nil), plain.URL+"/x")
		if resp.StatusCode != 200 || b != `plain real server, auth ""` {
			t.Fatalf("plain passthrough: %s %q", resp.Status, b)
		}
		if n := len(tp.reg.seen()); n != 0 {
			t.Errorf("passthrough traffic reached the registry handler %d times", n)
		}
		// Both are logged at Info with what went each way; the tunnel when it closes.
		waitLog(t, tp.logs, `level=INFO msg="proxy: passthrough request" method=GET target=`+plain.Listener.Addr().String()+` path=/x`)
		waitLog(t, tp.logs, fmt.Sprintf("status=200 bytesToTarget=0 bytesFromTarget=%d", len(`plain real server, auth ""`)))
		tr.CloseIdleConnections()
		waitLog(t, tp.logs, `level=INFO msg="proxy: passthrough tunnel closed" target=`+real.Listener.Addr().String())
		if !regexp.MustCompile(`tunnel closed".* bytesToTarget=[1-9][0-9]* bytesFromTarget=[1-9][0-9]* duration=`).MatchString(tp.logs.String()) {
			t.Errorf("the tunnel's log line lacks the bytes each way:\n%s", tp.logs)
		}
		// Upstreams are still intercepted.
		resp, b = get(t, tp.client(t, nil), "https://registry.example.com/v2/a/manifests/v1")
		if resp.StatusCode != 200 || b != "served /v2/registry.example.com/a/manifests/v1" {
			t.Fatalf("upstream with passthrough on: %s %q", resp.Status, b)
		}
	})
}

func waitLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log does not contain %q:\n%s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
