package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// interceptSetup is an HTTPS upstream (distribution with a test certificate) and imagecache with the
// intercepting proxy on, the upstream reachable to clients as registry.test:PORT (PORT being the
// registry's real port: Go's proxy support never proxies loopback names, and an upstream is intercepted
// on 443 and on its url's port).
type interceptSetup struct {
	reg       *registryProc
	cache     *cacheProc
	proxyAddr string
	caFile    string // imagecache's CA certificate (PEM)
	caPool    *x509.CertPool
	host      string // registry.test:PORT
	trusting  remote.Option
}

func startIntercept(t *testing.T, proxyExtra string) *interceptSetup {
	t.Helper()
	return startInterceptOpts(t, interceptOpts{proxyExtra: proxyExtra})
}

type interceptOpts struct {
	upstreamsBefore string // more upstreams (YAML list items) listed before registry.test
	proxyExtra      string // more keys of the proxy section
	caDir           string // holds ca.crt and ca.key already; by default `imagecache ca init` makes them
}

func startInterceptOpts(t *testing.T, o interceptOpts) *interceptSetup {
	t.Helper()
	cert, key := selfSignedCert(t)
	s := &interceptSetup{reg: startRegistry(t, registryOpts{tlsCert: cert, tlsKey: key})}
	upstreamPEM, _ := os.ReadFile(cert)
	upstreamPool := x509.NewCertPool()
	upstreamPool.AppendCertsFromPEM(upstreamPEM)
	s.trusting = remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: upstreamPool}})

	caDir := o.caDir
	if caDir == "" {
		caDir = t.TempDir()
		out, err := exec.Command(buildImagecache(t), "ca", "init", "--dir", caDir).CombinedOutput()
		if err != nil {
			t.Fatalf("imagecache ca init --dir: %v\n%s", err, out)
		}
	}
	s.caFile = filepath.Join(caDir, "ca.crt")
	caPEM, _ := os.ReadFile(s.caFile)
	s.caPool = x509.NewCertPool()
	if !s.caPool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no CA certificate in %s:\n%s", s.caFile, caPEM)
	}
	_, port, _ := net.SplitHostPort(s.reg.Host)
	s.host = "registry.test:" + port
	s.proxyAddr = freeAddr(t)
	s.cache = startImagecache(t, fmt.Sprintf(`upstreams:
%s  - {name: registry.test, url: %q, caFile: %q}
proxy:
  listen: %q
  ca: {certFile: %q, keyFile: %q}
%s`, o.upstreamsBefore, s.reg.URL, cert, s.proxyAddr, s.caFile, filepath.Join(caDir, "ca.key"), o.proxyExtra))
	return s
}

// transport goes through the proxy (as HTTPS_PROXY does) and trusts only imagecache's CA.
func (s *interceptSetup) transport(user *url.Userinfo) *http.Transport {
	return &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: s.proxyAddr, User: user}),
		TLSClientConfig: &tls.Config{RootCAs: s.caPool},
	}
}

// pullThrough pulls ref through tr, reading the config and every layer (go-containerregistry verifies their digests).
func pullThrough(t *testing.T, tr http.RoundTripper, ref, wantDigest string) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithTransport(tr), remote.WithContext(t.Context()),
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	if err != nil {
		return err
	}
	if d, _ := img.Digest(); d.String() != wantDigest {
		return fmt.Errorf("%s: digest %s, want %s", ref, d, wantDigest)
	}
	if _, err := img.RawConfigFile(); err != nil { // verified against its digest
		return fmt.Errorf("%s: config: %w", ref, err)
	}
	if err := readLayers(img); err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	return nil
}

// upstreamBlobGETs counts GETs of each blob of img in the registry's access log.
func upstreamBlobGETs(t *testing.T, reg *registryProc, repo string, img v1.Image) map[string]int {
	t.Helper()
	counts := map[string]int{}
	log := reg.Log()
	for _, d := range blobDigests(t, img) {
		counts[d] = strings.Count(log, `"GET /v2/`+repo+`/blobs/`+d+` HTTP`)
	}
	return counts
}

