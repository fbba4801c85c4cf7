package store

import (
	"encoding/json"
	"strings"

	bolt "go.etcd.io/bbolt"
)

var bucketPins = []byte("pins") // owner \x00 reference -> Pin

// Pin says that an owner (the config, a custom resource) needs a reference kept: eviction never removes a
// pinned reference's content.
type Pin struct {
	Owner     string `json:"owner"`
	Reference string `json:"reference"` // upstream/repository:tag, upstream/repository@digest, or files/<set>
}

// SetPins replaces every pin of owner with refs.
func (s *Store) SetPins(owner string, refs []string) error {
	prefix := []byte(owner + "\x00")
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPins)
		var stale [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			stale = append(stale, append([]byte(nil), k...))
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		for _, r := range refs {
			raw, _ := json.Marshal(Pin{Owner: owner, Reference: r})
			if err := b.Put([]byte(owner+"\x00"+r), raw); err != nil {
				return err
			}
		}
		return nil
	})
}

// Pins lists every pin.
func (s *Store) Pins() ([]Pin, error) {
	var out []Pin
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPins).ForEach(func(_, v []byte) error {
			var p Pin
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}
