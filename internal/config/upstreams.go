package config

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"imagecache.io/imagecache/internal/reference"
)

// Upstream is a registry imagecache mirrors.
type Upstream struct {
	// Name is the first path component clients put before a repository
	// (cache:5000/docker.io/library/nginx), so it must be a valid OCI path
	// component.
	Name string
	URL  string
	// Aliases also select this upstream, as a path prefix or as ?ns=; a
	// registry's host:port goes here because a name cannot hold a port.
	Aliases []string
	// Default receives names without a known prefix (Docker's registry-mirrors).
	Default            bool
	Credentials        Credentials
	CAFile             string
	InsecureSkipVerify bool
}

// Credentials authenticate to an upstream. At most one source is used: a
// username and password, a token, or a Docker config file.
type Credentials struct {
	Username, Password, Token, DockerConfig string
}

// DefaultUpstreams are the well-known public registries, mirrored when the
// config has no upstreams key.
func DefaultUpstreams() []Upstream {
	return []Upstream{
		{Name: "docker.io", URL: "https://registry-1.docker.io",
			Aliases: []string{"index.docker.io", "registry-1.docker.io"}, Default: true},
		{Name: "ghcr.io", URL: "https://ghcr.io"},
		{Name: "quay.io", URL: "https://quay.io"},
		{Name: "registry.k8s.io", URL: "https://registry.k8s.io"},
		{Name: "gcr.io", URL: "https://gcr.io"},
		{Name: "mcr.microsoft.com", URL: "https://mcr.microsoft.com"},
		{Name: "public.ecr.aws", URL: "https://public.ecr.aws"},
	}
}

// pathComponent is the OCI distribution spec's grammar for one component of
// a repository name.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`)

// upstreamSet tracks what earlier upstreams claimed, so a clash names both.
type upstreamSet struct {
	owner       map[string]string // name or alias (lowercase) -> "upstreams[i]"
	defaultPath string
}

func (d *decoder) upstreams(n *yaml.Node, path string) []Upstream {
	seen := &upstreamSet{owner: map[string]string{}}
	out := []Upstream{} // an explicit empty list stays empty, not default
	for i, item := range d.list(n, path) {
		out = append(out, d.upstream(item, index(path, i), seen))
	}
	return out
}

func (d *decoder) upstream(n *yaml.Node, path string, seen *upstreamSet) Upstream {
	var u Upstream
	m := d.mapping(n, path, "name", "url", "aliases", "default", "credentials", "caFile", "insecureSkipVerify")
	if n.Kind != yaml.MappingNode && !isNull(n) {
		return u // mapping already reported the wrong type
	}
	u.Name = d.upstreamName(m["name"], n, field(path, "name"), path, seen)
	u.URL = d.upstreamURL(m["url"], n, field(path, "url"))
	if v, ok := m["aliases"]; ok {
		for i, item := range d.list(v, field(path, "aliases")) {
			p := index(field(path, "aliases"), i)
			alias := d.str(item, p)
			if alias == "" || strings.ContainsAny(alias, "/ \t") {
				d.failf(item, p, "%q is not an alias (want a registry host or host:port)", alias)
				continue
			}
			d.claim(seen, item, p, alias, path)
			u.Aliases = append(u.Aliases, alias)
		}
	}
	if v, ok := m["default"]; ok {
		u.Default = d.boolean(v, field(path, "default"))
		if u.Default && seen.defaultPath != "" {
			d.failf(v, field(path, "default"), "only one upstream can be the default, and %s already is", seen.defaultPath)
		} else if u.Default {
			seen.defaultPath = path
		}
	}
	if v, ok := m["credentials"]; ok {
		u.Credentials = d.credentials(v, field(path, "credentials"))
	}
	if v, ok := m["caFile"]; ok {
		u.CAFile = d.readableFile(v, field(path, "caFile"))
	}
	if v, ok := m["insecureSkipVerify"]; ok {
		u.InsecureSkipVerify = d.boolean(v, field(path, "insecureSkipVerify"))
	}
	return u
}

// upstreamName validates the name; parent is the upstream's node, whose line
// is reported when the name is missing.
func (d *decoder) upstreamName(v, parent *yaml.Node, path, owner string, seen *upstreamSet) string {
	if v == nil {
		d.failf(parent, path, "required: the name clients put before repositories, e.g. docker.io")
		return ""
	}
	name := d.str(v, path)
	switch {
	case name == "":
		d.failf(v, path, "required: the name clients put before repositories, e.g. docker.io")
	case strings.Contains(name, ":"):
		d.failf(v, path, "%q is not a valid name: a name cannot hold a port; use a plain name and put the host:port in aliases", name)
	case !pathComponent.MatchString(name):
		d.failf(v, path, "%q is not a valid name (want one OCI path component: lowercase letters and digits separated by '.', '_' or '-')", name)
	default:
		d.claim(seen, v, path, name, owner)
	}
	return name
}

