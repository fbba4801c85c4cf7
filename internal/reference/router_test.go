package reference

import (
	"strings"
	"testing"
)

var testUpstreams = []Upstream{
	{Name: "docker.io", Aliases: []string{"index.docker.io", "registry-1.docker.io"}, Default: true, DockerHub: true},
	{Name: "registry.example.com", Aliases: []string{"example"}},
	{Name: "local", Aliases: []string{"127.0.0.1:5001"}},
	{Name: "quay.io"},
}

func TestRoute(t *testing.T) {
	noDefault := []Upstream{testUpstreams[1], testUpstreams[2], {Name: "hub", DockerHub: true}}
	tests := []struct {
		desc       string
		ups        []Upstream
		name, ns   string
		upstream   string
		repository string
		code       string
		want       []string
	}{
		{desc: "prefix", name: "registry.example.com/team/app", upstream: "registry.example.com", repository: "team/app"},
		{desc: "alias prefix", name: "example/team/app", upstream: "registry.example.com", repository: "team/app"},
		{desc: "prefix one component", name: "quay.io/app", upstream: "quay.io", repository: "app"},
		{desc: "prefix beats ns", name: "quay.io/a/b", ns: "registry.example.com", upstream: "quay.io", repository: "a/b"},
		{desc: "ns", name: "team/app", ns: "registry.example.com", upstream: "registry.example.com", repository: "team/app"},
		{desc: "ns case-insensitive", name: "team/app", ns: "Registry.Example.COM", upstream: "registry.example.com", repository: "team/app"},
		{desc: "ns alias with port", name: "team/app", ns: "127.0.0.1:5001", upstream: "local", repository: "team/app"},
		{desc: "ns beats default", name: "app", ns: "quay.io", upstream: "quay.io", repository: "app"},
		{desc: "default", name: "team/app", upstream: "docker.io", repository: "team/app"},
		{desc: "default unknown first component", name: "ghcr.io/x/y", upstream: "docker.io", repository: "ghcr.io/x/y"},

		{desc: "hub library by prefix", name: "docker.io/nginx", upstream: "docker.io", repository: "library/nginx"},
		{desc: "hub library by alias prefix", name: "index.docker.io/nginx", upstream: "docker.io", repository: "library/nginx"},
		{desc: "hub two components by prefix", name: "docker.io/library/nginx", upstream: "docker.io", repository: "library/nginx"},
		{desc: "hub library by ns", ups: noDefault, name: "nginx", ns: "hub", upstream: "hub", repository: "library/nginx"},
		{desc: "hub host ns finds DockerHub upstream", ups: noDefault, name: "nginx", ns: "docker.io", upstream: "hub", repository: "library/nginx"},
		{desc: "hub library by ns alias", name: "nginx", ns: "registry-1.docker.io", upstream: "docker.io", repository: "library/nginx"},
		{desc: "hub library by default", name: "nginx", upstream: "docker.io", repository: "library/nginx"},
		{desc: "hub user repo by default", name: "bitnami/redis", upstream: "docker.io", repository: "bitnami/redis"},
		{desc: "non-hub one component kept", ups: noDefault, name: "app", ns: "registry.example.com", upstream: "registry.example.com", repository: "app"},

		// An upstream name alone is not a prefix: there is no repository.
		{desc: "prefix with nothing after, default", name: "docker.io", upstream: "docker.io", repository: "library/docker.io"},
		{desc: "prefix with nothing after, no default", ups: noDefault, name: "registry.example.com", code: CodeNameUnknown,
			want: []string{`"registry.example.com" is an upstream, but no repository follows it`}},
		{desc: "no default", ups: noDefault, name: "team/app", code: CodeNameUnknown,
			want: []string{`"team/app"`, "registry.example.com (aliases: example)", "local (aliases: 127.0.0.1:5001)", "hub",
				"prefixing", "?ns=", "default: true"}},
		{desc: "no default unknown ns", ups: noDefault, name: "team/app", ns: "ghcr.io", code: CodeNameUnknown,
			want: []string{`registry "ghcr.io" (named by ?ns=`}},
		// Another registry's repository is never served from the default upstream under this one's name.
		{desc: "unknown ns is not the default", name: "team/app", ns: "ghcr.io", code: CodeNameUnknown,
			want: []string{`registry "ghcr.io"`, "never served in its place", "falls back to the registry itself"}},
		{desc: "no upstreams", ups: []Upstream{}, name: "a", code: CodeNameUnknown, want: []string{"no upstream registries are configured"}},
		{desc: "invalid name", name: "A/b", code: CodeNameInvalid},
		{desc: "library makes it too long", name: strings.Repeat("a", 250), code: CodeNameInvalid, want: []string{"258 characters"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			ups := tt.ups
			if ups == nil {
				ups = testUpstreams
			}
			up, repo, err := NewRouter(ups).Route(tt.name, tt.ns)
			checkErr(t, err, tt.code, tt.want...)
			if tt.code == "" && (up != tt.upstream || repo != tt.repository) {
				t.Errorf("Route(%q, %q) = %q, %q; want %q, %q", tt.name, tt.ns, up, repo, tt.upstream, tt.repository)
			}
		})
	}
}

func TestNewRouterCopies(t *testing.T) {
	ups := []Upstream{{Name: "a", Aliases: []string{"b"}}}
	r := NewRouter(ups)
	ups[0].Name, ups[0].Aliases[0] = "x", "y"
	if up, _, err := r.Route("b/repo", ""); err != nil || up != "a" {
		t.Fatalf("Route after caller mutation = %q, %v; want a", up, err)
	}
}

func TestIsDockerHubHost(t *testing.T) {
	for host, want := range map[string]bool{
		"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true, "Docker.IO": true,
		"quay.io": false, "docker.io:443": false, "": false, "hub.docker.com": false,
	} {
		if got := IsDockerHubHost(host); got != want {
			t.Errorf("IsDockerHubHost(%q) = %v, want %v", host, got, want)
		}
	}
}
