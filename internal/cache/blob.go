package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"

	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// Blob is a blob answer. Content is read with http.ServeContent; after serving, Err tells whether the
// content could not be completed (the upstream failed or the digest did not verify), in which case the
// client's connection must be broken rather than the response ended normally.
type Blob struct {
	Digest  string
	Size    int64
	Result  Result
	Content io.ReadSeeker
	close   func()
	err     func() error
}

// Close releases the blob's file.
func (b *Blob) Close() { b.close() }

// Err is the reason the content could not be completed, or nil.
func (b *Blob) Err() error { return b.err() }

// Blob answers a blob request for repository@dgst on upstream up.
func (c *Cache) Blob(ctx context.Context, up, repository, dgst string) (*Blob, error) {
	client, err := c.client(up)
	if err != nil {
		return nil, err
	}
	if b, err := c.storedBlob(dgst, Hit); b != nil || err != nil {
		if b != nil {
			c.store.Touch(dgst)
		}
		return b, err
	}
	rule := c.ruleFor(ctx, up, repository, "")
	if policy.DecideDigest(rule, false) == policy.Forbid {
		return nil, forbidden(fmt.Sprintf("blob %s/%s@%s", up, repository, dgst), up)
	}
	d, err := c.join(ctx, client, repository, dgst, rule)
	if err != nil || d == nil {
		// d == nil: the download finished between our two looks at the store.
		if err != nil {
			return nil, err
		}
		return c.storedBlob(dgst, Miss)
	}
	select {
	case <-d.ready:
	case <-ctx.Done():
		d.release()
		return nil, ctx.Err()
	}
	if err := d.failure(); err != nil {
		d.release()
		return nil, err
	}
	if d.size < 0 {
		// Without a length up front a client cannot be promised a size: wait for the verified blob.
		return c.awaitStored(ctx, d)
	}
	fl := &follower{d: d, ctx: ctx}
	return &Blob{Digest: dgst, Size: d.size, Result: Miss, Content: fl, close: d.release, err: func() error { return fl.err }}, nil
}

// BlobSize answers a HEAD for a blob: its size from the store (a hit) or, when it is not stored, from an
// upstream HEAD, which stores nothing: a client probing for a multi-gigabyte layer must not cost its whole
// transfer.
func (c *Cache) BlobSize(ctx context.Context, up, repository, dgst string) (int64, Result, error) {
	client, err := c.client(up)
	if err != nil {
		return 0, "", err
	}
	obj, err := c.store.Stat(dgst)
	if err == nil {
		c.store.Touch(dgst)
		return obj.Size, Hit, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return 0, "", storeFailure(err)
	}
	what := fmt.Sprintf("blob %s/%s@%s", up, repository, dgst)
	rule := c.ruleFor(ctx, up, repository, "")
	if policy.DecideDigest(rule, false) == policy.Forbid {
		return 0, "", forbidden(what, up)
	}
	size, err := client.HeadBlob(ctx, repository, dgst, rule.UpstreamTimeout)
	if err != nil {
		return 0, "", upstreamFailure("check "+what, err)
	}
	return size, Miss, nil
}

func (c *Cache) storedBlob(dgst string, r Result) (*Blob, error) {
	f, obj, err := c.store.Open(dgst)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeFailure(err)
	}
	return &Blob{Digest: dgst, Size: obj.Size, Result: r, Content: f, close: func() { f.Close() }, err: func() error { return nil }}, nil
}

