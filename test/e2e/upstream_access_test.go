package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestHTTPSUpstream: an upstream with a certificate from a private CA is reached with caFile or
// insecureSkipVerify; without either the pull fails with a message about the certificate, and the cache never
// falls back to plain http.
func TestHTTPSUpstream(t *testing.T) {
	cert, key := selfSignedCert(t)
	reg := startRegistry(t, registryOpts{tlsCert: cert, tlsKey: key})
	pem, _ := os.ReadFile(cert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// name.Insecure only lets the ping try https first for 127.0.0.1; the transport trusts the test CA.
	trusting := remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	want, _ := pushImage(t, reg.Host, "secure/app:v1", "oci", 1, 1024, trusting)

	for _, tc := range []struct{ name, extra string }{
		{"caFile", fmt.Sprintf("caFile: %q", cert)},
		{"insecureSkipVerify", "insecureSkipVerify: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startImagecache(t, fmt.Sprintf("upstreams:\n  - {name: secure.test, url: %q, %s}\n", reg.URL, tc.extra))
			a := manifest(t, c, http.MethodGet, "secure.test/secure/app", "v1")
			expect(t, a, 200, "MISS", "pull over https")
			if got := a.Header.Get("Docker-Content-Digest"); got != want {
				t.Fatalf("digest %s, want %s", got, want)
			}
		})
	}
	t.Run("untrusted", func(t *testing.T) {
		c := startImagecache(t, fmt.Sprintf("upstreams:\n  - {name: secure.test, url: %q}\n", reg.URL))
		a := manifest(t, c, http.MethodGet, "secure.test/secure/app", "v1")
		code, msg := a.ociError()
		if a.Status != 502 || !strings.Contains(msg, "certificate") || !strings.Contains(msg, "set caFile") {
			t.Fatalf("untrusted certificate: %d %s %q; want 502 naming the certificate problem", a.Status, code, msg)
		}
		if strings.Contains(reg.Log(), `"GET /v2/ HTTP/1.1" 400`) || strings.Contains(msg, "http://") {
			t.Fatalf("the cache fell back to plain http: %q", msg)
		}
	})
}

// TestBasicAuthUpstream: credentials from the config reach an htpasswd-protected registry; wrong ones give a
// 403 that tells the operator to check them.
func TestBasicAuthUpstream(t *testing.T) {
	reg := startRegistry(t, registryOpts{auth: true})
	want, _ := pushImage(t, reg.Host, "private/app:v1", "docker", 1, 1024,
		remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword}))

	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: good.test, url: %q, credentials: {username: %q, password: %q}}
  - {name: bad.test, url: %q, credentials: {username: %q, password: wrong}}
  - {name: anon.test, url: %q}
`, reg.URL, registryUser, registryPassword, reg.URL, registryUser, reg.URL))
	a := manifest(t, c, http.MethodGet, "good.test/private/app", "v1")
	expect(t, a, 200, "MISS", "with credentials")
	if a.Header.Get("Docker-Content-Digest") != want {
		t.Fatal("wrong digest")
	}
	pullImage(t, c.Host, "good.test/private/app:v1", want, "application/vnd.docker.distribution.manifest.v2+json")
	for _, up := range []string{"bad.test", "anon.test"} {
		a := manifest(t, c, http.MethodGet, up+"/private/app", "v1")
		code, msg := a.ociError()
		if a.Status != 403 || code != "DENIED" || !strings.Contains(msg, "credentials") {
			t.Fatalf("%s: %d %s %q; want 403 DENIED telling to check the credentials", up, a.Status, code, msg)
		}
	}
}
