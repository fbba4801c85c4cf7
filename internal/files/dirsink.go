package files

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// DirSink writes files into one directory of a plain filesystem (the shared volume that metal3's httpd
// serves, say). Each file is written to a hidden temp file next to its final name, so that the rename that
// publishes it stays on one filesystem and is atomic; nothing replaces a final name before Publish.
type DirSink struct {
	dir string

	mu      sync.Mutex
	writing map[string]*dirFile // created and not yet closed or aborted
	closed  []*dirFile          // complete, in Create order, waiting for Publish
}

// NewDirSink returns a sink writing into dir, which must exist.
func NewDirSink(dir string) *DirSink {
	return &DirSink{dir: dir, writing: map[string]*dirFile{}}
}

// publishedMode is what a file server in another container (running as another user) needs to read the files.
const publishedMode = 0o644

// Create starts the file that Publish will rename to dir/name; size is -1 when unknown.
func (s *DirSink) Create(name string, size int64) (FileWriter, error) {
	if err := checkFileName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending(name) {
		return nil, fmt.Errorf("file %q is written twice in one run; each extract rule needs its own to: name", name)
	}
	f, err := os.CreateTemp(s.dir, TempPattern(name))
	if err != nil {
		return nil, fmt.Errorf("create a temp file for %s: %w (check that %s exists and is writable)", name, err, s.dir)
	}
	if err := f.Chmod(publishedMode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("make %s readable: %w", f.Name(), err)
	}
	df := &dirFile{sink: s, name: name, want: size, f: f, tmp: f.Name(), hash: sha256.New()}
	s.writing[name] = df
	return df, nil
}

// TempPattern is the os.CreateTemp pattern of the temp files written for name, so that a caller can find
// the leftovers of a run that was killed.
func TempPattern(name string) string { return "." + name + ".tmp-*" }

// checkFileName refuses names that are not one plain path segment: a sink writes into its directory only.
func checkFileName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("file name %q is not a plain file name (no directories, not . or ..)", name)
	}
	return nil
}

// pending reports whether name is being written or waiting to be published. Called with s.mu held.
func (s *DirSink) pending(name string) bool {
	if _, ok := s.writing[name]; ok {
		return true
	}
	for _, f := range s.closed {
		if f.name == name {
			return true
		}
	}
	return false
}

// Publish renames every closed file to its final name and then syncs the directory, so that the renames
// survive a crash. Renaming starts only when no file is still being written, so a failed run never leaves a
// new kernel next to an old initramfs. On error the files not yet renamed stay as temp files for Discard.
func (s *DirSink) Publish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.writing {
		return fmt.Errorf("publish %s: file %q is still being written; close or abort it first", s.dir, name)
	}
	for len(s.closed) > 0 {
		f := s.closed[0]
		if err := os.Rename(f.tmp, filepath.Join(s.dir, f.name)); err != nil {
			return fmt.Errorf("publish %s: %w", f.name, err)
		}
		f.state = renamed
		s.closed = s.closed[1:]
	}
	return syncDir(s.dir)
}

// Discard removes every temp file, closed or not; files already published stay.
func (s *DirSink) Discard() {
	s.mu.Lock()
	files := slices.Clone(s.closed)
	for _, f := range s.writing {
		files = append(files, f)
	}
	s.mu.Unlock()
	for _, f := range files {
		f.Abort()
	}
}

// syncDir makes the directory's entries (the renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// dirFile is one temp file of a DirSink.
type dirFile struct {
	sink  *DirSink
	name  string
	want  int64 // -1: unknown
	f     *os.File
	tmp   string
	state fileState // guarded by sink.mu
	hash  hash.Hash
	n     int64
}

type fileState int

const (
	writing fileState = iota
	closed            // complete, waiting for Publish
	renamed           // published under its final name: nothing left to clean up
	aborted
)

func (d *dirFile) Write(p []byte) (int, error) {
	n, err := d.f.Write(p)
	d.hash.Write(p[:n])
	d.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("write %s: %w", d.tmp, err)
	}
	return n, nil
}

// Close syncs the data to disk now, while the file is open anyway, so that Publish only renames.
func (d *dirFile) Close() (string, int64, error) {
	s := d.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.state != writing {
		return "", 0, fmt.Errorf("close %s: the file is already closed or aborted", d.name)
	}
	if d.want >= 0 && d.n != d.want {
		return "", 0, fmt.Errorf("%s: got %d bytes but %d were announced; the download is truncated or corrupt", d.name, d.n, d.want)
	}
	if err := d.f.Sync(); err != nil {
		return "", 0, fmt.Errorf("sync %s: %w", d.tmp, err)
	}
	if err := d.f.Close(); err != nil {
		return "", 0, fmt.Errorf("close %s: %w", d.tmp, err)
	}
	d.state = closed
	delete(s.writing, d.name)
	s.closed = append(s.closed, d)
	return "sha256:" + hex.EncodeToString(d.hash.Sum(nil)), d.n, nil
}

// Abort removes the temp file, whether or not it was closed; once published there is nothing to undo.
func (d *dirFile) Abort() {
	s := d.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	switch d.state {
	case writing:
		d.f.Close()
		delete(s.writing, d.name)
	case closed:
		s.closed = slices.DeleteFunc(s.closed, func(f *dirFile) bool { return f == d })
	default:
		return
	}
	d.state = aborted
	// An error has nowhere to go (the caller is already failing); a leftover is hidden and found by TempPattern.
	_ = os.Remove(d.tmp)
}