// craneEnv runs crane as a separate process with the settings a CI job would have.
func (s *interceptSetup) craneEnv() []string {
	return append(cleanEnv(), "HTTPS_PROXY=http://"+s.proxyAddr, "SSL_CERT_FILE="+s.caFile, "SSL_CERT_DIR=/nonexistent")
}

func runEnv(t *testing.T, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// TestInterceptPull: clients that only have proxy settings and trust only imagecache's CA pull from an
// HTTPS upstream through the cache: go-containerregistry in-process, the crane binary, 8 clients at once
// (one upstream GET per blob), and the same pulls again with the upstream stopped.
func TestInterceptPull(t *testing.T) {
	s := startIntercept(t, "")
	appDigest, appImg := pushImage(t, s.reg.Host, "secure/app:v1", "oci", 2, 4096, s.trusting)
	herdDigest, herdImg := pushImage(t, s.reg.Host, "secure/herd:v1", "oci", 3, 1<<20, s.trusting)
	appRef, herdRef := s.host+"/secure/app:v1", s.host+"/secure/herd:v1"
	crane := tool(t, "crane")

	t.Run("go-containerregistry", func(t *testing.T) {
		if err := pullThrough(t, s.transport(nil), appRef, appDigest); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s.cache.Log(), `"path":"/v2/registry.test/secure/app/manifests/v1"`) {
			t.Fatalf("the cache's access log shows no intercepted manifest request:\n%s", s.cache.logTail(4096))
		}
	})
	t.Run("crane", func(t *testing.T) {
		env := s.craneEnv()
		out, err := runEnv(t, env, crane, "digest", appRef)
		if err != nil || strings.TrimSpace(out) != appDigest {
			t.Fatalf("crane digest %s: %q %v, want %s", appRef, out, err, appDigest)
		}
		tarball := filepath.Join(t.TempDir(), "app.tar")
		if _, err := runEnv(t, env, crane, "pull", appRef, tarball); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(tarball); err != nil || st.Size() < 8192 {
			t.Fatalf("crane pull wrote %v %v", st, err)
		}
	})
	t.Run("8 clients, one upstream GET per blob", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				errs <- pullThrough(t, s.transport(nil), herdRef, herdDigest) // a transport (and CONNECT) each
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		// The registry logs a request after answering it: wait until each blob's GET is logged.
		waitFor(t, 10*time.Second, "the upstream's access log shows every blob", func() error {
			for d, n := range upstreamBlobGETs(t, s.reg, "secure/herd", herdImg) {
				if n == 0 {
					return fmt.Errorf("no GET of %s logged", d)
				}
			}
			return nil
		})
		for d, n := range upstreamBlobGETs(t, s.reg, "secure/herd", herdImg) {
			if n != 1 {
				t.Errorf("upstream saw %d GETs of blob %s, want 1", n, d)
			}
		}
	})
	t.Run("upstream stopped", func(t *testing.T) {
		s.reg.Stop(t)
		for _, p := range []struct{ ref, digest string }{{appRef, appDigest}, {herdRef, herdDigest}} {
			if err := pullThrough(t, s.transport(nil), p.ref, p.digest); err != nil {
				t.Errorf("with the upstream stopped: %v", err)
			}
		}
		out, err := runEnv(t, s.craneEnv(), crane, "pull", appRef, filepath.Join(t.TempDir(), "app.tar"))
		if err != nil {
			t.Fatalf("crane pull with the upstream stopped: %v %s", err, out)
		}
		for d, n := range upstreamBlobGETs(t, s.reg, "secure/app", appImg) {
			if n != 1 {
				t.Errorf("upstream saw %d GETs of blob %s over all the pulls, want 1", n, d)
			}
		}
	})
}

