package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fileServer is an HTTP origin for file sets: a plain web server (like tarballs.opendev.org) whose files a test
// can swap, break, stop and start again on the same address, and which records every request it answers.
type fileServer struct {
	t    testing.TB
	Addr string // 127.0.0.1:PORT, kept across Stop/Start
	URL  string // http://Addr

	mu       sync.Mutex
	srv      *httptest.Server
	files    map[string]servedFile // by URL path
	failWith int                   // non-zero: every request is answered with this status
	log      []fileRequest
}

// servedFile is what the server answers for one path.
type servedFile struct {
	Body         []byte
	ETag         string    // sent as is (quoted); empty: none
	LastModified time.Time // zero: no Last-Modified
	// Truncate: promise the whole Body in Content-Length, send only this many bytes, then drop the connection.
	Truncate int
}

// fileRequest is one request as the server saw and answered it.
type fileRequest struct {
	At                time.Time // when it arrived
	Method, Path      string
	IfNoneMatch       string
	IfModifiedSince   string
	Range             string
	Status            int
	BodyBytes         int64 // body bytes written to the connection
	Truncated         bool
	ContentLengthSent string
}

// startFileServer starts an empty file server on a fresh 127.0.0.1 port; it is closed when the test ends.
func startFileServer(t testing.TB) *fileServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fileServer{t: t, Addr: ln.Addr().String(), files: map[string]servedFile{}}
	f.URL = "http://" + f.Addr
	f.serveOn(ln)
	t.Cleanup(f.Stop)
	return f
}

func (f *fileServer) serveOn(ln net.Listener) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(f.handle))
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	f.mu.Lock()
	f.srv = s
	f.mu.Unlock()
}

// Stop closes the listener and every connection: the cache's next request is refused.
func (f *fileServer) Stop() {
	f.mu.Lock()
	s := f.srv
	f.srv = nil
	f.mu.Unlock()
	if s != nil {
		s.CloseClientConnections()
		s.Close()
	}
}

// Start serves again on the same address after Stop.
func (f *fileServer) Start(t testing.TB) {
	t.Helper()
	var ln net.Listener
	// The port was ours a moment ago; binding it again only fails if someone else took it meanwhile.
	waitFor(t, 5*time.Second, "listen again on "+f.Addr, func() error {
		var err error
		ln, err = net.Listen("tcp", f.Addr)
		return err
	})
	f.serveOn(ln)
}

// Set publishes body at path with a strong ETag (the quoted sha256 of body) and the given Last-Modified.
func (f *fileServer) Set(path string, body []byte, lastModified time.Time) {
	f.SetFile(path, servedFile{Body: body, ETag: `"` + sha256Hex(body) + `"`, LastModified: lastModified})
}

// SetFile publishes exactly what sf says at path.
func (f *fileServer) SetFile(path string, sf servedFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = sf
}

// FailWith makes every request answer status (0: serve files again).
func (f *fileServer) FailWith(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWith = status
}

// Requests returns the requests answered so far for path ("" for all paths).
func (f *fileServer) Requests(path string) []fileRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fileRequest
	for _, r := range f.log {
		if path == "" || r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// counts sums up the requests for path: all of them, 200s, 304s and body bytes sent.
func (f *fileServer) counts(path string) (requests, ok, notModified int, bodyBytes int64) {
	for _, r := range f.Requests(path) {
		requests++
		switch r.Status {
		case http.StatusOK:
			ok++
		case http.StatusNotModified:
			notModified++
		}
		bodyBytes += r.BodyBytes
	}
	return
}

func (f *fileServer) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	sf, found := f.files[r.URL.Path]
	failWith := f.failWith
	f.mu.Unlock()
	cw := &countingWriter{ResponseWriter: w}
	rec := fileRequest{
		At:     time.Now(),
		Method: r.Method, Path: r.URL.Path,
		IfNoneMatch: r.Header.Get("If-None-Match"), IfModifiedSince: r.Header.Get("If-Modified-Since"),
		Range: r.Header.Get("Range"),
	}
	defer func() {
		rec.Status, rec.BodyBytes, rec.ContentLengthSent = cw.status(), cw.n, cw.Header().Get("Content-Length")
		f.mu.Lock()
		f.log = append(f.log, rec)
		f.mu.Unlock()
	}()
	switch {
	case failWith != 0:
		http.Error(cw, "file server told to fail", failWith)
		return
	case !found:
		http.NotFound(cw, r)
		return
	case sf.Truncate > 0:
		rec.Truncated = true
		cw.Header().Set("Content-Length", strconv.Itoa(len(sf.Body)))
		cw.Header().Set("Content-Type", "application/gzip")
		cw.WriteHeader(http.StatusOK)
		_, _ = cw.Write(sf.Body[:sf.Truncate])
		cw.Flush()
		// The deferred log entry still runs; ErrAbortHandler makes net/http drop the connection quietly.
		panic(http.ErrAbortHandler)
	}
	if sf.ETag != "" {
		cw.Header().Set("ETag", sf.ETag)
	}
	cw.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(cw, r, "", sf.LastModified, bytes.NewReader(sf.Body))
}

