package store

import (
	"context"
	_ "crypto/sha256" // go-digest hashes through crypto.Hash, which needs the algorithms linked in
	_ "crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/singleflight"
)

// quarantineDir is where corrupt files are moved, under the storage path: kept for a person to look at,
// never served, never counted in the totals.
const quarantineDir = "corrupt"

// orphanGrace keeps Verify from removing a file that a Writer has just renamed into blobs/ and is about to
// index: a commit writes, fsyncs, renames and indexes within moments, so a file without an index record whose
// last write is older than this was left by a crash between rename and index update.
const orphanGrace = time.Minute

// VerifyReport is what Verify found and repaired.
type VerifyReport struct {
	Checked        int           `json:"checked"`      // index records looked at
	CheckedBytes   int64         `json:"checkedBytes"` // bytes re-hashed
	Corrupt        int           `json:"corrupt"`      // files that did not hash to their digest: quarantined, record dropped
	CorruptDigests []string      `json:"corruptDigests,omitempty"`
	Missing        int           `json:"missing"` // records whose file was gone: record dropped
	MissingDigests []string      `json:"missingDigests,omitempty"`
	Orphans        int           `json:"orphans"`       // files under blobs/ with no record: removed
	QuarantineDir  string        `json:"quarantineDir"` // where corrupt files went
	Duration       time.Duration `json:"durationNs"`
}

// Damaged reports whether content was lost (and will be fetched again): what makes `verify` exit 2.
func (r VerifyReport) Damaged() bool { return r.Corrupt > 0 || r.Missing > 0 }

// Verify re-hashes every indexed object. A corrupt file is moved to <root>/corrupt and its record dropped, a
// record without a file is dropped, and a file without a record (a crash between rename and index update) is
// removed, so that everything the index lists is again complete and correct; what was dropped is fetched
// again from its upstream on the next request. progress, if not nil, gets the bytes done of the total.
//
// It only reads the index while hashing, so it can run while the store serves: a reader that opened a file
// before it was quarantined keeps reading it through its descriptor.
func (s *Store) Verify(ctx context.Context, progress func(done, total int64)) (VerifyReport, error) {
	start := time.Now()
	rep := VerifyReport{QuarantineDir: filepath.Join(s.root, quarantineDir)}
	// Snapshot the records first: hashing inside a read transaction for minutes would hold the index's pages
	// (and, when the file must grow, its writers) hostage.
	objs, total, err := s.snapshotObjects()
	if err != nil {
		return rep, fmt.Errorf("verify: read index: %w", err)
	}
	p := &verifyProgress{report: progress, total: total}
	for _, obj := range objs {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("verify: %w", err)
		}
		if err := s.verifyObject(ctx, obj, &rep, p); err != nil {
			return rep, err
		}
	}
	orphans, err := s.removeOrphans(ctx, start)
	rep.Orphans = orphans
	rep.Duration = time.Since(start)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	return rep, nil
}

func (s *Store) snapshotObjects() ([]Object, int64, error) {
	var objs []Object
	var total int64
	err := s.ForEachObject(func(o Object) error {
		objs = append(objs, o)
		total += o.Size
		return nil
	})
	return objs, total, err
}

