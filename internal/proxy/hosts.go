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

// hostTable recognises hosts of configured upstreams.
type hostTable struct {
	// hosts maps a lowercase host (no port) to the upstream and the ports it is intercepted on
	// besides the scheme's default.
	hosts map[string]*hostEntry
}

type hostEntry struct {
	upstream string
	ports    []string
}

func newHostTable(ups []Upstream) (*hostTable, error) {
	t := &hostTable{hosts: map[string]*hostEntry{}}
	for _, u := range ups {
		var urlPort string
		names := append([]string{u.Name}, u.Aliases...)
		if u.URL != "" {
			parsed, err := url.Parse(u.URL)
			if err != nil {
				return nil, fmt.Errorf("upstream %s: url %q: %w", u.Name, u.URL, err)
			}
			urlPort = parsed.Port()
			if urlPort == "" {
				urlPort = map[string]string{"http": "80", "https": "443"}[parsed.Scheme]
			}
			names = append(names, parsed.Host)
		}
		for _, n := range names {
			host, port := splitHostPort(n)
			if host == "" {
				continue
			}
			e := t.hosts[host]
			if e == nil {
				e = &hostEntry{upstream: u.Name}
				t.hosts[host] = e
			} else if e.upstream != u.Name {
				// Config validation keeps names and aliases unique; a URL host shared by two
				// upstreams stays with the first, as the router's aliases do.
				continue
			}
			for _, p := range []string{port, urlPort} {
				if p != "" && !slices.Contains(e.ports, p) {
					e.ports = append(e.ports, p)
				}
			}
		}
	}
	return t, nil
}

// lookup finds the upstream for host:port. defaultPort is 443 for CONNECT, 80 for plain http. known
// reports whether the host belongs to an upstream at all, so a wrong port can be told apart from a
// stranger.
func (t *hostTable) lookup(host, port, defaultPort string) (tgt *target, known bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	e, ok := t.hosts[host]
	if !ok {
		return nil, false
	}
	if port == defaultPort || port == "443" || slices.Contains(e.ports, port) {
		return &target{upstream: e.upstream, host: host}, true
	}
	return nil, true
}

// ports lists the ports host is intercepted on, for error messages.
func (t *hostTable) ports(host, defaultPort string) string {
	ps := []string{defaultPort}
	if defaultPort != "443" {
		ps = append(ps, "443")
	}
	if e, ok := t.hosts[strings.ToLower(host)]; ok {
		for _, p := range e.ports {
			if !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
	}
	return strings.Join(ps, ", ")
}

// names lists the hosts the proxy intercepts, for error messages.
func (t *hostTable) names() string {
	var hs []string
	for h := range t.hosts {
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
