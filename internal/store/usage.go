package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// usage keeps the totals of what is stored, so that checking the size limit costs nothing per request.
type usage struct {
	mu      sync.Mutex
	bytes   int64
	objects int64
	onGrow  func(bytes int64)
}

func (u *usage) add(bytes, objects int64) {
	u.mu.Lock()
	u.bytes += bytes
	u.objects += objects
	total, hook := u.bytes, u.onGrow
	u.mu.Unlock()
	if bytes > 0 && hook != nil {
		hook(total)
	}
}

// Usage returns the bytes and number of objects stored.
func (s *Store) Usage() (bytes, objects int64) {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	return s.usage.bytes, s.usage.objects
}

// OnGrow sets a function called with the new total after every object stored (the eviction trigger). It
// must not block.
func (s *Store) OnGrow(f func(totalBytes int64)) {
	s.usage.mu.Lock()
	s.usage.onGrow = f
	s.usage.mu.Unlock()
}

// index records a verified object and counts it.
func (s *Store) index(obj Object) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	existed := false
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		existed = b.Get([]byte(obj.Digest)) != nil
		return b.Put([]byte(obj.Digest), raw)
	})
	if err == nil && !existed {
		s.usage.add(obj.Size, 1)
	}
	return err
}

// loadUsage adds up the index once at start. It reads only the size field of each record, so that even a
// large index opens quickly.
func (s *Store) loadUsage() error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketObjects).ForEach(func(_, v []byte) error {
			var o struct {
				Size int64 `json:"size"`
			}
			if err := json.Unmarshal(v, &o); err != nil {
				return err
			}
			s.usage.bytes += o.Size
			s.usage.objects++
			return nil
		})
	})
}

// ForEachObject calls f for every indexed object.
func (s *Store) ForEachObject(f func(Object) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketObjects).ForEach(func(_, v []byte) error {
			var o Object
			if err := json.Unmarshal(v, &o); err != nil {
				return err
			}
			return f(o)
		})
	})
}

var bucketAtimes = []byte("atimes") // digest -> last use, unix nanoseconds as decimal text

var bucketUses = []byte("uses") // digest -> how many times it was served, decimal text

// atimes batches access times and use counts in memory: a hit must not cost an index write.
type atimes struct {
	mu      sync.Mutex
	pending map[string]int64 // digest -> last use
	uses    map[string]int64 // digest -> uses since the last flush
}

// Touch records that digest was just used (served or checked): its last use, and one more use.
func (s *Store) Touch(digest string) {
	now := time.Now().UnixNano()
	s.atime.mu.Lock()
	if s.atime.pending == nil {
		s.atime.pending, s.atime.uses = map[string]int64{}, map[string]int64{}
	}
	s.atime.pending[digest] = now
	s.atime.uses[digest]++
	s.atime.mu.Unlock()
}

// FlushAccessTimes writes the batched access times and use counts in one transaction.
func (s *Store) FlushAccessTimes() error {
	s.atime.mu.Lock()
	batch, uses := s.atime.pending, s.atime.uses
	s.atime.pending, s.atime.uses = nil, nil
	s.atime.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, u := tx.Bucket(bucketAtimes), tx.Bucket(bucketUses)
		for d, t := range batch {
			if err := b.Put([]byte(d), []byte(formatUnix(t))); err != nil {
				return err
			}
		}
		for d, n := range uses {
			if err := u.Put([]byte(d), []byte(strconv.FormatInt(count(u.Get([]byte(d)))+n, 10))); err != nil {
				return err
			}
		}
		return nil
	})
}

// Uses returns how many times each object was served (flushed or pending), for the ones that were.
func (s *Store) Uses() (map[string]int64, error) {
	out := map[string]int64{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUses).ForEach(func(k, v []byte) error {
			out[string(k)] = count(v)
			return nil
		})
	})
	s.atime.mu.Lock()
	for d, n := range s.atime.uses {
		out[d] += n
	}
	s.atime.mu.Unlock()
	return out, err
}

// AccessTimes returns the last use of every object that has one (flushed or pending).
func (s *Store) AccessTimes() (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAtimes).ForEach(func(k, v []byte) error {
			out[string(k)] = time.Unix(0, parseUnix(v))
			return nil
		})
	})
	s.atime.mu.Lock()
	for d, t := range s.atime.pending {
		out[d] = time.Unix(0, t)
	}
	s.atime.mu.Unlock()
	return out, err
}

// SetAccessTime records a last use at a given time (for tests and imports; serving uses Touch).
func (s *Store) SetAccessTime(digest string, t time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAtimes).Put([]byte(digest), []byte(formatUnix(t.UnixNano())))
	})
}

// Available is the space left on the filesystem holding the store, for this (unprivileged) process.
func (s *Store) Available() (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.root, &fs); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", s.root, err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// count reads a use count; a missing or unreadable one is 0.
func count(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

// manifestWatchers hear about manifests as they are stored (manifests are stored with Put).
type manifestWatchers struct {
	mu sync.Mutex
	fs map[int]func(digest string, body []byte)
	n  int
}

// WatchManifests calls f with every manifest stored from now until stop is called, before Put returns, so
// before the manifest can be served. Eviction uses it to keep what a manifest stored during its run needs.
func (s *Store) WatchManifests(f func(digest string, body []byte)) (stop func()) {
	w := &s.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fs == nil {
		w.fs = map[int]func(string, []byte){}
	}
	id := w.n
	w.n++
	w.fs[id] = f
	return func() {
		w.mu.Lock()
		delete(w.fs, id)
		w.mu.Unlock()
	}
}

func (s *Store) manifestStored(digest string, body []byte) {
	w := &s.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.fs {
		f(digest, body)
	}
}

// LastUse is when digest was last touched (pending or flushed), or false when it never was.
func (s *Store) LastUse(digest string) (time.Time, bool) {
	s.atime.mu.Lock()
	t, ok := s.atime.pending[digest]
	s.atime.mu.Unlock()
	if ok {
		return time.Unix(0, t), true
	}
	var raw []byte
	s.db.View(func(tx *bolt.Tx) error {
		raw = append(raw, tx.Bucket(bucketAtimes).Get([]byte(digest))...)
		return nil
	})
	if raw == nil {
		return time.Time{}, false
	}
	return time.Unix(0, parseUnix(raw)), true
}