// verifyObject checks one record against its file and repairs what is wrong.
func (s *Store) verifyObject(ctx context.Context, obj Object, rep *VerifyReport, p *verifyProgress) error {
	defer p.skipTo(obj.Size) // a missing or short file still counts as done
	path, err := s.blobPath(obj.Digest)
	if err != nil {
		// Not a digest the store could have written: the record is junk and names no file.
		rep.Checked++
		s.forget(obj.Digest)
		return nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		// Remove drops the record before the file, so a record still there means the file was lost, not
		// evicted while we looked.
		if _, err := s.Stat(obj.Digest); err == nil {
			rep.Checked++
			rep.Missing++
			rep.MissingDigests = append(rep.MissingDigests, obj.Digest)
			s.forget(obj.Digest)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("verify %s: %w", obj.Digest, err)
	}
	defer f.Close()
	rep.Checked++
	ok, n, err := hashMatches(ctx, f, obj.Digest, p.add)
	rep.CheckedBytes += n
	if err != nil {
		return fmt.Errorf("verify %s: %w", obj.Digest, err)
	}
	if !ok {
		if err := s.quarantine(obj.Digest, f); err != nil {
			return fmt.Errorf("verify %s: %w", obj.Digest, err)
		}
		rep.Corrupt++
		rep.CorruptDigests = append(rep.CorruptDigests, obj.Digest)
		return nil
	}
	// The content is right: remember the file as it is now, so that Open need not hash it again.
	if st, err := f.Stat(); err == nil && st.ModTime().UnixNano() != obj.ModTime {
		s.recordModTime(obj.Digest, st.ModTime().UnixNano())
	}
	return nil
}

// verifyProgress turns per-chunk byte counts into running totals for the caller's progress function.
type verifyProgress struct {
	report      func(done, total int64)
	total, done int64
	objectStart int64 // done when the current object began
}

func (p *verifyProgress) add(n int64) {
	p.done += n
	if p.report != nil {
		p.report(p.done, p.total)
	}
}

// skipTo moves done to the end of the current object, whatever was actually read of it.
func (p *verifyProgress) skipTo(size int64) {
	p.done = p.objectStart + size
	p.objectStart = p.done
	if p.report != nil {
		p.report(p.done, p.total)
	}
}

// hashMatches streams f from its start (whatever its offset) through the digest's hash, calling read with
// each chunk's length, and reports whether the content hashes to dgst and how many bytes it read.
func hashMatches(ctx context.Context, f *os.File, dgst string, read func(int64)) (bool, int64, error) {
	d, err := digest.Parse(dgst)
	if err != nil {
		return false, 0, err
	}
	h := d.Algorithm().Hash()
	src := &ctxReader{ctx: ctx, r: io.NewSectionReader(f, 0, math.MaxInt64), read: read}
	n, err := io.Copy(h, src)
	if err != nil {
		return false, n, fmt.Errorf("read: %w", err)
	}
	return digest.NewDigest(d.Algorithm(), h) == d, n, nil
}

// ctxReader stops a long hash when its context ends (a client that hung up, a cancelled verify).
type ctxReader struct {
	ctx  context.Context
	r    io.Reader
	read func(int64)
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	if c.read != nil && n > 0 {
		c.read(int64(n))
	}
	return n, err
}

// quarantine moves the corrupt file f (open, already hashed) to <root>/corrupt/<algo>-<hex>-<unix time> and
// drops its index record, so the next request fetches the object again. If the path no longer holds f's
// file (a concurrent quarantine moved it, or a fresh download replaced it), it leaves the path and the record
// alone: they are not the bytes that were found corrupt.
func (s *Store) quarantine(dgst string, f *os.File) error {
	path, err := s.blobPath(dgst)
	if err != nil {
		return err
	}
	if !sameFile(f, path) {
		return nil
	}
	s.corrupt.Add(1)
	dir := filepath.Join(s.root, quarantineDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errors.Join(fmt.Errorf("quarantine: %w", err), s.forget(dgst))
	}
	moveErr := os.Rename(path, quarantineName(dir, dgst))
	if errors.Is(moveErr, os.ErrNotExist) {
		moveErr = nil
	}
	if moveErr != nil {
		moveErr = fmt.Errorf("quarantine: move corrupt %s to %s: %w", path, dir, moveErr)
	}
	// The record goes even when the move failed: serving the bytes is the one thing that must not happen.
	return errors.Join(moveErr, s.forget(dgst))
}

// quarantineName is <dir>/<algo>-<hex>-<unix time>, with a ".N" suffix when that is taken (the same object
// found corrupt twice in a second): a rename would silently replace the earlier copy.
func quarantineName(dir, dgst string) string {
	algo, hex, _ := strings.Cut(dgst, ":")
	base := filepath.Join(dir, algo+"-"+hex+"-"+strconv.FormatInt(time.Now().Unix(), 10))
	name := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name
		}
		name = base + "." + strconv.Itoa(i)
	}
}

func (s *Store) indexed(dgst string) bool {
	_, err := s.Stat(dgst)
	return err == nil
}

