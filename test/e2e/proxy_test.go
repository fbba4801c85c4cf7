package e2e

import (
	"testing"

	"imagecache.io/imagecache/test/faultproxy"
)

// startProxy puts a fault proxy in front of upstreamURL for the length of the test.
func startProxy(t testing.TB, upstreamURL string, opts ...faultproxy.Option) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(upstreamURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
