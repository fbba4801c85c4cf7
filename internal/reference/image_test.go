package reference

import (
	"strings"
	"testing"
)

func TestResolveImage(t *testing.T) {
	r := NewRouter([]Upstream{
		{Name: "docker.io", Aliases: []string{"index.docker.io"}, Default: true, DockerHub: true},
		{Name: "local", Aliases: []string{"127.0.0.1:5001"}},
		{Name: "upstream.test"},
	})
	d := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct{ ref, up, repo, tag, err string }{
		{"nginx:1.27", "docker.io", "library/nginx", "1.27", ""},
		{"nginx", "docker.io", "library/nginx", "latest", ""},
		{"docker.io/library/nginx:1.27", "docker.io", "library/nginx", "1.27", ""},
		{"index.docker.io/bitnami/redis", "docker.io", "bitnami/redis", "latest", ""},
		{"127.0.0.1:5001/team/app:v1", "local", "team/app", "v1", ""},
		{"127.0.0.1:5001/team/app@" + d, "local", "team/app", d, ""},
		{"upstream.test/team/app:v1", "upstream.test", "team/app", "v1", ""},
		// The host decides: a repository whose first component names another upstream stays on this one.
		{"upstream.test/local/app:v1", "upstream.test", "local/app", "v1", ""},
		{"registry-1.docker.io/redis:7", "docker.io", "library/redis", "7", ""},
		{"quay.io/org/app:v1", "", "", "", "not one of imagecache's upstreams"},
		{"Team/App:v1", "", "", "", "uppercase"},
		{"team/app:-bad", "", "", "", "TAG_INVALID"},
		{"team/app@md5:abc", "", "", "", "DIGEST_INVALID"},
	} {
		up, repo, tag, err := r.ResolveImage(tc.ref)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error mentioning %q", tc.ref, err, tc.err)
			}
			continue
		}
		if err != nil || up != tc.up || repo != tc.repo || tag != tc.tag {
			t.Errorf("%s: %q %q %q %v, want %q %q %q", tc.ref, up, repo, tag, err, tc.up, tc.repo, tc.tag)
		}
	}
}
