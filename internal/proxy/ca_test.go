package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	certPEM, keyPEM, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCA(certPEM, keyPEM, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestNewCA(t *testing.T) {
	ca := newTestCA(t)
	c := ca.Cert
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a path-length-0 CA: IsCA=%v MaxPathLenZero=%v KeyUsage=%v", c.IsCA, c.MaxPathLenZero, c.KeyUsage)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", c.PublicKey)
	}
	if life := c.NotAfter.Sub(time.Now()); life < CALifetime-2*time.Hour || life > CALifetime {
		t.Errorf("CA valid for %v more, want about %v", life, CALifetime)
	}
}

func TestLeafValidForItsHostOnly(t *testing.T) {
	ca := newTestCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tt := range []struct{ host, wrong string }{
		{"registry.example.com", "other.example.com"},
		{"10.0.0.5", "10.0.0.6"},
		{"::1", "127.0.0.1"},
	} {
		leaf, err := ca.Leaf(tt.host)
		if err != nil {
			t.Fatal(err)
		}
		opts := x509.VerifyOptions{Roots: roots, DNSName: tt.host}
		if _, err := leaf.Leaf.Verify(opts); err != nil {
			t.Errorf("leaf for %s does not verify for it: %v", tt.host, err)
		}
		opts.DNSName = tt.wrong
		if _, err := leaf.Leaf.Verify(opts); err == nil {
			t.Errorf("leaf for %s verifies for %s too", tt.host, tt.wrong)
		}
		if life := time.Until(leaf.Leaf.NotAfter); life > LeafLifetime || life < LeafLifetime-time.Minute {
			t.Errorf("leaf for %s valid for %v more, want %v", tt.host, life, LeafLifetime)
		}
		if len(leaf.Leaf.ExtKeyUsage) != 1 || leaf.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.Leaf.IsCA {
			t.Errorf("leaf for %s: ExtKeyUsage %v IsCA %v, want server auth only", tt.host, leaf.Leaf.ExtKeyUsage, leaf.Leaf.IsCA)
		}
	}
	// Another CA does not vouch for it.
	other := x509.NewCertPool()
	other.AddCert(newTestCA(t).Cert)
	leaf, _ := ca.Leaf("registry.example.com")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: other, DNSName: "registry.example.com"}); err == nil {
		t.Error("leaf verifies against a different CA")
	}
}

func TestLeafCachedAndRenewed(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	ca.now = func() time.Time { return now }
	a, _ := ca.Leaf("Registry.Example.com.")
	b, _ := ca.Leaf("registry.example.com")
	if a != b {
		t.Error("the same host got two leaves: not cached (or not case- and dot-insensitive)")
	}
	if a.Leaf.DNSNames[0] != "registry.example.com" {
		t.Errorf("SAN %v", a.Leaf.DNSNames)
	}
	now = now.Add(LeafLifetime - leafRenewBefore + time.Minute)
	c, _ := ca.Leaf("registry.example.com")
	if c == a || !c.Leaf.NotAfter.After(a.Leaf.NotAfter) {
		t.Error("a leaf close to expiry was not renewed")
	}
	for i := range maxLeaves + 10 {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ca.leaves); n > maxLeaves {
		t.Errorf("%d leaves cached, bound is %d", n, maxLeaves)
	}
}

func TestParseCARefuses(t *testing.T) {
	certPEM, keyPEM, _ := NewCA(time.Now())
	_, otherKey, _ := NewCA(time.Now())
	for _, tt := range []struct {
		name       string
		cert, key  []byte
		now        time.Time
		wantSubstr string
	}{
		{"key of another CA", certPEM, otherKey, time.Now(), "does not belong to the certificate"},
		{"expired", certPEM, keyPEM, time.Now().Add(CALifetime + time.Hour), "imagecache ca init --force"},
		{"not PEM", []byte("hello"), keyPEM, time.Now(), "no PEM CERTIFICATE"},
		{"no key", certPEM, certPEM, time.Now(), "no PEM private key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCA(tt.cert, tt.key, tt.now)
			if err == nil || !strings.Contains(err.Error(), tt.wantSubstr) {
				t.Fatalf("ParseCA: %v, want an error containing %q", err, tt.wantSubstr)
			}
		})
	}
}

func TestWriteNewCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := WriteNewCA(cert, key, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(key)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v, want mode 0600", fi.Mode(), err)
	}
	first, err := LoadCA(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteNewCA(cert, key, false); !errors.Is(err, ErrCAExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second init: %v, want a refusal that mentions --force", err)
	}
	if again, _ := LoadCA(cert, key); !again.Cert.Equal(first.Cert) {
		t.Fatal("a refused init changed the CA")
	}
	if err := WriteNewCA(cert, key, true); err != nil {
		t.Fatal(err)
	}
	if again, _ := LoadCA(cert, key); again.Cert.Equal(first.Cert) {
		t.Fatal("--force kept the old CA")
	}
	if _, err := LoadCA(filepath.Join(dir, "nope.crt"), key); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing certificate: %v, want a not-exist error", err)
	}
}

// makeCA makes a self-signed certificate from tmpl (serial, validity and key filled in) and its key, in PEM.
func makeCA(t *testing.T, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(42)
	tmpl.Subject = pkix.Name{CommonName: "bring your own CA"}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestCAWithoutKeyUsage: a CA certificate with basicConstraints CA:TRUE and no keyUsage extension (what
// `openssl req -x509` makes) may sign: RFC 5280 reads an absent keyUsage as every usage.
func TestCAWithoutKeyUsage(t *testing.T) {
	certPEM, keyPEM := makeCA(t, &x509.Certificate{BasicConstraintsValid: true, IsCA: true})
	b, _ := pem.Decode(certPEM)
	parsed, _ := x509.ParseCertificate(b.Bytes)
	for _, e := range parsed.Extensions {
		if e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 15}) {
			t.Fatal("the test certificate has a keyUsage extension")
		}
	}
	ca, err := ParseCA(certPEM, keyPEM, time.Now())
	if err != nil {
		t.Fatalf("ParseCA of a CA without keyUsage: %v", err)
	}
	leaf, err := ca.Leaf("registry.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "registry.example.com"}); err != nil {
		t.Errorf("leaf from a CA without keyUsage does not verify: %v", err)
	}
}

func TestParseCARefusesNonCA(t *testing.T) {
	for _, tt := range []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"keyUsage without certSign", &x509.Certificate{BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageDigitalSignature}},
		{"CA:FALSE", &x509.Certificate{BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}},
		{"no basicConstraints", &x509.Certificate{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM := makeCA(t, tt.tmpl)
			if _, err := ParseCA(certPEM, keyPEM, time.Now()); err == nil || !strings.Contains(err.Error(), "the certificate is not a CA") {
				t.Fatalf("ParseCA: %v, want a refusal", err)
			}
		})
	}
}
