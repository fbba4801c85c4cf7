package cache

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
)

// download is the one upstream fetch of a blob that every concurrent request for it shares. Readers follow
// the temp file as it grows, so the first bytes reach every client long before the download ends, but the
// last byte is held back until the whole blob has verified: a client can never receive a complete body with
// wrong content, only a broken connection.
type download struct {
	digest string
	ready  chan struct{} // closed once the size is known or the download failed
	file   *os.File      // read side of the temp file, shared by all followers (ReadAt is safe concurrently)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change, to wake followers
	size    int64         // -1 until known (and stays -1 if the upstream sent no length)
	written int64
	done    bool
	err     error
	refs    int // the downloader plus each follower; the file is closed by the last one
}

func newDownload(digest string, file *os.File) *download {
	return &download{digest: digest, file: file, ready: make(chan struct{}), changed: make(chan struct{}), size: -1, refs: 1}
}

func (d *download) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *download) start(size int64) {
	d.mu.Lock()
	d.size = size
	d.notifyLocked()
	d.mu.Unlock()
	close(d.ready)
}

func (d *download) progress(n int) {
	d.mu.Lock()
	d.written += int64(n)
	d.notifyLocked()
	d.mu.Unlock()
}

// finish records the outcome; err == nil means the blob is verified and in the store.
func (d *download) finish(err error) {
	d.mu.Lock()
	first := !d.done
	d.done, d.err = true, err
	d.notifyLocked()
	d.mu.Unlock()
	select {
	case <-d.ready:
	default:
		if first {
			close(d.ready)
		}
	}
	d.release()
}

func (d *download) acquire() {
	d.mu.Lock()
	d.refs++
	d.mu.Unlock()
}

func (d *download) release() {
	d.mu.Lock()
	d.refs--
	last := d.refs == 0
	d.mu.Unlock()
	if last {
		d.file.Close()
	}
}

// failure reports the download's error, if it has failed.
func (d *download) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// follower reads a download as it arrives. It implements io.ReadSeeker over the final size so that
// http.ServeContent can answer Range requests before the download completes.
type follower struct {
	d   *download
	ctx context.Context
	off int64
	err error
}

func (f *follower) Read(p []byte) (int, error) {
	for {
		f.d.mu.Lock()
		written, size, done, err, changed := f.d.written, f.d.size, f.d.done, f.d.err, f.d.changed
		f.d.mu.Unlock()
		if err != nil {
			f.err = err
			return 0, err
		}
		if f.off >= size && done {
			return 0, io.EOF
		}
		avail := written
		if !done && avail == size {
			avail-- // the last byte waits for the digest check
		}
		if f.off < avail {
			n, rerr := f.d.file.ReadAt(p[:min(int64(len(p)), avail-f.off)], f.off)
			f.off += int64(n)
			if n > 0 {
				return n, nil
			}
			if rerr != nil && rerr != io.EOF {
				f.err = rerr
				return 0, rerr
			}
		}
		select {
		case <-changed:
		case <-f.ctx.Done():
			f.err = f.ctx.Err()
			return 0, f.err
		}
	}
}

func (f *follower) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += f.d.size
	}
	if offset < 0 {
		return 0, errors.New("seek before start")
	}
	f.off = offset
	return offset, nil
}
