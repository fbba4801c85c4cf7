package cache

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
)

// BenchmarkBlobHit is the hit path for a stored 1 MiB blob: Blob, read it all, Close, from parallel
// goroutines. The upstream answers 500 to everything and counts requests: a hit must not contact it.
func BenchmarkBlobHit(b *testing.B) {
	const size = 1 << 20
	var upstreamRequests atomic.Int64
	c, st := newTestCache(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamRequests.Add(1)
		http.Error(w, "benchmark upstream: not to be contacted", http.StatusInternalServerError)
	}))
	content := make([]byte, size)
	_, _ = rand.Read(content)
	dgst := digest.FromBytes(content).String()
	if err := st.Put(dgst, "", content); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 256<<10)
		for pb.Next() {
			blob, err := c.Blob(ctx, "up", "team/app", dgst)
			if err != nil {
				b.Errorf("Blob: %v", err)
				return
			}
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{blob.Content}, buf)
			blob.Close()
			if err != nil || n != size || blob.Result != Hit {
				b.Errorf("hit: read %d of %d bytes, result %s, err %v", n, size, blob.Result, err)
				return
			}
		}
	})
	b.StopTimer()
	if n := upstreamRequests.Load(); n != 0 {
		b.Errorf("the hit path made %d upstream requests", n)
	}
}
