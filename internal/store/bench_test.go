package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// benchDigest is a valid, distinct sha256 digest for i.
func benchDigest(i int) string {
	s := sha256.Sum256(fmt.Appendf(nil, "object %d", i))
	return "sha256:" + hex.EncodeToString(s[:])
}

// benchFillIndex writes objects object records and tags tag records straight into the index, many per
// transaction: what a store that has cached that much holds in index.db (the files themselves are not
// read at Open, so none are written).
func benchFillIndex(b *testing.B, s *Store, objects, tags int) {
	b.Helper()
	const batch = 10_000
	now := time.Now().UTC()
	for start := 0; start < objects; start += batch {
		err := s.db.Update(func(tx *bolt.Tx) error {
			bk := tx.Bucket(bucketObjects)
			for i := start; i < min(start+batch, objects); i++ {
				o := Object{Digest: benchDigest(i), Size: int64(1024 + i%4096), StoredAt: now, ModTime: now.UnixNano()}
				if i%10 == 0 {
					o.MediaType = "application/vnd.oci.image.manifest.v1+json"
				}
				raw, err := json.Marshal(o)
				if err != nil {
					return err
				}
				if err := bk.Put([]byte(o.Digest), raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for start := 0; start < tags; start += batch {
		err := s.db.Update(func(tx *bolt.Tx) error {
			bk := tx.Bucket(bucketTags)
			for i := start; i < min(start+batch, tags); i++ {
				t := Tag{Digest: benchDigest(i * 10), MediaType: "application/vnd.oci.image.manifest.v1+json", Size: 1024, FetchedAt: now, CheckedAt: now}
				raw, err := json.Marshal(t)
				if err != nil {
					return err
				}
				if err := bk.Put(key("docker.io", fmt.Sprintf("team/app%d", i/10), fmt.Sprintf("v%d", i%10)), raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen100k is the startup cost of a store whose index holds 100,000 objects and 20,000 tags
// (issue 4: "startup with 100,000 indexed objects takes under a second"): one Open and Close per op.
func BenchmarkOpen100k(b *testing.B) {
	const objects, tags = 100_000, 20_000
	root := b.TempDir()
	s, err := Open(root)
	if err != nil {
		b.Fatal(err)
	}
	benchFillIndex(b, s, objects, tags)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Open(root)
		if err != nil {
			b.Fatal(err)
		}
		if _, n := s.Usage(); n != objects {
			b.Fatalf("Open counted %d objects, want %d", n, objects)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTouch is the bookkeeping a hit adds: Touch from at least 4 goroutines over 1,000 digests.
func BenchmarkTouch(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	digests := make([]string, 1000)
	for i := range digests {
		digests[i] = benchDigest(i)
	}
	b.SetParallelism(max(1, (4+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			s.Touch(digests[i%len(digests)])
			i++
		}
	})
}

// BenchmarkFlushAccessTimes writes 10,000 pending access times in one transaction per op.
func BenchmarkFlushAccessTimes(b *testing.B) {
	const pending = 10_000
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	digests := make([]string, pending)
	for i := range digests {
		digests[i] = benchDigest(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, d := range digests {
			s.Touch(d)
		}
		b.StartTimer()
		if err := s.FlushAccessTimes(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	times, err := s.AccessTimes()
	if err != nil || len(times) != pending {
		b.Fatalf("after the flushes %d access times are recorded (err %v), want %d", len(times), err, pending)
	}
}