func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// recordModTime updates the modification time in dgst's record after its content was found correct. It
// changes nothing else, so the totals stay as they are; a record dropped meanwhile stays dropped.
func (s *Store) recordModTime(dgst string, modTime int64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		raw := b.Get([]byte(dgst))
		if raw == nil {
			return nil
		}
		var o Object
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		o.ModTime = modTime
		raw, err := json.Marshal(o)
		if err != nil {
			return err
		}
		return b.Put([]byte(dgst), raw)
	})
}

// fileModTime is path's modification time in nanoseconds, or 0 (which makes the next Open re-hash the file)
// when it cannot be read.
func fileModTime(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

// rehashes shares one hash of a file among concurrent Opens of the same object in the same state: after an
// upgrade (records without ModTime) or a change on disk, a herd of pulls of one large layer would otherwise
// hash it once per client.
var rehashes singleflight.Group

// openVerdict is the shared outcome of re-hashing an object on open.
type openVerdict struct{ ok bool }

// checkOnOpen re-hashes f, the open file of obj whose size or modification time differ from its record. It
// returns true when the content is right (and records the new modification time), false when it was
// corrupt (and has been quarantined).
func (s *Store) checkOnOpen(f *os.File, obj Object, st fs.FileInfo) (bool, error) {
	key := s.root + "\x00" + obj.Digest + "\x00" + strconv.FormatInt(st.Size(), 10) + "\x00" + strconv.FormatInt(st.ModTime().UnixNano(), 10)
	v, err, _ := rehashes.Do(key, func() (any, error) {
		// The request's context is not ours to use: one client hanging up must not fail the others.
		ok, _, err := hashMatches(context.Background(), f, obj.Digest, nil)
		if err != nil {
			return nil, err
		}
		if !ok {
			// A quarantine that could not move the file has still dropped the record: the next download
			// replaces the file. Only a record left in place must fail the request.
			if err := s.quarantine(obj.Digest, f); err != nil && s.indexed(obj.Digest) {
				return nil, err
			}
			return openVerdict{false}, nil
		}
		// Failing to record only costs another hash next time; the content is right either way.
		s.recordModTime(obj.Digest, st.ModTime().UnixNano())
		return openVerdict{true}, nil
	})
	if err != nil {
		return false, err
	}
	return v.(openVerdict).ok, nil
}

// removeOrphans deletes files under blobs/ that have no index record and were last written before the
// verify began (minus orphanGrace), and returns how many it removed. Names that are not digests are left
// alone: the store did not write them.
func (s *Store) removeOrphans(ctx context.Context, started time.Time) (int, error) {
	removed := 0
	blobs := filepath.Join(s.root, "blobs")
	err := filepath.WalkDir(blobs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		dgst, ok := digestOfPath(blobs, path)
		if !ok {
			return nil
		}
		if s.isOrphan(dgst, d, started) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove orphan %s: %w", path, err)
			}
			removed++
		}
		return nil
	})
	return removed, err
}

func (s *Store) isOrphan(dgst string, d fs.DirEntry, started time.Time) bool {
	if _, err := s.Stat(dgst); !errors.Is(err, ErrNotFound) {
		return false
	}
	info, err := d.Info()
	return err == nil && info.ModTime().Before(started.Add(-orphanGrace))
}

// digestOfPath maps blobs/<algo>/<2 hex>/<hex> back to its digest.
func digestOfPath(blobs, path string) (string, bool) {
	rel, err := filepath.Rel(blobs, path)
	if err != nil {
		return "", false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], parts[1]) || len(parts[1]) != 2 {
		return "", false
	}
	dgst := parts[0] + ":" + parts[2]
	return dgst, digestPattern.MatchString(dgst)
}

// SweepOrphans removes files under blobs/ that have no index record and were written before this process
// opened the store: a crash between a file's rename and its index write leaves such files, invisible but
// taking space. Files written since Open are left alone (a commit may be between its two steps). It walks
// every file, so serve runs it in the background.
func (s *Store) SweepOrphans(ctx context.Context) (int, error) {
	return s.removeOrphans(ctx, s.openedAt.Add(orphanGrace))
}
