package reference

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// The spec's regular expressions, used only as an oracle for the
// hand-written validators.
var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	digestRE = regexp.MustCompile(`^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$`)
)

func addPathSeeds(f *testing.F) {
	for _, s := range []string{
		"nginx/manifests/latest", "docker.io/library/nginx/manifests/" + sha256,
		"a/blobs/" + sha512, "a/blobs/uploads/", "a/blobs/uploads/x/y", "a/tags/list",
		"a/referrers/" + sha256, "a/manifests/b/manifests/c", "a/../manifests/x", "a//b/tags/list",
		"/a/tags/list", "a/manifests/", "a%2f/tags/list", "tags/list", "", "a/b/",
	} {
		f.Add(s)
	}
}

func FuzzParsePath(f *testing.F) {
	addPathSeeds(f)
	f.Fuzz(func(t *testing.T, p string) {
		req, err := ParsePath(p)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" || e.Message == "" {
				t.Fatalf("ParsePath(%q) error %v is not a complete *Error", p, err)
			}
			return
		}
		checkName(t, req.Name)
		if !strings.HasPrefix(p, req.Name+"/") {
			t.Fatalf("name %q is not a prefix of %q", req.Name, p)
		}
		switch req.Kind {
		case Manifest:
			if !digestRE.MatchString(req.Reference) && !tagRE.MatchString(req.Reference) {
				t.Fatalf("manifest reference %q is neither tag nor digest", req.Reference)
			}
		case Blob, Referrers:
			if !digestRE.MatchString(req.Reference) {
				t.Fatalf("%v reference %q is not a digest", req.Kind, req.Reference)
			}
		case TagsList:
			if req.Reference != "" || !strings.HasSuffix(p, "/tags/list") {
				t.Fatalf("tags list from %q has reference %q", p, req.Reference)
			}
		case BlobUpload:
			if !strings.Contains(p, "/blobs/uploads") {
				t.Fatalf("upload kind from %q", p)
			}
		default:
			t.Fatalf("unknown kind %d", req.Kind)
		}
	})
}

// checkName asserts what every successful result promises about a name.
func checkName(t *testing.T, name string) {
	t.Helper()
	if err := ValidateName(name); err != nil {
		t.Fatalf("name %q: %v", name, err)
	}
	if !nameRE.MatchString(name) || len(name) > MaxNameLength {
		t.Fatalf("name %q does not match the spec grammar", name)
	}
	if strings.HasPrefix(name, "/") {
		t.Fatalf("name %q has a leading '/'", name)
	}
	for c := range strings.SplitSeq(name, "/") {
		if c == ".." || c == "." || c == "" {
			t.Fatalf("name %q has component %q", name, c)
		}
	}
}

func FuzzRoute(f *testing.F) {
	for _, s := range []struct{ name, ns string }{
		{"nginx", ""}, {"docker.io/nginx", ""}, {"example/a/b", ""}, {"a/b", "127.0.0.1:5001"},
		{"docker.io", ""}, {"local", "ghcr.io"}, {"A", ""}, {strings.Repeat("a", 250), ""},
	} {
		f.Add(s.name, s.ns, false)
		f.Add(s.name, s.ns, true)
	}
	withDefault := NewRouter(testUpstreams)
	without := NewRouter(testUpstreams[1:])
	f.Fuzz(func(t *testing.T, name, ns string, useDefault bool) {
		r := without
		if useDefault {
			r = withDefault
		}
		up, repo, err := r.Route(name, ns)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" || e.Message == "" {
				t.Fatalf("Route(%q, %q) error %v is not a complete *Error", name, ns, err)
			}
			return
		}
		checkName(t, repo)
		var u *Upstream
		for i := range testUpstreams {
			if testUpstreams[i].Name == up {
				u = &testUpstreams[i]
			}
		}
		if u == nil {
			t.Fatalf("Route(%q, %q) upstream %q is not configured", name, ns, up)
		}
		if u.DockerHub && !strings.Contains(repo, "/") {
			t.Fatalf("Docker Hub repository %q has one component", repo)
		}
		tail := repo
		if u.DockerHub {
			// Only a one-component name gets "library/".
			if rest, ok := strings.CutPrefix(repo, "library/"); ok && !strings.Contains(rest, "/") {
				tail = rest
			}
		}
		if name != tail && !strings.HasSuffix(name, "/"+tail) {
			t.Fatalf("repository %q is not taken from name %q", repo, name)
		}
	})
}

func FuzzValidators(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a__b", "a---b", "a..b", "A", "", sha256, sha512, "md5:ab", "_t", ".t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidateName(s) == nil, nameRE.MatchString(s) && len(s) <= MaxNameLength; got != want {
			t.Fatalf("ValidateName(%q) ok = %v, spec says %v", s, got, want)
		}
		if got, want := ValidateTag(s) == nil, tagRE.MatchString(s); got != want {
			t.Fatalf("ValidateTag(%q) ok = %v, spec says %v", s, got, want)
		}
		d, err := ParseDigest(s)
		if got, want := err == nil, digestRE.MatchString(s); got != want || (got && d != s) {
			t.Fatalf("ParseDigest(%q) = %q, %v; spec says ok = %v", s, d, err, want)
		}
	})
}
