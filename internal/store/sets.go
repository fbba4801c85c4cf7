package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucketSets = []byte("sets") // set name -> SetVersion

// SetVersion is the published version of a file set: which content each file name serves, and what is
// known about the source it came from. Replacing it in one index transaction is what makes all of a set's
// files switch together.
type SetVersion struct {
	Version     int                `json:"version"`
	Files       map[string]SetFile `json:"files"`
	Source      SetSource          `json:"source"`
	PublishedAt time.Time          `json:"publishedAt"`
	CheckedAt   time.Time          `json:"checkedAt"` // last time the upstream confirmed or replaced it
}

// SetFile is one published file of a set version.
type SetFile struct {
	Digest       string    `json:"digest"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"lastModified"` // changes only when the content does
}

// SetSource is what the upstream said about the source the files came from, for conditional refreshes.
type SetSource struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"lastModified,omitempty"` // the upstream's header, verbatim
	Digest       string `json:"digest,omitempty"`       // of the downloaded source (or the OCI manifest)
	// Recipe fingerprints how the files were made from the source (URL, extract rules, architecture): when
	// the config changes it, an unchanged source must still be fetched and unpacked again.
	Recipe string `json:"recipe,omitempty"`
}

// Set returns the published version of the set, or ErrNotFound.
func (s *Store) Set(name string) (SetVersion, error) {
	return get[SetVersion](s, bucketSets, []byte(name))
}

// PutSet publishes v as the set's version.
func (s *Store) PutSet(name string, v SetVersion) error {
	if err := put(s, bucketSets, []byte(name), v); err != nil {
		return fmt.Errorf("publish set %s: %w", name, err)
	}
	return nil
}

// Sets lists the names of every set with a published version.
func (s *Store) Sets() ([]string, error) {
	var names []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSets).ForEach(func(k, _ []byte) error {
			names = append(names, string(k))
			return nil
		})
	})
	return names, err
}

// DeleteSet removes a set's published version (its files are removed separately).
func (s *Store) DeleteSet(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSets).Delete([]byte(name)) })
}