func (c *Cache) awaitStored(ctx context.Context, d *download) (*Blob, error) {
	defer d.release()
	for {
		d.mu.Lock()
		done, err, changed := d.done, d.err, d.changed
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if done {
			return c.storedBlob(d.digest, Miss)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// join returns the download of dgst in progress, starting one if there is none, with a reference held for
// the caller. It returns nil when the blob reached the store meanwhile.
func (c *Cache) join(ctx context.Context, client *upstream.Client, repository, dgst string, rule policy.Rule) (*download, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.downloads[dgst]; ok {
		d.acquire()
		return d, nil
	}
	if _, err := c.store.Stat(dgst); err == nil {
		return nil, nil
	}
	w, err := c.store.NewWriter(dgst, -1)
	if err != nil {
		return nil, storeFailure(err)
	}
	file, err := os.Open(w.TempPath())
	if err != nil {
		w.Abort()
		return nil, storeFailure(err)
	}
	d := newDownload(dgst, file)
	d.acquire()
	c.downloads[dgst] = d
	go c.download(context.WithoutCancel(ctx), d, w, client, repository, rule)
	return d, nil
}

// download fetches the blob into w. It runs detached from the cancellation of the request that started it
// (keeping its values, such as a pull secret's credentials): clients that give up do not waste the bytes
// already fetched for the others, and a stall is cut by the idle timeout.
func (c *Cache) download(ctx context.Context, d *download, w *store.Writer, client *upstream.Client, repository string, rule policy.Rule) {
	what := fmt.Sprintf("fetch blob %s/%s@%s", client.Name(), repository, d.digest)
	err := c.fetchBlob(ctx, d, w, client, repository, rule, what)
	if errors.Is(err, errPassedThrough) {
		err = nil // served to every follower; the temp file goes with w.Abort
	} else if err != nil {
		w.Abort()
		c.log.WarnContext(ctx, "blob download failed", "upstream", client.Name(), "repository", repository, "digest", d.digest, "error", err)
	} else {
		c.log.InfoContext(ctx, "fetched blob", "upstream", client.Name(), "repository", repository, "digest", d.digest, "size", w.Written())
	}
	c.mu.Lock()
	delete(c.downloads, d.digest)
	c.mu.Unlock()
	d.finish(err)
}

func (c *Cache) fetchBlob(ctx context.Context, d *download, w *store.Writer, client *upstream.Client, repository string, rule policy.Rule, what string) error {
	resp, err := client.GetBlob(ctx, repository, d.digest, rule.UpstreamTimeout)
	if err != nil {
		return upstreamFailure(what, err)
	}
	defer resp.Body.Close()
	// Over maxObjectSize the blob still goes through the temp file, so concurrent clients share the one
	// download, but it is never committed.
	passThrough := c.MaxObjectSize > 0 && resp.Size > c.MaxObjectSize
	why := "over storage.maxObjectSize"
	if c.MaxObjectSize > 0 && resp.Size < 0 {
		return upstreamFailure(what, &upstream.Error{Upstream: client.Name(), Op: "GET blob",
			Err: fmt.Errorf("the upstream sent no Content-Length, so storage.maxObjectSize (%d) cannot be applied", c.MaxObjectSize)})
	}
	if !passThrough && resp.Size > 0 {
		c.inFlight.Add(resp.Size)
		var err error
		if c.MakeRoom != nil {
			err = c.MakeRoom(resp.Size)
		}
		switch {
		case errors.Is(err, eviction.ErrLargerThanLimit):
			// It can never be kept, but the client can still have it, as with maxObjectSize.
			c.inFlight.Add(-resp.Size)
			passThrough, why = true, "larger than storage.maxSize"
		case err != nil:
			c.inFlight.Add(-resp.Size)
			// Before any header went out: the client gets a clean error, not a cut body.
			return &Error{Status: http.StatusInsufficientStorage, Code: "UNAVAILABLE", Err: err,
				Message: fmt.Sprintf("%s: no room in the cache's storage: %v", what, err)}
		default:
			defer c.inFlight.Add(-resp.Size)
		}
	}
	if passThrough && resp.Size > 0 {
		// Passing through still goes by way of a temp file (so concurrent clients share the download): a blob
		// larger than the free space cannot, and cached content is never evicted for what will not be kept.
		if avail, err := c.store.Available(); err == nil && avail < resp.Size {
			return &Error{Status: http.StatusInsufficientStorage, Code: "UNAVAILABLE", Err: syscall.ENOSPC,
				Message: fmt.Sprintf("%s: no room in the cache's storage to stream it through: it is %d bytes (%s) and passes through a temp file, but only %d bytes are free", what, resp.Size, why, avail)}
		}
	}
	d.start(resp.Size)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if resp.Size >= 0 && w.Written()+int64(n) > resp.Size {
				return badUpstreamContent(what, fmt.Errorf("more than the announced %d bytes", resp.Size))
			}
			if _, err := w.Write(buf[:n]); err != nil {
				if passThrough && isNoSpace(err) {
					return &Error{Status: http.StatusInsufficientStorage, Code: "UNAVAILABLE", Err: err,
						Message: fmt.Sprintf("%s: no room in the cache's storage: it filled up while the blob streamed through (%s)", what, why)}
				}
				if c.noSpace(err, resp.Size-w.Written()) {
					return &Error{Status: http.StatusInsufficientStorage, Code: "UNAVAILABLE", Err: err,
						Message: fmt.Sprintf("%s: the cache's storage is full; eviction has started, retry shortly", what)}
				}
				return storeFailure(err)
			}
			d.progress(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return upstreamFailure(what, &upstream.Error{Upstream: client.Name(), Op: "read blob body", Err: rerr})
		}
	}
	if resp.Size >= 0 && w.Written() != resp.Size {
		return upstreamFailure(what, &upstream.Error{Upstream: client.Name(), Op: "read blob body",
			Err: fmt.Errorf("got %d of %d bytes", w.Written(), resp.Size)})
	}
	if passThrough {
		// Too large to keep: it was verified on the way through (the last byte waited for this), then goes.
		if err := w.Verify(); err != nil {
			return badUpstreamContent(what, err)
		}
		w.Abort()
		c.log.InfoContext(ctx, "streamed blob through without storing it ("+why+")", "digest", d.digest, "size", w.Written(), "maxObjectSize", c.MaxObjectSize)
		return errPassedThrough
	}
	if err := w.Commit(""); err != nil {
		if errors.Is(err, store.ErrDigestMismatch) {
			return badUpstreamContent(what, err)
		}
		c.noSpace(err, w.Written())
		return storeFailure(err)
	}
	if err := c.store.Link(client.Name(), repository, d.digest); err != nil {
		return storeFailure(err)
	}
	return nil
}

// errPassedThrough ends a download that was served but deliberately not stored.
var errPassedThrough = errors.New("passed through")
