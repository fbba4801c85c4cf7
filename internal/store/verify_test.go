package store

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// putBlob stores content and returns its digest and file path.
func putBlob(t *testing.T, s *Store, content string) (string, string) {
	t.Helper()
	d := digest.FromString(content).String()
	if err := s.Put(d, "", []byte(content)); err != nil {
		t.Fatal(err)
	}
	path, _ := s.blobPath(d)
	return d, path
}

// flipByte changes the first byte of path in place, keeping its size.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func modTime(t *testing.T, path string) time.Time {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.ModTime()
}

func readOpen(t *testing.T, s *Store, d string) []byte {
	t.Helper()
	f, _, err := s.Open(d)
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func quarantined(t *testing.T, root, d string) []string {
	t.Helper()
	algo, hex, _ := strings.Cut(d, ":")
	matches, err := filepath.Glob(filepath.Join(root, quarantineDir, algo+"-"+hex+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

func assertUsage(t *testing.T, s *Store, bytes, objects int64) {
	t.Helper()
	if b, n := s.Usage(); b != bytes || n != objects {
		t.Fatalf("usage %d bytes in %d objects, want %d in %d", b, n, bytes, objects)
	}
}

func TestOpenQuarantinesRewrittenFile(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	d, path := putBlob(t, s, "layer content that will be damaged")
	putBlob(t, s, "an intact neighbour")
	before := modTime(t, path)
	// The kernel stamps files from a coarse clock: wait a tick so the write is seen to move the time.
	time.Sleep(20 * time.Millisecond)
	flipByte(t, path)
	if modTime(t, path).Equal(before) {
		t.Fatal("the write did not move the modification time; the test cannot show anything")
	}

	if f, _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("Open of a rewritten corrupt file: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the corrupt file is still at %s (%v)", path, err)
	}
	if q := quarantined(t, root, d); len(q) != 1 {
		t.Errorf("quarantine holds %v, want one file for %s", q, d)
	}
	if _, err := s.Stat(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("the record of the corrupt object survived: %v", err)
	}
	assertUsage(t, s, int64(len("an intact neighbour")), 1)

	// Fetched again, it is stored and served as before.
	putBlob(t, s, "layer content that will be damaged")
	if got := readOpen(t, s, d); string(got) != "layer content that will be damaged" {
		t.Fatalf("after storing again: %q", got)
	}
}

func TestOpenCatchesSizeChangeWithTimeRestored(t *testing.T) {
	s := openStore(t, t.TempDir())
	d, path := putBlob(t, s, "0123456789")
	mt := modTime(t, path)
	if err := os.Truncate(path, 5); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, mt, mt)
	if _, _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of a truncated file: %v, want ErrNotFound", err)
	}
	assertUsage(t, s, 0, 0)
}

// TestSameTimeCorruptionIsFoundByVerify shows the documented limit of the read-time rule and what covers it:
// bytes changed with size and time kept are served by Open, and Verify finds them.
func TestSameTimeCorruptionIsFoundByVerify(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	d, path := putBlob(t, s, "bit rot keeps size and time")
	good, _ := putBlob(t, s, "an intact neighbour")
	mt := modTime(t, path)
	flipByte(t, path)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
	if got := readOpen(t, s, d); string(got) == "bit rot keeps size and time" {
		t.Fatal("Open re-hashed a file whose size and time were unchanged; the test flipped nothing?")
	}

	rep, err := s.Verify(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 2 || rep.Corrupt != 1 || !slices.Equal(rep.CorruptDigests, []string{d}) || rep.Missing != 0 || rep.Orphans != 0 {
		t.Fatalf("report %+v, want 2 checked, %s corrupt", rep, d)
	}
	if !rep.Damaged() || rep.QuarantineDir != filepath.Join(root, quarantineDir) {
		t.Errorf("report %+v: damaged %v, quarantine dir %q", rep, rep.Damaged(), rep.QuarantineDir)
	}
	if q := quarantined(t, root, d); len(q) != 1 {
		t.Errorf("quarantine holds %v, want one file for %s", q, d)
	}
	if _, _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after Verify: %v, want ErrNotFound", err)
	}
	if got := readOpen(t, s, good); string(got) != "an intact neighbour" {
		t.Errorf("intact object: %q", got)
	}
	assertUsage(t, s, int64(len("an intact neighbour")), 1)
}

func TestVerifyDropsMissing(t *testing.T) {
	s := openStore(t, t.TempDir())
	d, path := putBlob(t, s, "this file will vanish")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 1 || !slices.Equal(rep.MissingDigests, []string{d}) || rep.Corrupt != 0 || !rep.Damaged() {
		t.Fatalf("report %+v, want %s missing", rep, d)
	}
	if _, err := s.Stat(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("the record of the missing object survived: %v", err)
	}
	assertUsage(t, s, 0, 0)
}

func TestVerifyRemovesOldOrphansOnly(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root)
	indexed, _ := putBlob(t, s, "indexed")
	orphan := writeOrphan(t, root, "left by a crash between rename and index update")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(orphan, old, old)
	// A file just renamed into place whose record is being written: not to be touched.
	fresh := writeOrphan(t, root, "a commit in progress")
	stray := filepath.Join(root, "blobs", "sha256", "ab", "not-a-digest")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(stray, old, old)

	rep, err := s.Verify(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Orphans != 1 || rep.Damaged() {
		t.Fatalf("report %+v, want 1 orphan and nothing damaged", rep)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old orphan %s still there (%v)", orphan, err)
	}
	for _, keep := range []string{fresh, stray} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	if got := readOpen(t, s, indexed); string(got) != "indexed" {
		t.Errorf("indexed object: %q", got)
	}
}

func writeOrphan(t *testing.T, root, content string) string {
	t.Helper()
	hex := digest.FromString(content).Encoded()
	path := filepath.Join(root, "blobs", "sha256", hex[:2], hex)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyCleanStoreAndProgress(t *testing.T) {
	s := openStore(t, t.TempDir())
	var total int64
	for _, c := range []string{"one", "two", strings.Repeat("three", 50_000)} {
		putBlob(t, s, c)
		total += int64(len(c))
	}
	var last, calls int64
	rep, err := s.Verify(t.Context(), func(done, all int64) {
		if done < last || all != total {
			t.Errorf("progress %d/%d after %d, want rising towards %d", done, all, last, total)
		}
		last = done
		calls++
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 3 || rep.CheckedBytes != total || rep.Damaged() || rep.Orphans != 0 {
		t.Fatalf("report %+v, want 3 clean objects of %d bytes", rep, total)
	}
	if last != total || calls < 3 {
		t.Errorf("progress ended at %d after %d calls, want %d", last, calls, total)
	}
	assertUsage(t, s, total, 3)
}

// Records written before ModTime existed are re-hashed once on open, then recorded.
func TestOpenRecordsModTimeOfOldRecords(t *testing.T) {
	s := openStore(t, t.TempDir())
	d, path := putBlob(t, s, "stored by an older version")
	if err := s.recordModTime(d, 0); err != nil {
		t.Fatal(err)
	}
	if got := readOpen(t, s, d); string(got) != "stored by an older version" {
		t.Fatalf("read %q", got)
	}
	obj, err := s.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := modTime(t, path).UnixNano(); obj.ModTime != want {
		t.Fatalf("recorded ModTime %d, want the file's %d", obj.ModTime, want)
	}
}

func TestCommitRecordsModTime(t *testing.T) {
	s := openStore(t, t.TempDir())
	d, path := putBlob(t, s, "fresh")
	obj, err := s.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	if obj.ModTime == 0 || obj.ModTime != modTime(t, path).UnixNano() {
		t.Fatalf("ModTime %d, file's %d", obj.ModTime, modTime(t, path).UnixNano())
	}
}

// An open that re-hashes must serve from the start of the file, not from where the hash stopped.
func TestOpenAfterRehashReadsFromStart(t *testing.T) {
	s := openStore(t, t.TempDir())
	content := bytes.Repeat([]byte("abc"), 100_000)
	d := digest.FromBytes(content).String()
	if err := s.Put(d, "", content); err != nil {
		t.Fatal(err)
	}
	s.recordModTime(d, 0)
	if got := readOpen(t, s, d); !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes, want %d", len(got), len(content))
	}
}

func TestSweepOrphansAfterACrash(t *testing.T) {
	root := t.TempDir()
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	// A file renamed into place whose index write never happened (the process died between the two).
	orphan := digest.FromString("never indexed").String()
	path, _ := s.blobPath(orphan)
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte("never indexed"), 0o644)
	kept := digest.FromString("indexed").String()
	s.Put(kept, "", []byte("indexed"))
	s.Close()

	s, err = Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := s.SweepOrphans(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want the 1 orphan", n, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("the orphan is still on disk")
	}
	if _, _, err := s.Open(kept); err != nil {
		t.Fatalf("indexed object lost: %v", err)
	}
}
