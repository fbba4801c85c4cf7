package store

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
)

// ErrDigestMismatch means the bytes written do not hash to the digest they were promised to have.
var ErrDigestMismatch = errors.New("content does not match its digest")

// ErrSizeMismatch means more or fewer bytes arrived than were announced.
var ErrSizeMismatch = errors.New("content length does not match the announced size")

// Open returns the verified content of digest and its index record. An index record whose file has gone
// (deleted by hand, lost) is dropped, so the object is fetched again instead of failing forever.
//
// The read-time rule: every Open compares the open file's size and modification time with the record. When
// either moved (the file was written to after it was stored: any ordinary write moves the modification time)
// or the record predates ModTime, the file is re-hashed before it is returned. Corrupt content is moved to
// <root>/corrupt/, its record dropped, and ErrNotFound returned, so the caller fetches it again from the
// upstream; right content gets its new time recorded, so the next Open is one fstat again. What this cannot
// see is a change that keeps size and modification time (bit rot, or a writer that restores the time, or a
// write within the filesystem's timestamp granularity): Verify re-hashes everything for that.
func (s *Store) Open(dgst string) (*os.File, Object, error) {
	obj, err := s.Stat(dgst)
	if err != nil {
		return nil, Object{}, err
	}
	path, err := s.blobPath(dgst)
	if err != nil {
		return nil, Object{}, err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		s.forget(dgst)
		return nil, Object{}, ErrNotFound
	}
	if err != nil {
		return nil, Object{}, fmt.Errorf("open %s: %w", dgst, err)
	}
	// Stat the descriptor, not the path: what is checked must be what is served.
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Object{}, fmt.Errorf("open %s: %w", dgst, err)
	}
	if st.Size() == obj.Size && st.ModTime().UnixNano() == obj.ModTime {
		return f, obj, nil
	}
	ok, err := s.checkOnOpen(f, obj, st)
	if err != nil {
		f.Close()
		return nil, Object{}, fmt.Errorf("open %s: re-hash after a change on disk: %w", dgst, err)
	}
	if !ok {
		f.Close()
		return nil, Object{}, ErrNotFound
	}
	obj.ModTime = st.ModTime().UnixNano()
	return f, obj, nil
}

// ReadAll returns the whole content of a (small) object, such as a manifest.
func (s *Store) ReadAll(dgst string) ([]byte, Object, error) {
	f, obj, err := s.Open(dgst)
	if err != nil {
		return nil, obj, err
	}
	defer f.Close()
	body, err := io.ReadAll(f)
	if err != nil {
		return nil, obj, fmt.Errorf("read %s: %w", dgst, err)
	}
	return body, obj, nil
}

// Put stores a small object held in memory (a manifest) after verifying its digest.
func (s *Store) Put(dgst, mediaType string, body []byte) error {
	w, err := s.NewWriter(dgst, int64(len(body)))
	if err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		w.Abort()
		return err
	}
	if err := w.Commit(mediaType); err != nil {
		return err
	}
	if mediaType != "" {
		s.manifestStored(dgst, body)
	}
	return nil
}

// Writer streams an object into a temp file while hashing it; Commit makes it visible only if it verifies.
type Writer struct {
	s      *Store
	f      *os.File
	hash   hash.Hash
	digest digest.Digest
	size   int64 // announced size, -1 when unknown
	n      int64
	// computed: the digest is whatever the content hashes to, not a promise to check.
	computed bool
}

// NewWriter starts writing the object dgst of the announced size (-1 when unknown). With dgst == "" the
// content's sha256 becomes its digest at Commit (a file unpacked from a tarball has no digest up front).
func (s *Store) NewWriter(dgst string, size int64) (*Writer, error) {
	computed := dgst == ""
	if computed {
		dgst = digest.SHA256.FromString("").String() // placeholder of the right algorithm
	}
	if _, err := s.blobPath(dgst); err != nil {
		return nil, err
	}
	d := digest.Digest(dgst)
	prefix := d.Encoded()[:12] + "-*"
	if computed {
		prefix = "computed-*"
	}
	f, err := os.CreateTemp(filepath.Join(s.root, "tmp"), prefix)
	if err != nil {
		return nil, fmt.Errorf("create temp file for %s: %w", dgst, err)
	}
	return &Writer{s: s, f: f, hash: d.Algorithm().Hash(), digest: d, size: size, computed: computed}, nil
}

// Digest is the digest the object was stored under (after a successful Commit).
func (w *Writer) Digest() string { return string(w.digest) }

// TempPath is the file being written; readers may open it to follow the download as it grows.
func (w *Writer) TempPath() string { return w.f.Name() }

// Written is the number of bytes written so far.
func (w *Writer) Written() int64 { return w.n }

func (w *Writer) Write(p []byte) (int, error) {
	if w.size >= 0 && w.n+int64(len(p)) > w.size {
		return 0, fmt.Errorf("write %s: %w: more than %d bytes", w.digest, ErrSizeMismatch, w.size)
	}
	n, err := w.f.Write(p)
	w.hash.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("write %s: %w", w.digest, err)
	}
	return n, nil
}

// Commit verifies size and digest, makes the file durable and visible, and indexes it. On any failure the
// temp file is removed and nothing becomes visible.
func (w *Writer) Commit(mediaType string) error {
	if err := w.commit(mediaType); err != nil {
		w.Abort()
		return err
	}
	return nil
}

func (w *Writer) commit(mediaType string) error {
	if w.size >= 0 && w.n != w.size {
		return fmt.Errorf("store %s: %w: got %d of %d bytes", w.digest, ErrSizeMismatch, w.n, w.size)
	}
	if w.computed {
		w.digest = digest.NewDigest(w.digest.Algorithm(), w.hash)
	}
	if got := digest.NewDigest(w.digest.Algorithm(), w.hash); got != w.digest {
		return fmt.Errorf("store %s: %w: the bytes hash to %s", w.digest, ErrDigestMismatch, got)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("store %s: fsync: %w", w.digest, err)
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("store %s: %w", w.digest, err)
	}
	final, _ := w.s.blobPath(string(w.digest))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("store %s: %w", w.digest, err)
	}
	if err := os.Rename(w.f.Name(), final); err != nil {
		return fmt.Errorf("store %s: %w", w.digest, err)
	}
	obj := Object{Digest: string(w.digest), Size: w.n, MediaType: mediaType, StoredAt: time.Now().UTC(), ModTime: fileModTime(final)}
	if err := w.s.index(obj); err != nil {
		return fmt.Errorf("index %s: %w", w.digest, err)
	}
	return nil
}

// Verify checks size and digest without making the object visible (for content streamed through but not
// kept).
func (w *Writer) Verify() error {
	if w.size >= 0 && w.n != w.size {
		return fmt.Errorf("%w: got %d of %d bytes", ErrSizeMismatch, w.n, w.size)
	}
	if got := digest.NewDigest(w.digest.Algorithm(), w.hash); !w.computed && got != w.digest {
		return fmt.Errorf("%w: the bytes hash to %s, not %s", ErrDigestMismatch, got, w.digest)
	}
	return nil
}

// Abort discards the temp file. It is safe to call after Commit failed or more than once.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// Remove deletes an object: first its index record, so that nobody starts reading it, then its file.
// Readers that already opened the file keep reading it (the inode lives until they close it).
func (s *Store) Remove(dgst string) error {
	path, err := s.blobPath(dgst)
	if err != nil {
		return err
	}
	if err := s.forget(dgst); err != nil {
		return fmt.Errorf("remove %s: %w", dgst, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dgst, err)
	}
	return nil
}
