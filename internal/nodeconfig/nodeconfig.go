// Package nodeconfig renders the files that make a node's container runtime pull through imagecache:
// containerd hosts.toml files (one per registry) and a CRI-O/podman registries.conf drop-in.
package nodeconfig

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
)

// Marker starts every file this package renders, so a later run can tell its own files from a person's.
const Marker = "# Written by imagecache node-config"

// CRIOFile is the registries.conf drop-in's name: registries.conf.d files are read in lexical order and a
// later [[registry]] with the same prefix wins, so 50 leaves room on both sides.
const CRIOFile = "50-imagecache.conf"

// Registry is a registry host that nodes pull from.
type Registry struct {
	// Host is the registry as image references name it: docker.io, ghcr.io, 10.0.0.5:5000.
	Host string
	// Name is the cache's upstream name or alias for Host, the first path component of a CRI-O mirror
	// location. It is Host unless Host has a port, which cannot be a path component.
	Name string
}

// Options says what to render.
type Options struct {
	Server      *url.URL // how nodes reach the cache: scheme and host only (see ParseServer)
	Registries  []Registry
	DialTimeout time.Duration // containerd's dial_timeout for the cache; 0 leaves the key out
}

// File is one rendered file; Path is relative to the runtime's config directory, with slashes.
type File struct {
	Path string
	Data []byte
}

// hostRE is a registry host with an optional port, as it appears in an image reference.
var hostRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]{1,5})?$`)

// nameRE is one OCI path component (distribution's reference grammar).
var nameRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)

// ParseServer checks the URL nodes use to reach the cache: http or https, a host, nothing else.
func ParseServer(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("--server %q: want the URL nodes reach the cache at, like http://imagecache.imagecache.svc:5000", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--server %q: want only scheme, host and port (the cache serves /v2/ at its root), like %s://%s", s, u.Scheme, u.Host)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// ParseRegistry parses HOST or HOST=NAME, where NAME is the cache's upstream name for HOST.
func ParseRegistry(s string) (Registry, error) {
	host, name, named := strings.Cut(s, "=")
	// Host names are case-insensitive, but containerd finds hosts.toml by the directory named after the
	// registry as image references spell it, which is lowercase: Docker.IO must become docker.io.
	host = strings.ToLower(host)
	if strings.Contains(host, "://") || strings.Contains(host, "/") {
		return Registry{}, fmt.Errorf("--registry %q: want a registry host as image references name it (docker.io, 10.0.0.5:5000), not a URL or path", s)
	}
	if !hostRE.MatchString(host) {
		return Registry{}, fmt.Errorf("--registry %q: %q is not a registry host[:port]", s, host)
	}
	if !named {
		name = host
	}
	r := Registry{Host: host, Name: name}
	if named && !nameRE.MatchString(name) {
		return Registry{}, fmt.Errorf("--registry %q: upstream name %q is not a valid OCI path component", s, name)
	}
	return r, nil
}

// Endpoint returns the registry's real API endpoint, where containerd falls back when the cache is down.
func Endpoint(host string) *url.URL {
	switch host {
	case "docker.io", "index.docker.io", "registry-1.docker.io":
		return &url.URL{Scheme: "https", Host: "registry-1.docker.io"}
	}
	return &url.URL{Scheme: "https", Host: host}
}

// Containerd renders <registry>/hosts.toml for every registry: the cache as a pull+resolve mirror (tried
// first; containerd adds ?ns=<registry>, which the cache matches against upstream names and aliases),
// then the registry itself as the fallback server.
func Containerd(o Options) []File {
	files := make([]File, 0, len(o.Registries))
	for _, r := range o.Registries {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: pull %s through the cache, falling back to the registry.\n", Marker, r.Host)
		fmt.Fprintf(&b, "server = %s\n\n", quote(Endpoint(r.Host).String()))
		// containerd takes plain HTTP from the http:// scheme of the host key; there is no separate flag.
		fmt.Fprintf(&b, "[host.%s]\n", quote(o.Server.String()))
		b.WriteString("  capabilities = [\"pull\", \"resolve\"]\n")
		if o.DialTimeout > 0 {
			// containerd 2.1 (and late 2.0 patch releases; containerd PR #11106) gives up on an unreachable
			// cache after this long and goes on to server. Older versions decode hosts.toml leniently and
			// ignore the key, keeping their 30s dial timeout: Debian's 1.6.20 has no dial_timeout in its
			// binary and pulls fine with the key present (test/e2e/nodeconfig_test.go).
			fmt.Fprintf(&b, "  dial_timeout = %s\n", quote(o.DialTimeout.String()))
		}
		files = append(files, File{Path: path.Join(r.Host, "hosts.toml"), Data: []byte(b.String())})
	}
	return files
}

// CRIO renders one registries.conf drop-in: per registry, the registry itself as location and the cache,
// addressed by path prefix (<cache>/<upstream name>), as its mirror.
func CRIO(o Options) (File, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: pull through the cache at %s, falling back to each registry.\n", Marker, o.Server)
	for _, r := range o.Registries {
		if !nameRE.MatchString(r.Name) {
			return File{}, fmt.Errorf("--registry %s: a CRI-O mirror addresses the cache by path (%s/<name>/...), and %q cannot be a path component; give the cache's upstream name for it: --registry %s=<name>",
				r.Host, o.Server.Host, r.Name, r.Host)
		}
		fmt.Fprintf(&b, "\n[[registry]]\nprefix = %s\nlocation = %s\n", quote(r.Host), quote(Endpoint(r.Host).Host))
		fmt.Fprintf(&b, "\n[[registry.mirror]]\nlocation = %s\n", quote(o.Server.Host+"/"+r.Name))
		if o.Server.Scheme == "http" {
			b.WriteString("insecure = true\n")
		}
	}
	return File{Path: CRIOFile, Data: []byte(b.String())}, nil
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
