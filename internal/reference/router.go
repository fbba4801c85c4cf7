package reference

import (
	"fmt"
	"strings"
)

// Upstream is what the router needs to know of a configured upstream.
type Upstream struct {
	Name    string   // a valid name component; the path prefix and a ?ns= value
	Aliases []string // more prefixes and ?ns= values; a host:port can only be matched by ?ns=
	Default bool     // serves names that match no prefix or ?ns= (Docker's registry-mirrors)
	// DockerHub makes a one-component repository "library/<name>", as Docker
	// Hub resolves official images.
	DockerHub bool
}

// Router maps a client-facing name to an upstream and a repository on it.
// It is immutable after NewRouter and safe for concurrent use.
type Router struct {
	ups []Upstream
	def int // index of the first Default upstream, or -1
}

// NewRouter builds a Router. The slice is copied, so later changes by the
// caller do not race with Route. The first upstream marked Default is the
// default; config validation is expected to reject more than one.
func NewRouter(ups []Upstream) *Router {
	r := &Router{ups: make([]Upstream, len(ups)), def: -1}
	for i, u := range ups {
		u.Aliases = append([]string(nil), u.Aliases...)
		r.ups[i] = u
		if u.Default && r.def < 0 {
			r.def = i
		}
	}
	return r
}

// Route returns the upstream name and the repository on that upstream for a
// client-facing name and the ?ns= query value. First match wins:
//
//  1. the first component of name is an upstream's Name or Alias and
//     something follows it: that upstream, the rest is the repository;
//  2. ns names an upstream (Name or Alias, case-insensitive, as containerd
//     sends a host such as "docker.io" or "127.0.0.1:5001"): that upstream,
//     the whole name is the repository;
//  3. without ns, the Default upstream, the whole name is the repository.
//
// An ns that names no upstream is NAME_UNKNOWN, never the default: the
// client asked for that registry's content, and the default upstream's
// repository of the same name is someone else's (anyone can publish
// docker.io/<org>/<repo>). containerd then falls back to the registry
// itself. Failing all three, the error is NAME_UNKNOWN and explains the ways.
func (r *Router) Route(name, ns string) (upstream, repository string, err error) {
	if err := ValidateName(name); err != nil {
		return "", "", err
	}
	u, repo := r.match(name, ns)
	if u == nil {
		return "", "", r.unknown(name, ns)
	}
	return u.on(repo)
}

// OnHost routes a repository named together with its registry host, as an image reference
// (registry.test/team/app) or an oci:// URL names it: the upstream whose name or alias is host (any Docker
// Hub host finds the Docker Hub upstream), and the repository as it is but for Docker Hub's library/ rule.
// Unlike Route, neither a path prefix nor the default upstream applies: the host decides. ok is false when
// no upstream serves host.
func (r *Router) OnHost(host, name string) (upstream, repository string, ok bool, err error) {
	if err := ValidateName(name); err != nil {
		return "", "", true, err
	}
	u := r.byHost(host)
	if u == nil {
		return "", "", false, nil
	}
	upstream, repository, err = u.on(name)
	return upstream, repository, true, err
}

// Names lists the configured upstreams' names, for messages.
func (r *Router) Names() []string {
	names := make([]string, len(r.ups))
	for i, u := range r.ups {
		names[i] = u.Name
	}
	return names
}

// on is the repository name on u for a client-facing one: Docker Hub's official images get "library/".
func (u *Upstream) on(name string) (upstream, repository string, err error) {
	if u.DockerHub && !strings.Contains(name, "/") {
		name = "library/" + name
	}
	// Only "library/" can make a valid name invalid (by length), but
	// validating here keeps the promise whatever the rules become.
	if err := ValidateName(name); err != nil {
		return "", "", err
	}
	return u.Name, name, nil
}

func (r *Router) byHost(host string) *Upstream {
	for i := range r.ups {
		if r.ups[i].is(host) {
			return &r.ups[i]
		}
	}
	if IsDockerHubHost(host) {
		for i := range r.ups {
			if r.ups[i].DockerHub {
				return &r.ups[i]
			}
		}
	}
	return nil
}

func (r *Router) match(name, ns string) (*Upstream, string) {
	if first, rest, ok := strings.Cut(name, "/"); ok {
		for i := range r.ups {
			if r.ups[i].is(first) {
				return &r.ups[i], rest
			}
		}
	}
	// containerd sends ns=docker.io for Docker Hub whatever the upstream
	// is called here, so byHost finds the Docker Hub upstream for any of
	// its hosts even without aliases.
	if ns != "" {
		return r.byHost(ns), name
	}
	if r.def >= 0 {
		return &r.ups[r.def], name
	}
	return nil, ""
}

// is compares case-insensitively: hosts are, and a name component that
// reached here is already lowercase.
func (u *Upstream) is(s string) bool {
	if strings.EqualFold(u.Name, s) {
		return true
	}
	for _, a := range u.Aliases {
		if strings.EqualFold(a, s) {
			return true
		}
	}
	return false
}

func (r *Router) unknown(name, ns string) *Error {
	if len(r.ups) == 0 {
		return errorf(CodeNameUnknown, "repository %s cannot be served: no upstream registries are configured", quote(name))
	}
	var b strings.Builder
	if ns != "" {
		fmt.Fprintf(&b, "registry %s (named by ?ns=, as containerd sends for a hosts.toml mirror) is not one of imagecache's upstreams, "+
			"and another registry's repository of the same name is never served in its place. Add it to upstreams (as a name or an alias), "+
			"or remove this mirror from its hosts.toml; containerd falls back to the registry itself meanwhile. Configured upstreams: ", quote(ns))
		r.list(&b)
		return &Error{Code: CodeNameUnknown, Message: b.String()}
	}
	fmt.Fprintf(&b, "repository %s does not name a configured upstream", quote(name))
	if first, _, ok := strings.Cut(name, "/"); !ok && r.names(first) {
		fmt.Fprintf(&b, " (%s is an upstream, but no repository follows it)", quote(first))
	}
	b.WriteString(" and no upstream is the default. Configured upstreams: ")
	r.list(&b)
	example := r.ups[0].Name
	fmt.Fprintf(&b, ". Address an upstream by (1) prefixing the name with it, e.g. %s/<repository>; "+
		"(2) a ?ns=<registry host> query naming it (containerd hosts.toml mirrors send this); "+
		"or (3) marking one upstream default: true in the config (for Docker's registry-mirrors)", example)
	return &Error{Code: CodeNameUnknown, Message: b.String()}
}

// list writes the configured upstreams and their aliases.
func (r *Router) list(b *strings.Builder) {
	for i, u := range r.ups {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(u.Name)
		if len(u.Aliases) > 0 {
			fmt.Fprintf(b, " (aliases: %s)", strings.Join(u.Aliases, ", "))
		}
	}
}

// names reports whether s is some upstream's name or alias.
func (r *Router) names(s string) bool {
	for i := range r.ups {
		if r.ups[i].is(s) {
			return true
		}
	}
	return false
}

// IsDockerHubHost reports whether host is one of Docker Hub's registry hosts.
func IsDockerHubHost(host string) bool {
	switch strings.ToLower(host) {
	case "docker.io", "index.docker.io", "registry-1.docker.io":
		return true
	}
	return false
}
