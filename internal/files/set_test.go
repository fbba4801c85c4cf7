package files

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
)

func newTestManager(t *testing.T, sets ...config.FileSet) *Manager {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	router := reference.NewRouter([]reference.Upstream{{Name: "upstream.test", Aliases: []string{"127.0.0.1:5001"}}})
	m, err := NewManager(st, sets, nil, router, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConditionalRequest(t *testing.T) {
	minTime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSet(config.FileSet{Set: "ipa", URL: "http://x/ipa.tar.gz", MinimumModificationTime: minTime})
	fresh := &store.SetVersion{Source: store.SetSource{ETag: `"e1"`, LastModified: "Mon, 01 Jun 2026 00:00:00 GMT", Recipe: s.recipe}}
	if got := s.conditional(fresh); got.ETag != `"e1"` || got.LastModified == "" {
		t.Fatalf("fresh copy: %+v, want both validators", got)
	}
	old := &store.SetVersion{Source: store.SetSource{ETag: `"e0"`, LastModified: "Wed, 01 Jan 2025 00:00:00 GMT", Recipe: s.recipe}}
	if got := s.conditional(old); got != (Conditional{}) {
		t.Fatalf("copy older than minimumModificationTime: %+v, want an unconditional request", got)
	}
	noDate := &store.SetVersion{Source: store.SetSource{ETag: `"e2"`, Recipe: s.recipe}}
	if got := s.conditional(noDate); got != (Conditional{}) {
		t.Fatal("a copy of unknown age must not satisfy a minimum modification time")
	}
	changed := &store.SetVersion{Source: store.SetSource{ETag: `"e1"`, LastModified: fresh.Source.LastModified, Recipe: "other"}}
	if got := s.conditional(changed); got != (Conditional{}) {
		t.Fatal("a changed recipe (extract rules, URL) must download again")
	}
	if got := s.conditional(nil); got != (Conditional{}) {
		t.Fatal("nothing cached: unconditional")
	}
}

func TestPublishKeepsLastModifiedOfUnchangedFiles(t *testing.T) {
	m := newTestManager(t, config.FileSet{Set: "ipa", URL: "http://x/ipa.tar.gz"})
	s := m.sets["ipa"]
	k1, i1, i2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64), "sha256:"+strings.Repeat("3", 64)
	first := store.SetSource{LastModified: "Mon, 01 Jun 2026 00:00:00 GMT"}
	if err := m.publish(s, nil, first, []Published{{Name: "k", Digest: k1}, {Name: "i", Digest: i1}}); err != nil {
		t.Fatal(err)
	}
	v1 := s.current.Load()
	want := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if v1.Version != 1 || !v1.Files["k"].LastModified.Equal(want) {
		t.Fatalf("first version %+v", v1)
	}
	// Same content again, from a source the upstream touched: nothing visible changes.
	touched := store.SetSource{LastModified: "Tue, 02 Jun 2026 00:00:00 GMT"}
	m.publish(s, v1, touched, []Published{{Name: "k", Digest: k1}, {Name: "i", Digest: i1}})
	v2 := s.current.Load()
	if v2.Version != 1 || !v2.Files["k"].LastModified.Equal(want) {
		t.Fatalf("unchanged content changed version or Last-Modified: %+v", v2)
	}
	// The initramfs changes: a new version; the kernel keeps its date, the initramfs takes the new one.
	m.publish(s, v2, touched, []Published{{Name: "k", Digest: k1}, {Name: "i", Digest: i2}})
	v3 := s.current.Load()
	if v3.Version != 2 || !v3.Files["k"].LastModified.Equal(want) || !v3.Files["i"].LastModified.Equal(want.Add(24*time.Hour)) {
		t.Fatalf("after a change: %+v", v3)
	}
	// New content stamped with the same date as before (reproducible builds): the date still moves, or a
	// client asking If-Modified-Since would keep the old bytes.
	i4 := "sha256:" + strings.Repeat("4", 64)
	m.publish(s, v3, touched, []Published{{Name: "k", Digest: k1}, {Name: "i", Digest: i4}})
	v4 := s.current.Load()
	if v4.Version != 3 || !v4.Files["i"].LastModified.After(v3.Files["i"].LastModified) {
		t.Fatalf("changed content kept its Last-Modified: %v -> %v", v3.Files["i"].LastModified, v4.Files["i"].LastModified)
	}
	v3 = v4
	// It survives a restart.
	again, err := NewManager(m.store, []config.FileSet{s.cfg}, nil, nil, m.log)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.sets["ipa"].current.Load(); got.Version != 3 || got.Files["i"].Digest != i4 {
		t.Fatalf("after restart: %+v", got)
	}
}

func TestStateTransitions(t *testing.T) {
	m := newTestManager(t, config.FileSet{Set: "ipa", URL: "http://127.0.0.1:1/ipa.tar.gz"})
	s := m.sets["ipa"]
	if st, _ := s.state(); st != Pending {
		t.Fatalf("before any attempt: %s", st)
	}
	m.fetcher.Timeout = time.Second
	if _, err := m.Refresh(t.Context(), "ipa"); err == nil {
		t.Fatal("refresh from a closed port succeeded")
	}
	if st := m.status(s); st.State != Failed || st.Message == "" {
		t.Fatalf("never published and failing: %+v", st)
	}
	m.publish(s, nil, store.SetSource{}, []Published{{Name: "k", Digest: "sha256:" + strings.Repeat("1", 64)}})
	m.refresh(t.Context(), s)
	if st := m.status(s); st.State != Stale || st.Version != 1 || len(st.Files) != 1 {
		t.Fatalf("published and failing: %+v", st)
	}
}

func TestUnsupportedSchemeIsAClearError(t *testing.T) {
	for _, u := range []string{"file:///etc/passwd", "ftp://x/y.tar.gz"} {
		err := CheckURL(u)
		if err == nil || !strings.Contains(err.Error(), "http://") {
			t.Errorf("%s: %v, want an error that says to use http(s)", u, err)
		}
	}
}

func TestOCIReference(t *testing.T) {
	m := newTestManager(t)
	for _, tc := range []struct{ url, up, repo, ref, err string }{
		{"oci://upstream.test/team/ipa:v1", "upstream.test", "team/ipa", "v1", ""},
		{"oci://127.0.0.1:5001/team/ipa@sha256:" + strings.Repeat("a", 64), "upstream.test", "team/ipa", "sha256:" + strings.Repeat("a", 64), ""},
		{"oci://other.example/team/ipa:v1", "", "", "", "not a configured upstream"},
		{"oci://upstream.test/team/ipa", "", "", "", "names no tag or digest"},
		{"oci://upstream.test/Team/ipa:v1", "", "", "", "uppercase"},
	} {
		up, repo, ref, err := m.ociRef(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error mentioning %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || up != tc.up || repo != tc.repo || ref != tc.ref {
			t.Errorf("%s: %q %q %q %v", tc.url, up, repo, ref, err)
		}
	}
}

func TestPickArchitecture(t *testing.T) {
	index := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
	 {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1,"platform":{"os":"linux","architecture":"amd64"}},
	 {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("b", 64) + `","size":1,"platform":{"os":"linux","architecture":"arm64"}}]}`)
	for arch, want := range map[string]string{"x86_64": "a", "amd64": "a", "aarch64": "b", "arm64": "b"} {
		got, err := pickArchitecture(index, arch)
		if err != nil || got != "sha256:"+strings.Repeat(want, 64) {
			t.Errorf("%s: %s %v", arch, got, err)
		}
	}
	if _, err := pickArchitecture(index, "s390x"); err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("missing architecture: %v, want the list of what the index has", err)
	}
}

func TestReplacedVersionsAreRemoved(t *testing.T) {
	m := newTestManager(t, config.FileSet{Set: "a", URL: "http://x/a"}, config.FileSet{Set: "b", URL: "http://x/b"})
	m.grace = 0
	put := func(content string) string {
		w, _ := m.store.NewWriter("", -1)
		w.Write([]byte(content))
		if err := w.Commit(""); err != nil {
			t.Fatal(err)
		}
		return w.Digest()
	}
	old, shared, image, fresh := put("old kernel"), put("shared initramfs"), put("an image layer"), put("new kernel")
	m.store.Link("upstream.test", "team/app", image)
	m.publish(m.sets["b"], nil, store.SetSource{}, []Published{{Name: "i", Digest: shared}})
	m.publish(m.sets["a"], nil, store.SetSource{}, []Published{{Name: "k", Digest: old}, {Name: "i", Digest: shared}})
	v1 := m.sets["a"].current.Load()
	m.publish(m.sets["a"], v1, store.SetSource{}, []Published{{Name: "k", Digest: fresh}})

	m.collect([]string{old, shared, image, fresh, old})
	if _, err := m.store.Stat(old); err == nil {
		t.Error("the replaced kernel is still stored")
	}
	for what, d := range map[string]string{"still used by set b": shared, "image content": image, "published": fresh} {
		if _, err := m.store.Stat(d); err != nil {
			t.Errorf("content %s was removed: %v", what, err)
		}
	}
}

// TestEnsureRefusesABrokenGlob: a custom resource's extract rule reaches the manager unchecked; a glob that
// cannot match anything by construction is refused with what is wrong, not reported as matching nothing.
func TestEnsureRefusesABrokenGlob(t *testing.T) {
	m := newTestManager(t)
	err := m.Ensure(config.FileSet{Set: "ns_res_tools", URL: "http://x/t.tar.gz", Extract: []config.Extract{{From: "[", To: "tool"}}})
	if err == nil || !strings.Contains(err.Error(), `glob "["`) {
		t.Fatalf("Ensure with from: \"[\": %v, want an error naming the glob", err)
	}
	if _, ok := m.Status("ns_res_tools"); ok {
		t.Error("the set with a broken rule was added anyway")
	}
}