// connectThrough opens a CONNECT tunnel through the proxy and returns the raw connection after a 200.
func connectThrough(t *testing.T, proxyAddr, line string, headers ...string) (*http.Response, net.Conn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	host := "x"
	if f := strings.Fields(line); len(f) == 3 && f[1] != "" && !strings.HasPrefix(f[1], "/") {
		host = f[1]
	}
	fmt.Fprintf(conn, "%s\r\nHost: %s\r\n%s\r\n", line, host, strings.Join(headers, ""))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
		t.Fatalf("%s: %d unexpected bytes after the answer", line, br.Buffered())
	}
	return resp, conn
}

func readBody(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// TestInterceptCertificates: the leaf for an upstream's host is signed by imagecache's CA, valid for that
// host only and for a short time; a client that does not trust imagecache's CA fails the handshake.
func TestInterceptCertificates(t *testing.T) {
	s := startIntercept(t, "")
	resp, conn := connectThrough(t, s.proxyAddr, "CONNECT "+s.host+" HTTP/1.1")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %s", s.host, resp.Status)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "registry.test", InsecureSkipVerify: true}) // verified below
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	leaf := tc.ConnectionState().PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.caPool, DNSName: "registry.test"}); err != nil {
		t.Errorf("leaf does not verify for registry.test against imagecache's CA: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.caPool, DNSName: "other.test"}); err == nil {
		t.Error("leaf verifies for other.test too")
	}
	if life := time.Until(leaf.NotAfter); life > 24*time.Hour {
		t.Errorf("leaf valid for %v more, want at most 24h", life)
	}
	tc.Close()

	// No silent downgrade: a client with only the system roots (or the upstream's) refuses the proxy.
	for _, tt := range []struct {
		name  string
		roots *x509.CertPool
	}{{"system roots", nil}, {"empty pool", x509.NewCertPool()}} {
		tr := s.transport(nil)
		tr.TLSClientConfig = &tls.Config{RootCAs: tt.roots}
		_, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + s.host + "/v2/")
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: %v, want a certificate error", tt.name, err)
		}
	}
	waitFor(t, 5*time.Second, "the cache logs the rejected certificate", func() error {
		if !strings.Contains(s.cache.Log(), "the client rejected imagecache's certificate") {
			return fmt.Errorf("not in the log")
		}
		return nil
	})
}

