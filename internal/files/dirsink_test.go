package files

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeDirFile(t *testing.T, s *DirSink, name, content string, size int64) (string, int64) {
	t.Helper()
	w, err := s.Create(name, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	digest, n, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return digest, n
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDirSinkPublishesAllTogether(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.kernel"), []byte("old kernel"), 0o644)
	s := NewDirSink(dir)
	digest, n := writeDirFile(t, s, "a.kernel", "new kernel", 10)
	sum := sha256.Sum256([]byte("new kernel"))
	if want := "sha256:" + hex.EncodeToString(sum[:]); digest != want || n != 10 {
		t.Errorf("Close = %s, %d; want %s, 10", digest, n, want)
	}
	writeDirFile(t, s, "a.initramfs", "new initramfs", -1)

	// Before Publish the old file is untouched and the new ones are hidden temp files.
	if got := readString(t, filepath.Join(dir, "a.kernel")); got != "old kernel" {
		t.Errorf("before Publish a.kernel = %q, want the old content", got)
	}
	for _, name := range dirEntries(t, dir) {
		if name != "a.kernel" && !strings.HasPrefix(name, ".") {
			t.Errorf("before Publish %s is visible", name)
		}
	}
	if err := s.Publish(); err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, dir); !slices.Equal(got, []string{"a.initramfs", "a.kernel"}) {
		t.Errorf("after Publish the directory holds %q, want only the two files", got)
	}
	if got := readString(t, filepath.Join(dir, "a.kernel")); got != "new kernel" {
		t.Errorf("a.kernel = %q", got)
	}
	st, err := os.Stat(filepath.Join(dir, "a.initramfs"))
	if err != nil || st.Mode().Perm() != publishedMode {
		t.Errorf("a.initramfs mode = %v (%v), want %v so that a file server can read it", st.Mode(), err, os.FileMode(publishedMode))
	}
	s.Discard() // after Publish: nothing to remove, and the published files stay
	if got := dirEntries(t, dir); len(got) != 2 {
		t.Errorf("Discard after Publish left %q", got)
	}
}

func TestDirSinkDiscard(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.kernel"), []byte("old"), 0o644)
	s := NewDirSink(dir)
	writeDirFile(t, s, "a.kernel", "new", 3)
	w, err := s.Create("a.initramfs", 100)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	s.Discard()
	if got := dirEntries(t, dir); !slices.Equal(got, []string{"a.kernel"}) {
		t.Errorf("after Discard the directory holds %q, want only the old a.kernel", got)
	}
	if got := readString(t, filepath.Join(dir, "a.kernel")); got != "old" {
		t.Errorf("a.kernel = %q, want the old content", got)
	}
	if err := s.Publish(); err != nil {
		t.Errorf("Publish after Discard: %v", err)
	}
	if got := readString(t, filepath.Join(dir, "a.kernel")); got != "old" {
		t.Errorf("Publish after Discard replaced a.kernel with %q", got)
	}
}

func TestDirSinkSizeMismatch(t *testing.T) {
	dir := t.TempDir()
	s := NewDirSink(dir)
	w, _ := s.Create("f", 10)
	w.Write([]byte("short"))
	if _, _, err := w.Close(); err == nil || !strings.Contains(err.Error(), "5 bytes but 10") {
		t.Fatalf("Close of a short file: %v, want a size mismatch error", err)
	}
	w.Abort()
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Errorf("Abort left %q", got)
	}
}

func TestDirSinkAbortAfterClose(t *testing.T) {
	// Extract aborts every writer when a later member fails, including those it closed.
	dir := t.TempDir()
	s := NewDirSink(dir)
	w, _ := s.Create("f", -1)
	w.Write([]byte("x"))
	if _, _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	w.Abort()
	if err := s.Publish(); err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Errorf("an aborted file was published or left behind: %q", got)
	}
}

func TestDirSinkPublishRefusesOpenFiles(t *testing.T) {
	dir := t.TempDir()
	s := NewDirSink(dir)
	writeDirFile(t, s, "done", "x", 1)
	w, _ := s.Create("open", -1)
	if err := s.Publish(); err == nil || !strings.Contains(err.Error(), `"open" is still being written`) {
		t.Fatalf("Publish with an open file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		t.Error("Publish renamed a file although another was still open")
	}
	w.Abort()
	s.Discard()
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Errorf("left %q", got)
	}
}

func TestDirSinkRefusesBadNames(t *testing.T) {
	s := NewDirSink(t.TempDir())
	for _, name := range []string{"", ".", "..", "a/b", "../x", `a\b`} {
		if _, err := s.Create(name, -1); err == nil {
			t.Errorf("Create(%q) succeeded", name)
		}
	}
	writeDirFile(t, s, "twice", "x", 1)
	if _, err := s.Create("twice", -1); err == nil {
		t.Error("Create of a name already waiting for Publish succeeded")
	}
}

func TestDirSinkMissingDir(t *testing.T) {
	s := NewDirSink(filepath.Join(t.TempDir(), "missing"))
	if _, err := s.Create("f", -1); err == nil || !strings.Contains(err.Error(), "exists and is writable") {
		t.Errorf("Create in a missing directory: %v", err)
	}
}

func TestDirSinkWithExtract(t *testing.T) {
	// A failing archive (a rule matching nothing) must leave nothing behind, even files already closed.
	dir := t.TempDir()
	s := NewDirSink(dir)
	_, err := Extract(dirSinkTar(t, "x.kernel", "k"), []Rule{{From: "*.kernel", To: "k"}, {From: "*.initramfs", To: "i"}}, s)
	if err == nil {
		t.Fatal("Extract succeeded without an initramfs")
	}
	if err := s.Publish(); err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, dir); len(got) != 0 {
		t.Errorf("a failed extraction left %q", got)
	}
}

// dirSinkTar is a plain tar archive holding one member.
func dirSinkTar(t *testing.T, name, content string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}
