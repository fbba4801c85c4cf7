package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInterceptPassthroughRefusesLocal: with passthrough on, the proxy still never reaches imagecache's own
// listeners: a CONNECT or a plain request to its loopback listener (whose admin API needs no token there)
// is refused with 403 and logged, while the upstream on 127.0.0.1 is intercepted as before. (Other
// loopback ports are tunnelled: TestInterceptPassthroughAndAuth's stranger listens there.)
func TestInterceptPassthroughRefusesLocal(t *testing.T) {
	s := startIntercept(t, "  passthrough: true\n")
	digest, _ := pushImage(t, s.reg.Host, "secure/app:v1", "oci", 1, 2048, s.trusting)
	pins := s.cache.URL + "/api/v1/pins"
	direct, err := (&http.Client{Timeout: 5 * time.Second}).Get(pins)
	if err != nil {
		t.Fatal(err)
	}
	if direct.Body.Close(); direct.StatusCode != 200 {
		t.Fatalf("GET %s directly: %s; the test needs the admin API open on loopback", pins, direct.Status)
	}

	_, port, _ := net.SplitHostPort(s.cache.Host)
	for _, target := range []string{s.cache.Host, "localhost:" + port, "[::1]:" + port, "0.0.0.0:" + port} {
		resp, _ := connectThrough(t, s.proxyAddr, "CONNECT "+target+" HTTP/1.1")
		if b := readBody(resp); resp.StatusCode != 403 || !strings.Contains(b, "passthrough refuses") {
			t.Errorf("CONNECT %s: %s %q, want 403 passthrough refuses", target, resp.Status, b)
		}
	}
	resp, err := (&http.Client{Transport: s.transport(nil), Timeout: 10 * time.Second}).Get(pins)
	if err != nil {
		t.Fatal(err)
	}
	if b := readBody(resp); resp.StatusCode != 403 || !strings.Contains(b, "passthrough refuses 127.0.0.1: a loopback address on port "+port+", one of imagecache's own") {
		t.Errorf("GET %s through the proxy: %s %q, want 403", pins, resp.Status, b)
	}

	// Upstreams on loopback are served by the cache, not tunnelled: by name and by the url's host:port.
	for _, ref := range []string{s.host + "/secure/app:v1", s.reg.Host + "/secure/app:v1"} {
		if err := pullThrough(t, s.transport(nil), ref, digest); err != nil {
			t.Errorf("pull %s: %v", ref, err)
		}
	}
	waitFor(t, 5*time.Second, "the cache logs the refusals", func() error {
		log := s.cache.Log()
		for _, want := range []string{`"target":"` + s.cache.Host + `"`, `"target":"localhost:` + port + `"`, `"target":"` + pins + `"`} {
			if !strings.Contains(log, want) {
				return fmt.Errorf("log lacks %s", want)
			}
		}
		if n := strings.Count(log, "passthrough refuses"); n < 5 {
			return fmt.Errorf("%d refusals logged, want 5", n)
		}
		return nil
	})
	if strings.Contains(s.cache.Log(), "passthrough tunnel opened") {
		t.Errorf("something was tunnelled:\n%s", s.cache.logTail(4096))
	}
}