// countingWriter records the status and the body bytes of one answer.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if fl, ok := c.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (c *countingWriter) status() int {
	if c.code == 0 {
		return http.StatusOK
	}
	return c.code
}

// ipaTarball is an IPA-like release: a gzipped tarball with a kernel and an initramfs of random content.
type ipaTarball struct {
	Tgz       []byte
	Kernel    []byte
	Initramfs []byte
}

const (
	ipaKernelMember    = "ipa-centos9-master.kernel"
	ipaInitramfsMember = "ipa-centos9-master.initramfs"
)

// newIPATarball makes a fresh release: different random content on every call, so that versions can be told
// apart by their bytes. The kernel comes first and is small, the initramfs is large, as in the real thing.
func newIPATarball(t testing.TB) ipaTarball {
	t.Helper()
	return ipaTarballOf(t, randomBytes(t, 64<<10), randomBytes(t, 512<<10))
}

// ipaTarballOf makes a release with the given kernel and initramfs.
func ipaTarballOf(t testing.TB, kernel, initramfs []byte) ipaTarball {
	t.Helper()
	return ipaTarball{Kernel: kernel, Initramfs: initramfs, Tgz: tarGz(t,
		tarEntry{Name: "./", Type: tar.TypeDir},
		tarEntry{Name: "./" + ipaKernelMember, Body: kernel},
		tarEntry{Name: "./" + ipaInitramfsMember, Body: initramfs},
	)}
}

// tarEntry is one member of a test tarball: a regular file unless Type says otherwise.
type tarEntry struct {
	Name     string
	Type     byte
	Body     []byte
	Linkname string
}

// tarGz writes entries as a gzipped tar, in order, without any cleaning of names (bad tarballs need bad names).
func tarGz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.Name, Typeflag: typ, Mode: 0o644, Linkname: e.Linkname, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// badTarball is an archive that must never be published, with words that the refusal message should contain.
type badTarball struct {
	Name    string
	Tgz     []byte
	Mention []string // the failure message must contain one of these (case-insensitive)
}

// badIPATarballs are hostile or broken releases. Each carries a fresh, complete-looking kernel and initramfs
// before the bad part where it can, so that a cache which publishes as it reads would be caught.
func badIPATarballs(t testing.TB) []badTarball {
	t.Helper()
	good := func() []tarEntry {
		return []tarEntry{
			{Name: ipaKernelMember, Body: randomBytes(t, 4096)},
			{Name: ipaInitramfsMember, Body: randomBytes(t, 8192)},
		}
	}
	return []badTarball{
		{
			Name:    "dot-dot member",
			Tgz:     tarGz(t, append(good(), tarEntry{Name: "../../etc/cron.d/evil", Body: []byte("* * * * * root reboot\n")})...),
			Mention: []string{"../../etc/cron.d/evil", `".."`, "'..'", "`..`"},
		},
		{
			Name:    "absolute member",
			Tgz:     tarGz(t, append(good(), tarEntry{Name: "/etc/evil", Body: []byte("evil\n")})...),
			Mention: []string{"/etc/evil"},
		},
		{
			// The kernel rule matches only the link: publishing it would serve a link, or /etc/passwd.
			Name: "symlink matched by a rule",
			Tgz: tarGz(t,
				tarEntry{Name: "ipa.kernel", Type: tar.TypeSymlink, Linkname: "/etc/passwd"},
				tarEntry{Name: ipaInitramfsMember, Body: randomBytes(t, 8192)},
			),
			Mention: []string{"symlink", "symbolic link"},
		},
		{
			Name:    "rule matching nothing",
			Tgz:     tarGz(t, tarEntry{Name: ipaInitramfsMember, Body: randomBytes(t, 8192)}),
			Mention: []string{"*.kernel"},
		},
	}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// sha256sumLine is one line of `sha256sum` output for body published as name.
func sha256sumLine(body []byte, name string) string {
	return fmt.Sprintf("%s  %s\n", sha256Hex(body), name)
}