// claim records that owner answers to key, rejecting a key that an earlier
// upstream already answers to: requests for it would be ambiguous.
func (d *decoder) claim(seen *upstreamSet, n *yaml.Node, path, key, owner string) {
	k := strings.ToLower(key)
	if prev, ok := seen.owner[k]; ok {
		if prev == owner {
			d.failf(n, path, "%q is listed twice in this upstream", key)
		} else {
			d.failf(n, path, "%q is already used by %s", key, prev)
		}
		return
	}
	seen.owner[k] = owner
}

func (d *decoder) upstreamURL(v, parent *yaml.Node, path string) string {
	if v == nil {
		d.failf(parent, path, "required: the registry's base URL, e.g. https://registry-1.docker.io")
		return ""
	}
	s := d.str(v, path)
	if err := checkURL(s, false, "http", "https"); err != nil {
		d.fail(v, path, err)
	}
	return s
}

// checkURL accepts an absolute URL with one of schemes and a host.
// allowQuery is false for base URLs, where a query or fragment would be
// dropped or misapplied when paths are appended.
func checkURL(s string, allowQuery bool, schemes ...string) error {
	want := strings.Join(schemes[:len(schemes)-1], ", ") + " or " + schemes[len(schemes)-1]
	if s == "" {
		return fmt.Errorf("required: want an %s URL", want)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", s, err)
	}
	switch {
	case !contains(schemes, u.Scheme):
		return fmt.Errorf("%q: the scheme must be %s", s, want)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return fmt.Errorf("%q holds credentials; put them under credentials instead", s)
	case !allowQuery && (u.RawQuery != "" || u.ForceQuery):
		return fmt.Errorf("%q must not have a query", s)
	case u.Fragment != "":
		return fmt.Errorf("%q must not have a fragment", s)
	}
	return nil
}

func (d *decoder) credentials(n *yaml.Node, path string) Credentials {
	var c Credentials
	m := d.mapping(n, path, "username", "password", "token", "dockerConfig")
	get := func(key string) string {
		if v, ok := m[key]; ok {
			return d.str(v, field(path, key))
		}
		return ""
	}
	c.Username, c.Password, c.Token = get("username"), get("password"), get("token")
	if v, ok := m["dockerConfig"]; ok {
		c.DockerConfig = d.readableFile(v, field(path, "dockerConfig"))
	}
	n = resolve(n)
	switch {
	case c.Username != "" && c.Password == "":
		d.failf(n, field(path, "password"), "required with username")
	case c.Password != "" && c.Username == "":
		d.failf(n, field(path, "username"), "required with password")
	}
	if c.Token != "" && c.Username != "" {
		d.failf(n, field(path, "token"), "cannot be used together with username; choose one")
	}
	if c.DockerConfig != "" && (c.Username != "" || c.Token != "") {
		d.failf(n, field(path, "dockerConfig"), "cannot be used together with username or token; choose one")
	}
	return c
}

// readableFile checks at load time that a referenced file can be opened, so
// a wrong path stops `serve` instead of failing the first pull.
func (d *decoder) readableFile(n *yaml.Node, path string) string {
	name := d.str(n, path)
	if name == "" {
		return ""
	}
	f, err := os.Open(name)
	if err != nil {
		d.failf(n, path, "cannot read the file: %w", err)
		return name
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		d.failf(n, path, "%q is a directory, want a file", name)
	}
	return name
}

// Hosts are the upstream's aliases and its URL's host: every other name a reference, a ?ns= or a policy
// may use for it.
func (u Upstream) Hosts() []string {
	hosts := append([]string(nil), u.Aliases...)
	parsed, err := url.Parse(u.URL)
	if err != nil || parsed.Host == "" || strings.EqualFold(parsed.Host, u.Name) {
		return hosts
	}
	for _, a := range hosts {
		if strings.EqualFold(a, parsed.Host) {
			return hosts
		}
	}
	return append(hosts, parsed.Host)
}

// IsDockerHub reports whether the upstream is Docker Hub, where a one-component repository is an official
// image, library/<name>.
func (u Upstream) IsDockerHub() bool {
	if reference.IsDockerHubHost(u.Name) {
		return true
	}
	return slices.ContainsFunc(u.Hosts(), reference.IsDockerHubHost)
}

// upstreamNamed finds the upstream that s names: its name, an alias or its URL's host.
func (c *Config) upstreamNamed(s string) (Upstream, bool) {
	for _, u := range c.Upstreams {
		if strings.EqualFold(u.Name, s) || slices.ContainsFunc(u.Hosts(), func(h string) bool { return strings.EqualFold(h, s) }) {
			return u, true
		}
	}
	return Upstream{}, false
}