// TestInterceptRefusals: without passthrough, a CONNECT to a host that is not an upstream is refused with
// 403; so are a wrong port, malformed CONNECT lines and a TLS hello for another name. Every refusal is
// logged and nothing reaches the upstream.
func TestInterceptRefusals(t *testing.T) {
	s := startIntercept(t, "")
	stranger := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "stranger") }))
	t.Cleanup(stranger.Close)
	before := s.reg.Log()

	for _, tt := range []struct {
		line   string
		status int
		want   string
	}{
		// 127.0.0.1 is the upstream's url host, but the stranger is on another port.
		{"CONNECT " + stranger.Listener.Addr().String() + " HTTP/1.1", 403, "proxy.passthrough: true"},
		{"CONNECT example.org:443 HTTP/1.1", 403, "proxy.passthrough: true"},
		{"CONNECT registry.test:22 HTTP/1.1", 403, "only intercepts it on port 443"},
		{"CONNECT registry.test HTTP/1.1", 400, "want CONNECT host:port"},
		{"CONNECT registry.test:99999 HTTP/1.1", 400, "no valid port"},
		// Lines net/http cannot parse are screened before it would answer a bare 400.
		{"CONNECT registry.test:http HTTP/1.1", 400, "no valid port"},
		{"CONNECT /v2/ HTTP/1.1", 400, "malformed CONNECT"},
		{"CONNECT :443 HTTP/1.1", 400, "no valid host"},
	} {
		resp, _ := connectThrough(t, s.proxyAddr, tt.line)
		if b := readBody(resp); resp.StatusCode != tt.status || !strings.Contains(b, tt.want) {
			t.Errorf("%s: %s %q, want %d containing %q", tt.line, resp.Status, b, tt.status, tt.want)
		}
	}
	// A transport-level client gets the 403 as an error too, and never the stranger's content.
	tr := s.transport(nil)
	tr.TLSClientConfig = stranger.Client().Transport.(*http.Transport).TLSClientConfig
	if _, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(stranger.URL); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("GET through the proxy to a stranger: %v, want Forbidden", err)
	}

	// SNI that differs from the CONNECT host: no certificate, whatever the client would accept.
	resp, conn := connectThrough(t, s.proxyAddr, "CONNECT "+s.host+" HTTP/1.1")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %s", s.host, resp.Status)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS handshake for SNI evil.test through CONNECT registry.test succeeded")
	} else if !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("TLS handshake for SNI evil.test: %v, want the alert unrecognized_name", err)
	}

	waitFor(t, 5*time.Second, "the cache logs every refusal", func() error {
		log := s.cache.Log()
		for _, want := range []string{"example.org is not a configured upstream", "not 22", `\"registry.test\" is not host:port`,
			"malformed CONNECT", `asks for \"evil.test\", but the CONNECT was for \"registry.test\"`} {
			if !strings.Contains(log, want) {
				return fmt.Errorf("log lacks %q", want)
			}
		}
		return nil
	})
	if after := s.reg.Log(); strings.Contains(after[len(before):], "/v2/") {
		t.Errorf("refused requests reached the upstream:\n%s", after[len(before):])
	}
}

// TestInterceptPassthroughAndAuth: with passthrough on, a CONNECT to another host is tunnelled untouched
// (the client sees that server's own certificate); with proxy.auth, requests without the right Basic
// credentials get 407 and those with them pull through the cache.
func TestInterceptPassthroughAndAuth(t *testing.T) {
	s := startIntercept(t, "  passthrough: true\n  auth: {username: kapp, password: s3cret}\n")
	stranger := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "stranger") }))
	t.Cleanup(stranger.Close)
	digest, _ := pushImage(t, s.reg.Host, "secure/app:v1", "docker", 1, 2048, s.trusting)
	good := url.UserPassword("kapp", "s3cret")

	for _, tt := range []struct{ name, header, want string }{
		{"missing", "", "proxy credentials required"},
		{"wrong", "Proxy-Authorization: Basic " + basicAuth("kapp", "wrong") + "\r\n", "wrong proxy credentials"},
	} {
		for _, target := range []string{s.host, stranger.Listener.Addr().String()} {
			resp, _ := connectThrough(t, s.proxyAddr, "CONNECT "+target+" HTTP/1.1", tt.header)
			b := readBody(resp)
			if resp.StatusCode != 407 || !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic ") || !strings.Contains(b, tt.want) {
				t.Errorf("%s credentials, CONNECT %s: %s %q %q; want 407 with Proxy-Authenticate", tt.name, target, resp.Status, resp.Header.Get("Proxy-Authenticate"), b)
			}
		}
	}
	if err := pullThrough(t, s.transport(url.UserPassword("kapp", "wrong")), s.host+"/secure/app:v1", digest); err == nil {
		t.Error("pull with wrong proxy credentials succeeded")
	}

	tr := s.transport(good)
	tr.TLSClientConfig = stranger.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(stranger.URL)
	if err != nil {
		t.Fatalf("passthrough: %v", err)
	}
	if b := readBody(resp); b != "stranger" || !resp.TLS.PeerCertificates[0].Equal(stranger.Certificate()) {
		t.Fatalf("passthrough: %q, certificate %v; want the stranger's own certificate", b, resp.TLS.PeerCertificates[0].Subject)
	}
	tr.CloseIdleConnections()
	waitFor(t, 5*time.Second, "the cache logs the tunnel with its bytes each way", func() error {
		re := regexp.MustCompile(`"msg":"proxy: passthrough tunnel closed","target":"` + regexp.QuoteMeta(stranger.Listener.Addr().String()) +
			`".*"bytesToTarget":[1-9][0-9]*,"bytesFromTarget":[1-9][0-9]*,"duration"`)
		if !re.MatchString(s.cache.Log()) {
			return fmt.Errorf("no such line")
		}
		return nil
	})
	if err := pullThrough(t, s.transport(good), s.host+"/secure/app:v1", digest); err != nil {
		t.Fatalf("pull with proxy credentials: %v", err)
	}
	waitFor(t, 5*time.Second, "the cache logs the 407s", func() error {
		if strings.Count(s.cache.Log(), "wrong proxy credentials") < 2 {
			return fmt.Errorf("not logged")
		}
		return nil
	})
}

