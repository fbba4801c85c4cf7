package proxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	// CALifetime is how long `imagecache ca init` makes the CA valid.
	CALifetime = 10 * 365 * 24 * time.Hour
	// LeafLifetime is how long a certificate for an intercepted host is valid. It is short because a leaf
	// is never revoked: it is renewed from memory instead.
	LeafLifetime = 24 * time.Hour
	// leafRenewBefore renews a cached leaf this long before it expires, so a handshake never gets one
	// that expires during a long pull.
	leafRenewBefore = 2 * time.Hour
	// maxLeaves bounds the leaf cache; a proxy only intercepts configured upstreams, so this is plenty.
	maxLeaves = 1024
)

// CA signs the certificates the proxy presents for intercepted hosts.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by lowercase host
	now    func() time.Time
}

// NewCA makes a new self-signed CA: ECDSA P-256, valid for CALifetime. It returns the certificate and
// the private key in PEM.
func NewCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "imagecache proxy CA", Organization: []string{"imagecache"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves, never other CAs
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// ErrCAExists is returned by WriteNewCA when a CA is already there and force is not set.
var ErrCAExists = errors.New("a CA already exists")

// WriteNewCA creates a new CA in certFile and keyFile (the key with mode 0600, the directories created
// as needed). Without force it refuses to replace either file: every client trusts the old certificate.
func WriteNewCA(certFile, keyFile string, force bool) error {
	if !force {
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%w at %s: clients trust it already, so it is kept; pass --force to replace it (and give clients the new certificate)", ErrCAExists, f)
			}
		}
	}
	certPEM, keyPEM, err := NewCA(time.Now())
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	// The key first: a certificate without its key is useless, a key without a certificate is harmless.
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, certPEM, 0o644)
}

func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// LoadCA reads a CA certificate and its private key (PEM; PKCS#8, EC or PKCS#1 keys). It checks that the
// certificate is a CA, is valid now, and matches the key.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	ca, err := ParseCA(certPEM, keyPEM, time.Now())
	if err != nil {
		return nil, fmt.Errorf("CA %s / %s: %w", certFile, keyFile, err)
	}
	return ca, nil
}

// ParseCA is LoadCA on PEM bytes; now is when the certificate must be valid.
func ParseCA(certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	cert, err := parseCertificate(certPEM)
	if err != nil {
		return nil, err
	}
	if !canSignCertificates(cert) {
		return nil, errors.New("the certificate is not a CA (it needs basicConstraints CA:TRUE, and keyCertSign if it has a keyUsage extension); make one with `imagecache ca init`")
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("the CA certificate expired on %s; make a new one with `imagecache ca init --force` and give clients the new certificate", cert.NotAfter.Format(time.DateOnly))
	}
	if now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("the CA certificate is not valid before %s; check the clock", cert.NotBefore.Format(time.RFC3339))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the private key does not belong to the certificate; keep the pair `imagecache ca init` wrote together")
	}
	return &CA{Cert: cert, key: key, leaves: map[string]*tls.Certificate{}, now: time.Now}, nil
}

// oidKeyUsage is the keyUsage extension (RFC 5280, 4.2.1.3).
var oidKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 15}

// canSignCertificates: a CA may sign certificates when its keyUsage allows keyCertSign, or when it has
// no keyUsage extension at all, which RFC 5280 reads as every usage (openssl req -x509 makes such CAs).
func canSignCertificates(c *x509.Certificate) bool {
	if !c.IsCA {
		return false
	}
	if c.KeyUsage&x509.KeyUsageCertSign != 0 {
		return true
	}
	return !slices.ContainsFunc(c.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidKeyUsage) })
}

func parseCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM CERTIFICATE block in the certificate file")
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse the CA certificate: %w", err)
			}
			return c, nil
		}
	}
}

func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM private key block in the key file")
		}
		var (
			k   any
			err error
		)
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parse the CA key: %w", err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("the CA key is a %T, which cannot sign", k)
		}
		return s, nil
	}
}

// PEM returns the CA certificate in PEM, as clients are given it (kapp-controller's caCerts, SSL_CERT_FILE).
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Leaf returns a certificate for host (a DNS name or an IP address), valid for that host only. Leaves are
// kept in memory and renewed before they expire.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("no host to issue a certificate for")
	}
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && now.Add(leafRenewBefore).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	c, err := ca.issue(host, now)
	if err != nil {
		return nil, err
	}
	if len(ca.leaves) >= maxLeaves {
		ca.prune(now)
	}
	ca.leaves[host] = c
	return c, nil
}

// prune drops leaves due for renewal, and when that frees nothing, an arbitrary half: they are cheap to
// make again.
func (ca *CA) prune(now time.Time) {
	for h, c := range ca.leaves {
		if !now.Add(leafRenewBefore).Before(c.Leaf.NotAfter) {
			delete(ca.leaves, h)
		}
	}
	for h := range ca.leaves {
		if len(ca.leaves) < maxLeaves/2 {
			break
		}
		delete(ca.leaves, h)
	}
}

func (ca *CA) issue(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-5 * time.Minute), // tolerate clients whose clock is a little behind
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}
