package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

func openStore(t *testing.T, root string) *Store {
	t.Helper()
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPutVerifiesAndReadsBack(t *testing.T) {
	s := openStore(t, t.TempDir())
	body := []byte(`{"schemaVersion":2}`)
	d := digest.FromBytes(body).String()
	if err := s.Put(d, "application/vnd.oci.image.manifest.v1+json", body); err != nil {
		t.Fatal(err)
	}
	got, obj, err := s.ReadAll(d)
	if err != nil || string(got) != string(body) || obj.MediaType != "application/vnd.oci.image.manifest.v1+json" || obj.Size != int64(len(body)) {
		t.Fatalf("read back %q %+v %v", got, obj, err)
	}
}

func TestWrongContentIsNeverVisible(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	d := digest.FromString("the real content").String()
	err := s.Put(d, "", []byte("other content"))
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("got %v, want ErrDigestMismatch", err)
	}
	if _, err := s.Stat(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("mismatched content indexed: %v", err)
	}
	assertNoFiles(t, filepath.Join(root, "blobs"))
	assertNoFiles(t, filepath.Join(root, "tmp"))
}

func TestShortContentIsNeverVisible(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	content := []byte("0123456789")
	w, err := s.NewWriter(digest.FromBytes(content).String(), int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(content[:5])
	if err := w.Commit(""); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("got %v, want ErrSizeMismatch", err)
	}
	if _, err := w.Write(content); err == nil {
		t.Log("write after failed commit is not an error; it only touches the discarded temp file")
	}
	assertNoFiles(t, filepath.Join(root, "blobs"))
}

func TestLeftoverTempFilesRemovedAtOpen(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	w, err := s.NewWriter(digest.FromString("x").String(), -1)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("partial"))
	s.Close() // as if the process died mid-download: the temp file stays behind
	s2 := openStore(t, root)
	_ = s2
	assertNoFiles(t, filepath.Join(root, "tmp"))
}

func TestInvalidDigestsNeverBecomePaths(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, d := range []string{"sha256:../../../etc/passwd", "sha256:" + strings.Repeat("A", 64), "md5:abc", "sha256:" + strings.Repeat("a", 63) + "/"} {
		if _, err := s.NewWriter(d, -1); err == nil {
			t.Errorf("NewWriter(%q) accepted an invalid digest", d)
		}
		if _, _, err := s.Open(d); err == nil {
			t.Errorf("Open(%q) accepted an invalid digest", d)
		}
	}
}

func TestMissingFileIsForgotten(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	body := []byte("blob")
	d := digest.FromBytes(body).String()
	s.Put(d, "", body)
	path, _ := s.blobPath(d)
	os.Remove(path)
	if _, _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("index still lists a blob whose file is gone: %v", err)
	}
}

func TestSecondProcessGetsClearError(t *testing.T) {
	root := t.TempDir()
	first := openStore(t, root)
	inProgress, err := first.NewWriter("", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer inProgress.Abort()
	start := time.Now()
	_, err = Open(root)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("got %v, want a message that another process holds the storage", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("waited too long for the lock")
	}
	if _, err := os.Stat(inProgress.TempPath()); err != nil {
		t.Fatalf("a second Open deleted the first process's download in progress: %v", err)
	}
}

func TestStoragePathNotUsable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	os.WriteFile(file, nil, 0o600)
	_, err := Open(file)
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("got %v, want an error naming %s", err, file)
	}
}

func TestTagsLinksDocs(t *testing.T) {
	s := openStore(t, t.TempDir())
	now := time.Now().UTC().Truncate(time.Second)
	tag := Tag{Digest: "sha256:" + strings.Repeat("a", 64), MediaType: "m", Size: 3, FetchedAt: now, CheckedAt: now}
	if err := s.PutTag("docker.io", "library/nginx", "1.27", tag); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tag("docker.io", "library/nginx", "1.27")
	if err != nil || got != tag {
		t.Fatalf("tag %+v %v", got, err)
	}
	if _, err := s.Tag("docker.io", "library/nginx", "1.28"); !errors.Is(err, ErrNotFound) {
		t.Fatal("unknown tag found")
	}
	s.Link("docker.io", "library/nginx", tag.Digest)
	if !s.Linked("docker.io", "library/nginx", tag.Digest) || s.Linked("docker.io", "library/redis", tag.Digest) {
		t.Fatal("links wrong")
	}
	s.PutDoc(Doc{Body: []byte("{}"), ContentType: "application/json"}, "tags", "docker.io", "library/nginx", "")
	if d, err := s.Doc("tags", "docker.io", "library/nginx", ""); err != nil || string(d.Body) != "{}" {
		t.Fatalf("doc %+v %v", d, err)
	}
}

func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("unexpected file %s", p)
		}
		return nil
	})
}

func TestComputedDigestWriter(t *testing.T) {
	s := openStore(t, t.TempDir())
	w, err := s.NewWriter("", -1)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("kernel bytes"))
	if err := w.Commit(""); err != nil {
		t.Fatal(err)
	}
	want := digest.FromString("kernel bytes").String()
	if w.Digest() != want {
		t.Fatalf("digest %s, want %s", w.Digest(), want)
	}
	if got, _, err := s.ReadAll(want); err != nil || string(got) != "kernel bytes" {
		t.Fatalf("read back %q %v", got, err)
	}
}

func TestSetVersions(t *testing.T) {
	s := openStore(t, t.TempDir())
	if _, err := s.Set("ipa"); !errors.Is(err, ErrNotFound) {
		t.Fatal("unknown set found")
	}
	v := SetVersion{Version: 1, Files: map[string]SetFile{"k": {Digest: "sha256:" + strings.Repeat("b", 64), Size: 1}}}
	if err := s.PutSet("ipa", v); err != nil {
		t.Fatal(err)
	}
	got, err := s.Set("ipa")
	if err != nil || got.Version != 1 || got.Files["k"].Size != 1 {
		t.Fatalf("set %+v %v", got, err)
	}
	if names, _ := s.Sets(); len(names) != 1 || names[0] != "ipa" {
		t.Fatalf("sets %v", names)
	}
}

// TestUsesCountEveryTouchAndSurviveARestart: use counts add up across flushes, persist, and go with the
// object, so that content fetched again starts from nothing.
func TestUsesCountEveryTouchAndSurviveARestart(t *testing.T) {
	root := t.TempDir()
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("content")
	d := digest.FromBytes(body).String()
	if err := s.Put(d, "", body); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Touch(d)
	}
	if uses, _ := s.Uses(); uses[d] != 3 {
		t.Fatalf("uses before a flush: %d, want 3", uses[d])
	}
	if err := s.FlushAccessTimes(); err != nil {
		t.Fatal(err)
	}
	s.Touch(d)
	if err := s.FlushAccessTimes(); err != nil {
		t.Fatal(err)
	}
	s.Touch(d) // pending at Close, which flushes
	s.Close()

	s = openStore(t, root)
	if uses, _ := s.Uses(); uses[d] != 5 {
		t.Fatalf("uses after a restart: %d, want 5", uses[d])
	}
	if err := s.Remove(d); err != nil {
		t.Fatal(err)
	}
	uses, _ := s.Uses()
	times, _ := s.AccessTimes()
	if _, ok := uses[d]; ok {
		t.Fatalf("a removed object still has %d uses", uses[d])
	}
	if _, ok := times[d]; ok {
		t.Fatal("a removed object still has an access time")
	}
}
