// Package upstream talks to the registries behind the cache: authentication (anonymous, basic, bearer token
// flows and docker config files, all through go-containerregistry's transport), TLS settings, and timeouts
// that bound how long a client can be kept waiting. It knows nothing of the store.
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	icconfig "imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/reference"
)

// Client fetches from one configured upstream registry.
type Client struct {
	name   string
	hosts  []string // what credentials in a docker config may be keyed by
	scheme string   // http or https, exactly as configured
	reg    name.Registry
	auth   authn.Authenticator
	base   http.RoundTripper

	log *slog.Logger

	mu         sync.Mutex
	transports map[string]http.RoundTripper // authenticated transport per repository (token scopes are per repository)

	silence silence
}

// New prepares a client for the upstream u. wrap, when not nil, wraps the bottom HTTP transport (metrics);
// log, when not nil, is told when the upstream stops and starts answering.
func New(u icconfig.Upstream, wrap func(upstream string, rt http.RoundTripper) http.RoundTripper, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	parsed, err := url.Parse(u.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: url %q: %w", u.Name, u.URL, err)
	}
	var opts []name.Option
	if parsed.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(parsed.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: url %q: %w", u.Name, u.URL, err)
	}
	auth, err := authenticator(u, parsed.Host)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
	}
	base, err := baseTransport(u)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
	}
	// Metrics wrap the transport below the scheme pin: the https attempt of go-containerregistry's ping at
	// an http upstream is refused here, never sent, and must not count as a failed upstream request.
	var bottom http.RoundTripper = base
	if wrap != nil {
		bottom = wrap(u.Name, base)
	}
	var rt http.RoundTripper = &pinnedScheme{host: parsed.Host, scheme: parsed.Scheme, next: bottom}
	hosts := append([]string{parsed.Host, u.Name}, u.Aliases...)
	if reference.IsDockerHubHost(u.Name) || reference.IsDockerHubHost(parsed.Host) {
		hosts = append(hosts, authn.DefaultAuthKey)
	}
	return &Client{name: u.Name, hosts: hosts, scheme: parsed.Scheme, reg: reg, auth: auth, base: rt, log: log, transports: map[string]http.RoundTripper{}, silence: newSilence()}, nil
}

// Name is the configured name of the upstream.
func (c *Client) Name() string { return c.name }

func authenticator(u icconfig.Upstream, host string) (authn.Authenticator, error) {
	cr := u.Credentials
	switch {
	case cr.Token != "":
		return &authn.Bearer{Token: cr.Token}, nil
	case cr.Username != "":
		return &authn.Basic{Username: cr.Username, Password: cr.Password}, nil
	case cr.DockerConfig != "":
		f, err := os.Open(cr.DockerConfig)
		if err != nil {
			return nil, fmt.Errorf("read dockerConfig: %w", err)
		}
		defer f.Close()
		cf, err := config.LoadFromReader(f)
		if err != nil {
			return nil, fmt.Errorf("parse dockerConfig %s: %w", cr.DockerConfig, err)
		}
		// Docker Hub's entry is historically keyed by its v1 URL.
		keys := []string{host}
		for _, a := range append([]string{u.Name}, u.Aliases...) {
			keys = append(keys, a)
			if a == name.DefaultRegistry || a == "docker.io" {
				keys = append(keys, authn.DefaultAuthKey)
			}
		}
		for _, k := range keys {
			ac, err := cf.GetAuthConfig(k)
			if err != nil {
				return nil, fmt.Errorf("dockerConfig %s: %w", cr.DockerConfig, err)
			}
			if ac.Username != "" || ac.IdentityToken != "" || ac.RegistryToken != "" {
				return authn.FromConfig(authn.AuthConfig{Username: ac.Username, Password: ac.Password,
					IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}), nil
			}
		}
		return nil, fmt.Errorf("dockerConfig %s has no credentials for %s", cr.DockerConfig, host)
	}
	return authn.Anonymous, nil
}

func baseTransport(u icconfig.Upstream) (*http.Transport, error) {
	tlsConfig := &tls.Config{InsecureSkipVerify: u.InsecureSkipVerify} //nolint:gosec // opt-in per upstream
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read caFile: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %s holds no PEM certificate", u.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}, nil
}

// pinnedScheme refuses requests to the upstream's own host over the scheme it was not configured with.
// go-containerregistry's ping tries https and then http for loopback and private-network hosts; without this
// an https upstream whose certificate fails would be retried over plain http, and an http upstream would
// first see a TLS handshake. Redirects to other hosts (blob storage) are not affected.
type pinnedScheme struct {
	host, scheme string
	next         http.RoundTripper
}

func (p *pinnedScheme) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == p.host && req.URL.Scheme != p.scheme {
		return nil, fmt.Errorf("not using %s: the upstream is configured as %s://%s", req.URL.Scheme, p.scheme, p.host)
	}
	return p.next.RoundTrip(req)
}

// transport returns the authenticated transport for a repository, doing the registry's auth handshake
// (ping, token) on first use. Failures are not remembered: the next request tries again.
func (c *Client) transport(ctx context.Context, repository string) (http.RoundTripper, error) {
	key, auth := repository, c.auth
	if a, ok := authFrom(ctx); ok {
		key, auth = repository+"\x00"+a.id, a.auth
	}
	c.mu.Lock()
	rt, ok := c.transports[key]
	c.mu.Unlock()
	if ok {
		return rt, nil
	}
	repo := c.reg.Repo(repository)
	rt, err := transport.NewWithContext(ctx, c.reg, auth, c.base, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.transports) >= maxTransports {
		// Bound the memory a cache fronting very many repositories spends on tokens: forgetting them all
		// costs one auth handshake per repository next time, which is what a token expiry costs anyway.
		clear(c.transports)
	}
	c.transports[key] = rt
	c.mu.Unlock()
	return rt, nil
}

// maxTransports bounds the authenticated transports (one per repository and credentials) kept per upstream.
const maxTransports = 4096
