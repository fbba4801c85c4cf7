package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestInterceptSharedHost: several upstreams on one host (127.0.0.1), told apart only by port, are each
// intercepted on their own port, by their url's host:port or an alias. With passthrough on, those ports
// are still served by the cache, never tunnelled past it.
func TestInterceptSharedHost(t *testing.T) {
	reg1 := startRegistry(t, registryOpts{})
	reg2 := startRegistry(t, registryOpts{})
	d1, _ := pushImage(t, reg1.Host, "team/one:v1", "oci", 1, 2048)
	d2, _ := pushImage(t, reg2.Host, "team/two:v1", "oci", 1, 2048)
	ups := fmt.Sprintf("  - {name: reg1, url: %q}\n  - {name: reg2, url: %q, aliases: [%q]}\n", reg1.URL, reg2.URL, reg2.Host)

	for _, passthrough := range []bool{false, true} {
		t.Run(fmt.Sprintf("passthrough %v", passthrough), func(t *testing.T) {
			s := startInterceptOpts(t, interceptOpts{upstreamsBefore: ups, proxyExtra: fmt.Sprintf("  passthrough: %v\n", passthrough)})
			d3, _ := pushImage(t, s.reg.Host, "secure/app:v1", "oci", 1, 2048, s.trusting)
			for _, p := range []struct{ ref, digest, path string }{
				{reg1.Host + "/team/one:v1", d1, "/v2/reg1/team/one/manifests/v1"},
				{reg2.Host + "/team/two:v1", d2, "/v2/reg2/team/two/manifests/v1"},
				{s.reg.Host + "/secure/app:v1", d3, "/v2/registry.test/secure/app/manifests/v1"},
				{s.host + "/secure/app:v1", d3, "/v2/registry.test/secure/app/manifests/v1"},
			} {
				// The client trusts only imagecache's CA: a tunnel to the real registry could not succeed.
				if err := pullThrough(t, s.transport(nil), p.ref, p.digest); err != nil {
					t.Errorf("pull %s through the proxy: %v", p.ref, err)
				}
				if log := s.cache.Log(); !strings.Contains(log, `"path":"`+p.path+`"`) {
					t.Errorf("pull %s: the cache's access log shows no %s", p.ref, p.path)
				}
			}
			if strings.Contains(s.cache.Log(), "passthrough tunnel opened") {
				t.Errorf("an upstream's port was tunnelled:\n%s", s.cache.logTail(4096))
			}
			if passthrough {
				return
			}
			// A port no upstream has is still refused, with every port the host is served on.
			_, stray, _ := net.SplitHostPort(freeAddr(t))
			_, p1, _ := net.SplitHostPort(reg1.Host)
			_, p2, _ := net.SplitHostPort(reg2.Host)
			_, p3, _ := net.SplitHostPort(s.reg.Host)
			resp, _ := connectThrough(t, s.proxyAddr, "CONNECT 127.0.0.1:"+stray+" HTTP/1.1")
			want := fmt.Sprintf("only intercepts it on port 443, %s, %s, %s, not %s", p1, p2, p3, stray)
			if b := readBody(resp); resp.StatusCode != 403 || !strings.Contains(b, want) {
				t.Errorf("CONNECT 127.0.0.1:%s: %s %q, want 403 containing %q", stray, resp.Status, b, want)
			}
		})
	}
}
