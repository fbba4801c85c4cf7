package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"imagecache.io/imagecache/internal/reference"
)

// MaxManifestSize is the largest manifest the cache accepts (the limit distribution and containerd use).
const MaxManifestSize = 4 << 20

// ErrManifestTooLarge is wrapped in the Error for a manifest over MaxManifestSize.
var ErrManifestTooLarge = fmt.Errorf("manifest is over the %d byte limit", MaxManifestSize)

// manifestAccept lists every manifest media type, so the upstream returns its stored manifest unconverted.
var manifestAccept = strings.Join([]string{
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.v1+prettyjws",
	"application/vnd.docker.distribution.manifest.v1+json",
	"application/vnd.oci.artifact.manifest.v1+json",
}, ", ")

// Descriptor is what a manifest HEAD tells.
type Descriptor struct {
	Digest    string // from Docker-Content-Digest; may be empty if the upstream does not send it
	MediaType string
	Size      int64
}

// Manifest is a manifest's exact bytes as the upstream served them.
type Manifest struct {
	Descriptor
	Body []byte
}

// Response is an upstream answer whose body is read by the caller.
type Response struct {
	Body   io.ReadCloser // closes the request; a stall longer than the timeout breaks it
	Size   int64         // Content-Length, -1 when unknown
	Header http.Header
}

// HeadManifest asks the upstream what repository:ref currently points to.
func (c *Client) HeadManifest(ctx context.Context, repository, ref string, timeout time.Duration) (Descriptor, error) {
	op := "HEAD manifest " + reference.Join(repository, ref)
	resp, err := c.do(ctx, http.MethodHead, repository, "/manifests/"+ref, "", manifestAccept, timeout, op)
	if err != nil {
		return Descriptor{}, err
	}
	resp.Body.Close()
	return Descriptor{Digest: resp.Header.Get("Docker-Content-Digest"), MediaType: mediaType(resp.Header), Size: resp.Size}, nil
}

// GetManifest fetches repository:ref's manifest bytes, refusing anything over MaxManifestSize.
func (c *Client) GetManifest(ctx context.Context, repository, ref string, timeout time.Duration) (Manifest, error) {
	op := "GET manifest " + reference.Join(repository, ref)
	resp, err := c.do(ctx, http.MethodGet, repository, "/manifests/"+ref, "", manifestAccept, timeout, op)
	if err != nil {
		return Manifest{}, err
	}
	defer resp.Body.Close()
	if resp.Size > MaxManifestSize {
		return Manifest{}, &Error{Upstream: c.name, Op: op, Err: fmt.Errorf("%d bytes: %w", resp.Size, ErrManifestTooLarge)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil {
		return Manifest{}, &Error{Upstream: c.name, Op: op, Err: fmt.Errorf("read body: %w", err)}
	}
	if len(body) > MaxManifestSize {
		return Manifest{}, &Error{Upstream: c.name, Op: op, Err: ErrManifestTooLarge}
	}
	if resp.Size >= 0 && int64(len(body)) != resp.Size {
		return Manifest{}, &Error{Upstream: c.name, Op: op, Err: fmt.Errorf("got %d of %d bytes", len(body), resp.Size)}
	}
	d := Descriptor{Digest: resp.Header.Get("Docker-Content-Digest"), MediaType: mediaType(resp.Header), Size: int64(len(body))}
	return Manifest{Descriptor: d, Body: body}, nil
}

// HeadBlob asks the upstream for a blob's size without transferring it.
func (c *Client) HeadBlob(ctx context.Context, repository, digest string, timeout time.Duration) (int64, error) {
	op := "HEAD blob " + repository + "@" + digest
	resp, err := c.do(ctx, http.MethodHead, repository, "/blobs/"+digest, "", "", timeout, op)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.Size < 0 {
		return 0, &Error{Upstream: c.name, Op: op, Err: errors.New("the upstream sent no Content-Length")}
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != digest {
		return 0, &Error{Upstream: c.name, Op: op, Err: fmt.Errorf("the upstream answered for %s", got)}
	}
	return resp.Size, nil
}

// GetBlob starts downloading a blob; the caller reads and closes the body.
func (c *Client) GetBlob(ctx context.Context, repository, digest string, timeout time.Duration) (*Response, error) {
	return c.do(ctx, http.MethodGet, repository, "/blobs/"+digest, "", "", timeout, "GET blob "+repository+"@"+digest)
}

// Get fetches a small document under the repository (tags/list, referrers/<digest>) with the given query.
func (c *Client) Get(ctx context.Context, repository, suffix, rawQuery, accept string, timeout time.Duration) (*Response, error) {
	return c.do(ctx, http.MethodGet, repository, suffix, rawQuery, accept, timeout, "GET "+repository+suffix)
}

// do sends one request. timeout bounds the wait for the answer's status and headers, including the auth
// handshake; afterwards the same timeout applies to each pause in the body, so a stalled transfer is cut
// instead of hanging its readers.
func (c *Client) do(ctx context.Context, method, repository, suffix, rawQuery, accept string, timeout time.Duration, op string) (*Response, error) {
	if err := c.silent(op); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var timedOut atomic.Bool
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); cancel() })
	fail := func(err error) (*Response, error) {
		timer.Stop()
		cancel()
		if timedOut.Load() {
			c.unanswered(timeout)
		}
		return nil, fromTransport(op, c.name, err, timedOut.Load() || errors.Is(err, context.DeadlineExceeded), timeout)
	}
	rt, err := c.transport(ctx, repository)
	if err != nil {
		return fail(err)
	}
	u := url.URL{Scheme: c.scheme, Host: c.reg.RegistryStr(), Path: "/v2/" + repository + suffix, RawQuery: rawQuery}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return fail(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return fail(err)
	}
	timer.Stop()
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return nil, fromResponse(op, c.name, resp)
	}
	size := resp.ContentLength
	if method == http.MethodHead {
		size = -1
		if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil {
			size = n
		}
	}
	return &Response{Body: newIdleBody(resp.Body, timeout, cancel, &timedOut), Size: size, Header: resp.Header}, nil
}

// IdleTimeout wraps a response body so that a pause in its bytes longer than idle cancels the request
// (through cancel, the request context's) and the read fails with a message saying so.
func IdleTimeout(body io.ReadCloser, idle time.Duration, cancel context.CancelFunc) io.ReadCloser {
	return newIdleBody(body, idle, cancel, new(atomic.Bool))
}

func newIdleBody(body io.ReadCloser, idle time.Duration, cancel context.CancelFunc, timedOut *atomic.Bool) *idleBody {
	b := &idleBody{body: body, cancel: cancel, idle: idle, timedOut: timedOut}
	b.timer = time.AfterFunc(idle, b.expire)
	return b
}

// idleBody cuts a response body whose bytes stop arriving for longer than idle.
type idleBody struct {
	body     io.ReadCloser
	cancel   context.CancelFunc
	idle     time.Duration
	timer    *time.Timer
	timedOut *atomic.Bool
}

func (b *idleBody) expire() { b.timedOut.Store(true); b.cancel() }

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.timer.Reset(b.idle)
	if err != nil && err != io.EOF && b.timedOut.Load() {
		err = fmt.Errorf("upstream sent nothing for %s: %w", b.idle, err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	b.cancel()
	return b.body.Close()
}

func mediaType(h http.Header) string {
	mt := h.Get("Content-Type")
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	return mt
}
