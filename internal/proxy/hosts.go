package proxy

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Upstream is what the proxy needs to know of a configured upstream to recognise requests for it.
type Upstream struct {
	Name    string   // the upstream's name: the path prefix requests are rewritten to
	Aliases []string // hosts, with or without a port
	URL     string   // where the cache fetches from; its host is recognised too
}

// target is an intercepted upstream: the name requests are addressed to.
type target struct {
	upstream string
	host     string // the host the client asked for, without port
}

// hostTable recognises hosts of configured upstreams by host and port: several upstreams may share a
// host (registries on 127.0.0.1:5001 and 127.0.0.1:5002), and only the port tells them apart.
type hostTable struct {
	// exact maps a lowercase "host:port" to the upstream intercepted there.
	exact map[string]string
	// first maps each known host to the first upstream that names it. That upstream also gets the host
	// on 443 and on the plain-http port when no upstream claims those exactly.
	first map[string]string
	// ports lists the ports claimed on each host, in config order, for error messages.
	ports map[string][]string
}

func newHostTable(ups []Upstream) (*hostTable, error) {
	t := &hostTable{exact: map[string]string{}, first: map[string]string{}, ports: map[string][]string{}}
	urlPorts := make([]string, len(ups))
	// Two passes: a host:port someone wrote down (an alias with a port, a url) beats the ports a bare
	// name is given implicitly, whatever the order of the upstreams.
	for i, u := range ups {
		host, port, err := urlHostPort(u)
		if err != nil {
			return nil, err
		}
		urlPorts[i] = port
		t.claim(host, port, u.Name)
		for _, a := range u.Aliases {
			if h, p := splitHostPort(a); p != "" {
				t.claim(h, p, u.Name)
			}
		}
	}
	for i, u := range ups {
		for _, n := range append([]string{u.Name}, u.Aliases...) {
			if h, p := splitHostPort(n); p == "" {
				// A bare name is the registry's default port, and (as clients name a registry on a
				// port by a name plus that port) the port of the upstream's url.
				t.claim(h, "443", u.Name)
				t.claim(h, urlPorts[i], u.Name)
			}
		}
	}
	return t, nil
}

// urlHostPort is the host of an upstream's url and its port, explicit or the scheme's default.
func urlHostPort(u Upstream) (host, port string, err error) {
	if u.URL == "" {
		return "", "", nil
	}
	parsed, err := url.Parse(u.URL)
	if err != nil {
		return "", "", fmt.Errorf("upstream %s: url %q: %w", u.Name, u.URL, err)
	}
	port = parsed.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[parsed.Scheme]
	}
	return strings.ToLower(parsed.Hostname()), port, nil
}

// claim gives host:port to upstream unless an earlier claim has it: config validation keeps names and
// aliases unique, but a url host:port may be shared, and then it stays with the first, as the router's
// aliases do.
func (t *hostTable) claim(host, port, upstream string) {
	if host == "" {
		return
	}
	if _, ok := t.first[host]; !ok {
		t.first[host] = upstream
	}
	if port == "" {
		return
	}
	if key := net.JoinHostPort(host, port); t.exact[key] == "" {
		t.exact[key] = upstream
	}
	if !slices.Contains(t.ports[host], port) {
		t.ports[host] = append(t.ports[host], port)
	}
}

// lookup finds the upstream for host:port. defaultPort is 443 for CONNECT, 80 for plain http. known
// reports whether the host belongs to an upstream at all, so a wrong port can be told apart from a
// stranger.
func (t *hostTable) lookup(host, port, defaultPort string) (tgt *target, known bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if up, ok := t.exact[net.JoinHostPort(host, port)]; ok {
		return &target{upstream: up, host: host}, true
	}
	up, ok := t.first[host]
	if !ok {
		return nil, false
	}
	if port == defaultPort || port == "443" {
		return &target{upstream: up, host: host}, true
	}
	return nil, true
}

// portList lists the ports host is intercepted on, for error messages.
func (t *hostTable) portList(host, defaultPort string) string {
	ps := []string{defaultPort}
	if defaultPort != "443" {
		ps = append(ps, "443")
	}
	for _, p := range t.ports[strings.ToLower(host)] {
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return strings.Join(ps, ", ")
}

// names lists the hosts the proxy intercepts, for error messages.
func (t *hostTable) names() string {
	var hs []string
	for h := range t.first {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	return strings.Join(hs, ", ")
}

// splitHostPort splits "host", "host:port", "[v6]:port" or "v6" into a lowercase host and a port.
func splitHostPort(s string) (host, port string) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return strings.ToLower(strings.Trim(h, "[]")), p
	}
	return strings.ToLower(strings.Trim(s, "[]")), ""
}

// parseAuthority checks a CONNECT target: host:port with a non-empty host and a numeric port.
func parseAuthority(s string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(s)
	if err != nil {
		return "", "", fmt.Errorf("%q is not host:port", s)
	}
	if host == "" || strings.ContainsAny(host, "/@?#% ") {
		return "", "", fmt.Errorf("%q has no valid host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("%q has no valid port", s)
	}
	return host, port, nil
}