func basicAuth(user, password string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x", nil)
	r.SetBasicAuth(user, password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestCACommands: serve with a proxy and no CA refuses to start and says to run `imagecache ca init`;
// `ca init` puts the CA where serve finds it (the storage path), with the key private, and refuses to
// replace it without --force; `ca print` prints the certificate and never the key.
func TestCACommands(t *testing.T) {
	bin := buildImagecache(t)
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	cfgPath := filepath.Join(dir, "config.yaml")
	write(t, cfgPath, fmt.Sprintf("listen: %q\nstorage:\n  path: %q\nupstreams: []\nproxy:\n  listen: %q\n", freeAddr(t), storage, freeAddr(t)))
	imagecache := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}

	out, err := imagecache("serve", "--config", cfgPath)
	if err == nil || !strings.Contains(out, "imagecache ca init") {
		t.Fatalf("serve with a proxy and no CA: %v\n%s\nwant a refusal that says to run imagecache ca init", err, out)
	}
	if out, err = imagecache("ca", "print", "--config", cfgPath); err == nil || !strings.Contains(out, "imagecache ca init") {
		t.Fatalf("ca print without a CA: %v %s", err, out)
	}
	if out, err = imagecache("ca", "init", "--config", cfgPath); err != nil {
		t.Fatalf("ca init: %v\n%s", err, out)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("ca init printed the key:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(storage, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key in the storage path: %v %v, want mode 0600", fi, err)
	}
	crt, _ := os.ReadFile(filepath.Join(storage, "ca.crt"))
	printed, err := imagecache("ca", "print", "--storage", storage)
	if err != nil || printed != string(crt) {
		t.Fatalf("ca print: %v\n%s\nwant the contents of ca.crt", err, printed)
	}
	if b, _ := pem.Decode([]byte(printed)); b == nil || b.Type != "CERTIFICATE" || strings.Contains(printed, "PRIVATE") {
		t.Fatalf("ca print printed something other than a certificate:\n%s", printed)
	}
	if out, err = imagecache("ca", "init", "--storage", storage); err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("second ca init: %v %s, want a refusal mentioning --force", err, out)
	}
	if again, _ := os.ReadFile(filepath.Join(storage, "ca.crt")); string(again) != string(crt) {
		t.Fatal("a refused ca init replaced the certificate")
	}
	if out, err = imagecache("ca", "init", "--storage", storage, "--force"); err != nil {
		t.Fatalf("ca init --force: %v %s", err, out)
	}
	if again, _ := os.ReadFile(filepath.Join(storage, "ca.crt")); string(again) == string(crt) {
		t.Fatal("ca init --force kept the old certificate")
	}

	// With the CA in place, the same config serves, proxy included.
	c := startImagecacheWith(t, "upstreams: []\nproxy:\n  listen: "+freeAddr(t)+"\n", "--storage", storage)
	if !strings.Contains(c.Log(), "intercepting proxy listening") {
		t.Fatalf("serve did not start the proxy:\n%s", c.logTail(4096))
	}
}
