package cache

import (
	"context"
	"io"
)

type progressKey struct{}

// Progress is told how a blob of a Prefetch is coming along: done of total bytes (done == total when it
// was cached already, or is complete). It is called from the goroutine that called Prefetch.
type Progress func(digest string, done, total int64, cached bool)

// WithProgress makes Prefetch with ctx report each blob's progress to f.
func WithProgress(ctx context.Context, f Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// progressOf wraps a blob's content so that reading it reports progress, when ctx asks for it.
func progressOf(ctx context.Context, b *Blob) io.Reader {
	f, ok := ctx.Value(progressKey{}).(Progress)
	if !ok {
		return b.Content
	}
	if b.Result == Hit {
		f(b.Digest, b.Size, b.Size, true)
		return b.Content
	}
	f(b.Digest, 0, b.Size, false)
	return &progressReader{r: b.Content, f: f, digest: b.Digest, total: b.Size}
}

type progressReader struct {
	r      io.Reader
	f      Progress
	digest string
	done   int64
	total  int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		p.f(p.digest, p.done, p.total, false)
	}
	return n, err
}
