package proxy

import (
	"strings"
	"testing"
)

// sharedHostUpstreams are three upstreams on one host, told apart by port only.
var sharedHostUpstreams = []Upstream{
	{Name: "reg1", URL: "http://127.0.0.1:5001"},
	{Name: "reg2", Aliases: []string{"127.0.0.1:5002"}, URL: "http://127.0.0.1:5002"},
	{Name: "registry.test", URL: "https://127.0.0.1:5443"},
}

func TestHostTableByPort(t *testing.T) {
	ht, err := newHostTable(append(sharedHostUpstreams,
		// A bare alias gets 443 and its url's port; another upstream's explicit host:port wins that
		// port whatever the order.
		Upstream{Name: "a", Aliases: []string{"mirror.test"}, URL: "http://10.0.0.1:6000"},
		Upstream{Name: "b", Aliases: []string{"mirror.test:6000"}, URL: "http://10.0.0.2:6001"},
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host, port, defaultPort string
		want                    string // upstream, or "" for none
		known                   bool
	}{
		{"127.0.0.1", "5001", "443", "reg1", true},
		{"127.0.0.1", "5002", "443", "reg2", true},
		{"127.0.0.1", "5443", "443", "registry.test", true},
		{"127.0.0.1", "5002", "80", "reg2", true},
		{"127.0.0.1", "443", "443", "reg1", true}, // 443 of a shared host: the first upstream that names it
		{"127.0.0.1", "80", "80", "reg1", true},
		{"127.0.0.1", "5003", "443", "", true},
		{"registry.test", "5443", "443", "registry.test", true},
		{"registry.test", "443", "443", "registry.test", true},
		{"registry.test", "5001", "443", "", true},
		{"mirror.test", "443", "443", "a", true},
		{"mirror.test", "6000", "443", "b", true},
		{"10.0.0.2", "6001", "443", "b", true},
		{"example.org", "443", "443", "", false},
	} {
		tgt, known := ht.lookup(tt.host, tt.port, tt.defaultPort)
		got := ""
		if tgt != nil {
			got = tgt.upstream
		}
		if got != tt.want || known != tt.known {
			t.Errorf("lookup(%s, %s, default %s) = %q known=%v, want %q known=%v", tt.host, tt.port, tt.defaultPort, got, known, tt.want, tt.known)
		}
	}
	if got := ht.portList("127.0.0.1", "443"); got != "443, 5001, 5002, 5443" {
		t.Errorf("ports of 127.0.0.1: %q", got)
	}
}

// TestSharedHostThroughProxy: every upstream on a shared host is intercepted on its own port, also with
// passthrough on (where a port that was not recognised used to be tunnelled past the cache).
func TestSharedHostThroughProxy(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		tp := startTestProxy(t, func(o *Options) {
			o.Upstreams = sharedHostUpstreams
			o.Passthrough = passthrough
		})
		c := tp.client(t, nil) // trusts only imagecache's CA: a tunnel to the real server would fail
		for _, tt := range []struct{ url, want string }{
			{"https://127.0.0.1:5001/v2/a/manifests/v1", "/v2/reg1/a/manifests/v1"},
			{"https://127.0.0.1:5002/v2/a/manifests/v1", "/v2/reg2/a/manifests/v1"},
			{"https://127.0.0.1:5443/v2/a/manifests/v1", "/v2/registry.test/a/manifests/v1"},
			{"https://registry.test:5443/v2/a/manifests/v1", "/v2/registry.test/a/manifests/v1"},
			{"http://127.0.0.1:5002/v2/a/manifests/v1", "/v2/reg2/a/manifests/v1"},
		} {
			resp, body := get(t, c, tt.url)
			if resp.StatusCode != 200 || body != "served "+tt.want {
				t.Errorf("passthrough %v: GET %s: %s %q, want the registry handler to see %s", passthrough, tt.url, resp.Status, body, tt.want)
			}
		}
		if passthrough {
			continue
		}
		resp, _, _ := rawConnect(t, tp.addr, "CONNECT 127.0.0.1:5003 HTTP/1.1")
		if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "only intercepts it on port 443, 5001, 5002, 5443, not 5003") {
			t.Errorf("CONNECT 127.0.0.1:5003: %s %q", resp.Status, b)
		}
	}
}
