package policy

import (
	"strings"
	"testing"
)

func TestParsePull(t *testing.T) {
	for _, s := range []string{"Always", "IfNotPresent", "Never"} {
		if p, err := ParsePull(s); err != nil || string(p) != s {
			t.Errorf("ParsePull(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "always", "Sometimes"} {
		_, err := ParsePull(s)
		if err == nil {
			t.Fatalf("ParsePull(%q): no error", s)
		}
		if !strings.Contains(err.Error(), "Always, IfNotPresent or Never") {
			t.Errorf("ParsePull(%q) error %q does not list the valid words", s, err)
		}
	}
}

func TestRulesFor(t *testing.T) {
	rules := Rules{
		List: []Rule{
			{Upstream: "docker.io", Repository: "library/**", Tag: "latest", Pull: Always},
			{Upstream: "docker.io", Repository: "library/**", Pull: IfNotPresent},
			{Upstream: "*", Repository: "frozen/*", Tag: "*", Pull: Never},
		},
		Default: Rule{Pull: Always, StaleIfError: true},
	}
	tests := []struct {
		upstream, repo, tag string
		want                Pull
		isDefault           bool
	}{
		{"docker.io", "library/nginx", "latest", Always, false},
		{"docker.io", "library/nginx", "1.27", IfNotPresent, false},
		{"docker.io", "library/nginx", "", IfNotPresent, false}, // digest: "" tag pattern matches
		{"ghcr.io", "frozen/app", "v1", Never, false},
		{"ghcr.io", "frozen/app", "", Never, false}, // digest: "*" matches ""
		{"ghcr.io", "frozen/a/b", "v1", Always, true},
		{"quay.io", "other", "latest", Always, true},
	}
	for _, tt := range tests {
		got := rules.For(tt.upstream, tt.repo, tt.tag)
		if got.Pull != tt.want || (got == rules.Default) != tt.isDefault {
			t.Errorf("For(%q, %q, %q) = %+v, want pull %s (default %v)",
				tt.upstream, tt.repo, tt.tag, got, tt.want, tt.isDefault)
		}
	}
}

func TestRulesForDigestSkipsTagRules(t *testing.T) {
	rules := Rules{
		List:    []Rule{{Tag: "latest", Pull: Never}, {Tag: "**", Pull: IfNotPresent}},
		Default: Rule{Pull: Always},
	}
	if got := rules.For("docker.io", "library/nginx", ""); got.Pull != IfNotPresent {
		t.Errorf("digest lookup got %s, want the \"**\" rule", got.Pull)
	}
}
