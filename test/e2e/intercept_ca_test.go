package e2e

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestInterceptOpenSSLCA: a CA of one's own made the common way, `openssl req -x509` (basicConstraints
// CA:TRUE and no keyUsage extension, which RFC 5280 reads as every usage), serves the proxy.
func TestInterceptOpenSSLCA(t *testing.T) {
	openssl := systemTool(t, "openssl")
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	out, err := exec.Command(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
		"-subj", "/CN=bring your own CA", "-days", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl req -x509: %v\n%s", err, out)
	}
	pemBytes, _ := os.ReadFile(crt)
	b, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cert.Extensions {
		if e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 15}) {
			t.Fatalf("this openssl puts a keyUsage extension in the CA (%x); the test wants one without", e.Value)
		}
	}
	if !cert.IsCA {
		t.Fatal("openssl made no CA")
	}

	s := startInterceptOpts(t, interceptOpts{caDir: dir})
	digest, _ := pushImage(t, s.reg.Host, "secure/app:v1", "oci", 1, 2048, s.trusting)
	if err := pullThrough(t, s.transport(nil), s.host+"/secure/app:v1", digest); err != nil {
		t.Fatalf("pull through the proxy with the openssl CA: %v", err)
	}
}
