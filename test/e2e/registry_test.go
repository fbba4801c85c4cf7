package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Credentials accepted by a registry started with registryOpts.auth. The hash is a fixed bcrypt fixture of
// registryPassword at cost 4 (cheap: the registry checks it on every request); golang.org/x/crypto is not in
// the module graph, so it is not generated here. Made with Python: crypt.crypt(pw, crypt.mksalt(METHOD_BLOWFISH, rounds=16)).
const (
	registryUser     = "e2e"
	registryPassword = "e2e-secret"
	registryHtpasswd = registryUser + ":" + registryBcrypt + "\n"
)

type registryOpts struct {
	auth    bool   // htpasswd basic auth with registryUser / registryPassword
	tlsCert string // PEM files; both set: serve HTTPS
	tlsKey  string
	// proxyRemote, when set, runs the registry in distribution's pull-through proxy mode in front of it:
	// the peer that benchmarks compare imagecache with.
	proxyRemote string
}

// registryProc is a CNCF distribution registry on 127.0.0.1 with filesystem storage in a temp dir.
type registryProc struct {
	proc
	Host    string // 127.0.0.1:PORT
	URL     string // http(s)://Host
	DataDir string
	opts    registryOpts
	client  *http.Client
}

// startRegistry runs bin/registry and waits until it answers /v2/. It is stopped when the test ends.
func startRegistry(t testing.TB, opts registryOpts) *registryProc {
	t.Helper()
	bin := tool(t, "registry")
	dir := t.TempDir()
	r := &registryProc{
		Host:    freeAddr(t),
		DataDir: filepath.Join(dir, "data"),
		opts:    opts,
		client:  &http.Client{Timeout: 5 * time.Second},
	}
	scheme := "http"
	if opts.tlsCert != "" {
		scheme = "https"
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(opts.tlsCert)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("registry TLS cert %s: %v", opts.tlsCert, err)
		}
		r.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	r.URL = scheme + "://" + r.Host
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(r.config(t, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.proc = proc{
		name:    "registry",
		path:    bin,
		args:    []string{"serve", cfg},
		env:     []string{"OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true"},
		logPath: filepath.Join(dir, "registry.log"),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registry log tail (%s):\n%s", r.logPath, r.logTail(4096))
		}
		r.proc.stop(t, 5*time.Second)
	})
	r.Start(t)
	return r
}

func (r *registryProc) config(t testing.TB, dir string) string {
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
`, r.DataDir, r.Host)
	if r.opts.tlsCert != "" {
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", r.opts.tlsCert, r.opts.tlsKey)
	}
	if r.opts.proxyRemote != "" {
		cfg += fmt.Sprintf("proxy:\n  remoteurl: %s\n", r.opts.proxyRemote)
	}
	if r.opts.auth {
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(registryHtpasswd), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: e2e\n    path: %s\n", htpasswd)
	}
	return cfg
}

// Start (re)starts the registry on the same port and data, waiting until /v2/ answers.
func (r *registryProc) Start(t testing.TB) {
	t.Helper()
	r.proc.start(t)
	r.waitReady(t)
}

// Stop ends the registry (SIGTERM, then SIGKILL), e.g. to prove the cache serves with its upstream gone.
func (r *registryProc) Stop(t testing.TB) {
	t.Helper()
	r.proc.stop(t, 5*time.Second)
}

// Log returns the registry's output so far, access log included.
func (r *registryProc) Log() string { return r.logTail(1 << 30) }

func (r *registryProc) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if !r.running() {
			t.Fatalf("registry exited while starting (%v); log:\n%s", r.waitErr, r.logTail(4096))
		}
		req, _ := http.NewRequest(http.MethodGet, r.URL+"/v2/", nil)
		if r.opts.auth {
			req.SetBasicAuth(registryUser, registryPassword)
		}
		resp, err := r.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry %s/v2/ not 200 within 20s (last: %v); log:\n%s", r.URL, err, r.logTail(4096))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const registryBcrypt = "$2b$04$J9XAfmNoUxOBSAzE4MHpgu6IcPpnzGR2wDorOYr39zaqR.gidpACy"
