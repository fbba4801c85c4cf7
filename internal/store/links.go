package store

import (
	"strings"

	bolt "go.etcd.io/bbolt"
)

// ForEachLink calls f for every record that digest was pulled under upstream/repository (see Link): the
// listings name an image pulled by digest, which has no tag, by its repository this way.
func (s *Store) ForEachLink(f func(upstream, repository, digest string) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLinks).ForEach(func(k, _ []byte) error {
			parts := strings.SplitN(string(k), "\x00", 3)
			if len(parts) != 3 {
				return nil
			}
			return f(parts[0], parts[1], parts[2])
		})
	})
}
