// Package store keeps content-addressed objects (blobs and manifests) on the local filesystem and an index of
// them, of tags and of cached documents in bbolt. It knows nothing of HTTP or upstreams.
//
// Layout under the storage path:
//
//	blobs/<algorithm>/<first two hex>/<hex>   verified content, written once, never modified
//	tmp/                                      downloads in progress; emptied at every start
//	index.db                                  bbolt: objects, tags, repository links, documents
//
// The rule that keeps a crash harmless: a file under blobs/ is only ever created by renaming a fully written,
// fsynced and verified temp file, and an object counts as cached only when both its index record and its file
// exist.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotFound is returned when an object, tag or document is not in the store.
var ErrNotFound = errors.New("not in store")

// digestPattern is checked again here, although callers validate digests, so that no input can ever make
// the store touch a path outside its directory.
var digestPattern = regexp.MustCompile(`^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$`)

// Store is a content-addressed object store with a bbolt index. It is safe for concurrent use.
type Store struct {
	root     string
	db       *bolt.DB
	usage    usage
	atime    atimes
	watchers manifestWatchers
	corrupt  atomic.Int64 // objects found corrupt and moved aside, since Open
	openedAt time.Time
}

// CorruptFound is how many objects were found corrupt (on read or by Verify) and moved aside since Open.
func (s *Store) CorruptFound() int64 { return s.corrupt.Load() }

// Open opens (creating if needed) the store at root. It removes temp files left by a previous process, which
// can only be partial downloads.
func Open(root string) (*Store, error) {
	for _, dir := range []string{root, filepath.Join(root, "blobs"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open storage %s: %w", root, err)
		}
	}
	if err := checkWritable(root); err != nil {
		return nil, err
	}
	// The index lock comes first: only the process that holds it may touch tmp/, or a second process (a gc,
	// a mistaken second serve) would delete the first one's downloads in progress.
	dbPath := filepath.Join(root, "index.db")
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open storage %s: the index %s is locked by another process (is another imagecache using this storage path?)", root, dbPath)
	}
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", dbPath, err)
	}
	if err := clearTemp(filepath.Join(root, "tmp")); err != nil {
		db.Close()
		return nil, fmt.Errorf("open storage %s: %w", root, err)
	}
	if err := db.Update(createBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("open index %s: %w", dbPath, err)
	}
	s := &Store{root: root, db: db, openedAt: time.Now()}
	if err := s.loadUsage(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open index %s: %w", dbPath, err)
	}
	return s, nil
}

// Close writes pending access times and closes the index.
func (s *Store) Close() error {
	s.FlushAccessTimes()
	return s.db.Close()
}

// Root is the storage path.
func (s *Store) Root() string { return s.root }

func clearTemp(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove leftover temp file: %w", err)
		}
	}
	return nil
}

func checkWritable(root string) error {
	f, err := os.CreateTemp(filepath.Join(root, "tmp"), "probe-*")
	if err != nil {
		return fmt.Errorf("storage path %s is not writable: %w (choose another path with --storage or storage.path)", root, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// blobPath is where the verified content of digest lives.
func (s *Store) blobPath(digest string) (string, error) {
	if !digestPattern.MatchString(digest) {
		return "", fmt.Errorf("invalid digest %q", digest)
	}
	algo, hex := digest[:6], digest[7:]
	return filepath.Join(s.root, "blobs", algo, hex[:2], hex), nil
}
