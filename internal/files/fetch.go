package files

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/upstream"
)

// Source is where a set's files come from.
type Source struct {
	URL         string
	SHA256      string // of the downloaded file, when known up front
	ChecksumURL string // a sha256sum-format file naming the download's checksum
	Extract     []Rule // empty: the download itself is published under its own name
}

// Conditional is what the previous download said about itself; sent back so that an unchanged source costs
// a 304 and no transfer. The zero value asks unconditionally.
type Conditional struct{ ETag, LastModified string }

// Download is the outcome of one fetch.
type Download struct {
	NotModified  bool   // the upstream answered 304: nothing was transferred or written
	ETag         string // the upstream's validators, for the next Conditional
	LastModified string
	SourceDigest string // sha256 of the bytes downloaded
	Files        []Published
}

// HTTPError is an upstream answer other than 200 or 304.
type HTTPError struct {
	URL    string
	Status int
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("GET %s: status %d %s", e.URL, e.Status, http.StatusText(e.Status))
}

// Unreachable reports whether err means the upstream could not be asked at all (connection refused, DNS,
// timeout) or failed on its side (5xx, 429), as opposed to a bad source (404, checksum mismatch).
func Unreachable(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusTooManyRequests
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Fetcher downloads HTTP sources.
type Fetcher struct {
	Client   *http.Client // nil: one that honours HTTP_PROXY, HTTPS_PROXY and NO_PROXY
	Timeout  time.Duration
	Progress func(done, total int64) // called as bytes arrive; total is -1 when unknown
}

// DefaultTimeout bounds the wait for a file server's first answer and any stall in its transfer.
const DefaultTimeout = 30 * time.Second

func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}}
}

func (f *Fetcher) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return DefaultTimeout
}

// CheckURL refuses schemes the fetcher cannot download, with a message that says what to use instead.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q: scheme %q is not supported: use http:// or https:// (or oci:// for an artifact in a registry)", raw, u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("url %q has no host", raw)
	}
	return nil
}

// Fetch downloads src (conditionally on cond) into sink. On any error the files already written to sink
// must be discarded by the caller; nothing is published here.
func (f *Fetcher) Fetch(ctx context.Context, src Source, cond Conditional, sink Sink) (*Download, error) {
	if err := CheckURL(src.URL); err != nil {
		return nil, err
	}
	want := strings.ToLower(src.SHA256)
	if src.ChecksumURL != "" {
		var err error
		if want, err = f.checksum(ctx, src.ChecksumURL, path.Base(src.URL)); err != nil {
			return nil, err
		}
	}
	resp, cancel, err := f.get(ctx, src.URL, cond)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	d := &Download{ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	if resp.StatusCode == http.StatusNotModified {
		d.NotModified = true
		return d, nil
	}
	hash := sha256.New()
	body := io.TeeReader(&progressReader{r: resp.Body, total: resp.ContentLength, report: f.Progress}, hash)
	if len(src.Extract) > 0 {
		d.Files, err = Extract(body, src.Extract, sink)
	} else {
		var p Published
		p, err = copyFile(body, sink, fileName(src.URL), resp.ContentLength)
		d.Files = []Published{p}
	}
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", src.URL, err)
	}
	d.SourceDigest = "sha256:" + hex.EncodeToString(hash.Sum(nil))
	if want != "" && d.SourceDigest != "sha256:"+want {
		return nil, fmt.Errorf("download %s: checksum mismatch: the file hashes to %s, but sha256:%s was expected; nothing was published", src.URL, d.SourceDigest, want)
	}
	return d, nil
}

// get sends the (conditional) GET; the timeout bounds the first answer, then each stall in the body.
func (f *Fetcher) get(ctx context.Context, rawURL string, cond Conditional) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(f.timeout(), cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		timer.Stop()
		cancel()
		return nil, nil, err
	}
	if cond.ETag != "" {
		req.Header.Set("If-None-Match", cond.ETag)
	}
	if cond.LastModified != "" {
		req.Header.Set("If-Modified-Since", cond.LastModified)
	}
	resp, err := f.client().Do(req)
	stopped := timer.Stop()
	if err != nil {
		cancel()
		if !stopped {
			return nil, nil, fmt.Errorf("GET %s: no answer within %s: %w", rawURL, f.timeout(), context.DeadlineExceeded)
		}
		return nil, nil, fmt.Errorf("GET %s: %w", rawURL, err)
	}
	if resp.StatusCode != http.StatusOK && !(resp.StatusCode == http.StatusNotModified && cond != Conditional{}) {
		resp.Body.Close()
		cancel()
		return nil, nil, &HTTPError{URL: rawURL, Status: resp.StatusCode}
	}
	resp.Body = upstream.IdleTimeout(resp.Body, f.timeout(), cancel)
	return resp, cancel, nil
}

// checksum reads a sha256sum-format file and returns the checksum for name (or its only checksum).
func (f *Fetcher) checksum(ctx context.Context, checksumURL, name string) (string, error) {
	if err := CheckURL(checksumURL); err != nil {
		return "", err
	}
	resp, cancel, err := f.get(ctx, checksumURL, Conditional{})
	if err != nil {
		return "", fmt.Errorf("read checksum: %w", err)
	}
	defer cancel()
	defer resp.Body.Close()
	var sums []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		sum := strings.ToLower(fields[0])
		if _, err := hex.DecodeString(sum); err != nil || len(sum) != 64 {
			return "", fmt.Errorf("checksum file %s: %q is not a sha256 checksum line", checksumURL, sc.Text())
		}
		if len(fields) > 1 && strings.TrimPrefix(path.Base(fields[1]), "*") == name {
			return sum, nil
		}
		sums = append(sums, sum)
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read checksum file %s: %w", checksumURL, err)
	}
	if len(sums) == 1 {
		return sums[0], nil
	}
	return "", fmt.Errorf("checksum file %s has no line for %s", checksumURL, name)
}

// fileName is the name a download without extract rules is published under: the last path segment.
func fileName(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || path.Base(u.Path) == "/" || path.Base(u.Path) == "." {
		return "download"
	}
	return path.Base(u.Path)
}

func copyFile(r io.Reader, sink Sink, name string, size int64) (Published, error) {
	w, err := sink.Create(name, size)
	if err != nil {
		return Published{}, err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Abort()
		return Published{}, err
	}
	digest, n, err := w.Close()
	if err != nil {
		w.Abort()
		return Published{}, err
	}
	return Published{Name: name, Digest: digest, Size: n}, nil
}

// progressReader reports bytes read so far.
type progressReader struct {
	r      io.Reader
	done   int64
	total  int64
	report func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if p.report != nil && n > 0 {
		p.report(p.done, p.total)
	}
	return n, err
}
