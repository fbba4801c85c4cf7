package config

import (
	"testing"

	"imagecache.io/imagecache/internal/policy"
)

// The example the README points users at must keep parsing, with the meaning its comments claim.
func TestShippedExampleConfig(t *testing.T) {
	cfg, err := Load("../../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Upstreams) != 4 || !cfg.Upstreams[0].Default {
		t.Fatalf("upstreams %+v", cfg.Upstreams)
	}
	rules := cfg.Rules()
	for _, tc := range []struct {
		upstream, repo, tag string
		want                policy.Pull
	}{
		{"docker.io", "library/nginx", "v1.27", policy.IfNotPresent},
		{"ghcr.io", "org/app", "latest", policy.Always},
		{"local", "frozen/app", "1.0", policy.Never},
		{"quay.io", "org/app", "1.0", policy.Always},
	} {
		if got := rules.For(tc.upstream, tc.repo, tc.tag).Pull; got != tc.want {
			t.Errorf("%s/%s:%s: %s, want %s", tc.upstream, tc.repo, tc.tag, got, tc.want)
		}
	}
}
