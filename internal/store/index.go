package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketObjects = []byte("objects") // digest -> Object
	bucketTags    = []byte("tags")    // upstream \x00 repository \x00 tag -> Tag
	bucketLinks   = []byte("links")   // upstream \x00 repository \x00 digest -> time first pulled there
	bucketDocs    = []byte("docs")    // caller-chosen key -> Doc (tag lists, referrers)
)

func createBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketObjects, bucketTags, bucketLinks, bucketDocs, bucketSets, bucketAtimes, bucketUses, bucketPins} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// Object is the index record of one stored blob or manifest.
type Object struct {
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	MediaType string    `json:"mediaType,omitempty"` // set for manifests; blobs have none
	StoredAt  time.Time `json:"storedAt"`
	// ModTime is the file's modification time (UnixNano) when its content was last known right; Open
	// re-hashes a file whose time or size moved away from it. 0 in records older than the field.
	ModTime int64 `json:"modTime"`
}

// Tag records what a tag pointed to when it was last fetched, and when the upstream last confirmed it.
type Tag struct {
	Digest    string    `json:"digest"`
	MediaType string    `json:"mediaType"`
	Size      int64     `json:"size"`
	FetchedAt time.Time `json:"fetchedAt"`
	CheckedAt time.Time `json:"checkedAt"`
}

// Doc is a small upstream answer that is not content-addressed (a tag list, a referrers index), kept so that
// it can be served while the upstream is down.
type Doc struct {
	Body        []byte            `json:"body"`
	ContentType string            `json:"contentType"`
	Header      map[string]string `json:"header,omitempty"`
	FetchedAt   time.Time         `json:"fetchedAt"`
}

func key(parts ...string) []byte { return []byte(strings.Join(parts, "\x00")) }

func get[T any](s *Store, bucket, k []byte) (T, error) {
	var v T
	err := s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucket).Get(k)
		if raw == nil {
			return ErrNotFound
		}
		return json.Unmarshal(raw, &v)
	})
	return v, err
}

func put(s *Store, bucket, k []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(k, raw) })
}

// Tag returns the record of upstream/repository:tag.
func (s *Store) Tag(upstream, repository, tag string) (Tag, error) {
	return get[Tag](s, bucketTags, key(upstream, repository, tag))
}

// PutTag records what upstream/repository:tag points to.
func (s *Store) PutTag(upstream, repository, tag string, t Tag) error {
	if err := put(s, bucketTags, key(upstream, repository, tag), t); err != nil {
		return fmt.Errorf("record tag %s/%s:%s: %w", upstream, repository, tag, err)
	}
	return nil
}

// Link records that digest was pulled under upstream/repository, so that later work (eviction, listings)
// knows which repository content belongs to. Linking twice keeps the first time.
func (s *Store) Link(upstream, repository, digest string) error {
	k := key(upstream, repository, digest)
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLinks)
		if b.Get(k) != nil {
			return nil
		}
		return b.Put(k, []byte(time.Now().UTC().Format(time.RFC3339)))
	})
}

// Linked reports whether digest was pulled under upstream/repository.
func (s *Store) Linked(upstream, repository, digest string) bool {
	found := false
	s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketLinks).Get(key(upstream, repository, digest)) != nil
		return nil
	})
	return found
}

// Doc returns the document stored under the key parts.
func (s *Store) Doc(parts ...string) (Doc, error) { return get[Doc](s, bucketDocs, key(parts...)) }

// PutDoc stores a document under the key parts.
func (s *Store) PutDoc(d Doc, parts ...string) error { return put(s, bucketDocs, key(parts...), d) }

// Stat returns the index record of digest, or ErrNotFound.
func (s *Store) Stat(digest string) (Object, error) {
	return get[Object](s, bucketObjects, []byte(digest))
}

// forget drops the index record of digest and takes its size off the totals.
func (s *Store) forget(digest string) error {
	var gone Object
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		raw := b.Get([]byte(digest))
		if raw == nil {
			return nil
		}
		if err := json.Unmarshal(raw, &gone); err != nil {
			return err
		}
		// Content fetched again later starts with no history of its own.
		if err := tx.Bucket(bucketAtimes).Delete([]byte(digest)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketUses).Delete([]byte(digest)); err != nil {
			return err
		}
		return b.Delete([]byte(digest))
	})
	if err == nil && gone.Digest != "" {
		s.usage.add(-gone.Size, -1)
	}
	return err
}

// LinkedAnywhere reports whether digest was pulled under any repository: then it is image content, whose
// lifetime is the images', not a file set's.
func (s *Store) LinkedAnywhere(digest string) bool {
	found := false
	suffix := []byte("\x00" + digest)
	s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLinks).ForEach(func(k, _ []byte) error {
			if bytes.HasSuffix(k, suffix) {
				found = true
				return errStop
			}
			return nil
		})
	})
	return found
}

var errStop = errors.New("stop")

func formatUnix(t int64) string { return strconv.FormatInt(t, 10) }

func parseUnix(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

// TagRef names a tag record.
type TagRef struct{ Upstream, Repository, Tag string }

// ForEachTag calls f for every tag record.
func (s *Store) ForEachTag(f func(TagRef, Tag) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTags).ForEach(func(k, v []byte) error {
			parts := strings.SplitN(string(k), "\x00", 3)
			if len(parts) != 3 {
				return nil
			}
			var t Tag
			if err := json.Unmarshal(v, &t); err != nil {
				return err
			}
			return f(TagRef{parts[0], parts[1], parts[2]}, t)
		})
	})
}

// DeleteTag removes a tag record.
func (s *Store) DeleteTag(r TagRef) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTags).Delete(key(r.Upstream, r.Repository, r.Tag)) })
}

// DeleteTagIf deletes the tag record only while it still points at digest: a tag that moved meanwhile
// names other content, which is not being removed.
func (s *Store) DeleteTagIf(r TagRef, digest string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTags)
		raw := b.Get(key(r.Upstream, r.Repository, r.Tag))
		if raw == nil {
			return nil
		}
		var t Tag
		if err := json.Unmarshal(raw, &t); err != nil || t.Digest != digest {
			return err
		}
		return b.Delete(key(r.Upstream, r.Repository, r.Tag))
	})
}

// Unlink removes every repository link of digest (its content is gone).
func (s *Store) Unlink(digest string) error {
	suffix := []byte("\x00" + digest)
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLinks)
		var gone [][]byte
		b.ForEach(func(k, _ []byte) error {
			if bytes.HasSuffix(k, suffix) {
				gone = append(gone, append([]byte(nil), k...))
			}
			return nil
		})
		for _, k := range gone {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
