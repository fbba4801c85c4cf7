package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// File sets (DESIGN.md §3, files:): imagecache downloads HTTP files (or tarball members, or OCI artifact
// layers), keeps them fresh with conditional requests and serves them at /files/<set>/<file>.

const (
	kernelFile    = "ironic-python-agent.kernel"
	initramfsFile = "ironic-python-agent.initramfs"
	tarballName   = "ipa-centos9-master.tar.gz"
)

// setStatus is GET /files/<set>/ (and one element of GET /files/).
type setStatus struct {
	Set                  string    `json:"set"`
	Source               string    `json:"source"`
	State                string    `json:"state"`
	Message              string    `json:"message"`
	Version              int       `json:"version"`
	PublishedAt          string    `json:"publishedAt"`
	CheckedAt            string    `json:"checkedAt"`
	NextCheck            string    `json:"nextCheck"`
	UpstreamETag         string    `json:"upstreamETag"`
	UpstreamLastModified string    `json:"upstreamLastModified"`
	OlderThanMinimum     bool      `json:"olderThanMinimum"`
	Files                []setFile `json:"files"`
}

type setFile struct {
	Name         string `json:"name"`
	URL          string `json:"url"`
	Digest       string `json:"digest"`
	Size         int64  `json:"size"`
	LastModified string `json:"lastModified"`
}

func (s setStatus) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ipaSetYAML is one files: entry that extracts the kernel and initramfs of an IPA tarball; extra lines
// (already indented by four spaces) are added to it.
func ipaSetYAML(set, source string, extra ...string) string {
	s := fmt.Sprintf(`  - set: %s
    url: %q
    extract:
      - {from: "*.kernel", to: %s}
      - {from: "*.initramfs", to: %s}
    refreshInterval: 1h
`, set, source, kernelFile, initramfsFile)
	for _, e := range extra {
		s += e + "\n"
	}
	return s
}

func fileURL(c *cacheProc, set, name string) string { return c.URL + "/files/" + set + "/" + name }

// getSetStatus reads /files/<set>/, which must be a 200 with the status JSON.
func getSetStatus(t testing.TB, c *cacheProc, set string) setStatus {
	t.Helper()
	a := call(t, http.MethodGet, c.URL+"/files/"+set+"/")
	if a.Status != http.StatusOK {
		t.Fatalf("GET /files/%s/: %d %q; want 200 with the set's status", set, a.Status, a.Body)
	}
	return decodeStatus(t, "GET /files/"+set+"/", a)
}

func decodeStatus(t testing.TB, what string, a answer) setStatus {
	t.Helper()
	var st setStatus
	if err := json.Unmarshal(a.Body, &st); err != nil {
		t.Fatalf("%s: %d, body is not the status JSON (%v): %q", what, a.Status, err, a.Body)
	}
	return st
}

// refreshSet is POST /api/v1/sets/<set>/refresh: one synchronous refresh. It returns the status code (200:
// the attempt succeeded, 502: it failed) and the status JSON that comes with it.
func refreshSet(t testing.TB, c *cacheProc, set string) (int, setStatus) {
	t.Helper()
	a := call(t, http.MethodPost, c.URL+"/api/v1/sets/"+set+"/refresh")
	if a.Status != http.StatusOK && a.Status != http.StatusBadGateway {
		t.Fatalf("POST /api/v1/sets/%s/refresh: %d %q; want 200 or 502 with the status JSON", set, a.Status, a.Body)
	}
	return a.Status, decodeStatus(t, "POST /api/v1/sets/"+set+"/refresh", a)
}

// mustRefresh refreshes and requires the outcome (200 or 502) and state.
func mustRefresh(t testing.TB, c *cacheProc, set string, wantCode int, wantState string) setStatus {
	t.Helper()
	code, st := refreshSet(t, c, set)
	if code != wantCode || st.State != wantState {
		t.Fatalf("POST refresh of %s: %d state %q; want %d %q; status %s", set, code, st.State, wantCode, wantState, st)
	}
	return st
}

// waitSetState polls the status of set until it is in state and ok (if given) accepts it.
func waitSetState(t testing.TB, c *cacheProc, set, state string, ok func(setStatus) error) setStatus {
	t.Helper()
	var st setStatus
	waitFor(t, 30*time.Second, "file set "+set+" "+state, func() error {
		st = getSetStatus(t, c, set)
		if st.State != state {
			return fmt.Errorf("state %q (message %q), want %q", st.State, st.Message, state)
		}
		if ok != nil {
			return ok(st)
		}
		return nil
	})
	return st
}

// assertServed GETs /files/<set>/<name> and requires a 200 with exactly want, whose ETag is the content
// digest and which has a Last-Modified.
func assertServed(t testing.TB, c *cacheProc, set, name string, want []byte) answer {
	t.Helper()
	a := call(t, http.MethodGet, fileURL(c, set, name))
	if a.Status != http.StatusOK {
		t.Fatalf("GET /files/%s/%s: %d %q; want 200", set, name, a.Status, truncateBody(a.Body))
	}
	if !bytes.Equal(a.Body, want) {
		t.Fatalf("GET /files/%s/%s: %d bytes (sha256 %s), want the %d bytes with sha256 %s", set, name, len(a.Body), sha256Hex(a.Body), len(want), sha256Hex(want))
	}
	if got, wantTag := a.Header.Get("ETag"), `"sha256:`+sha256Hex(want)+`"`; got != wantTag {
		t.Fatalf("GET /files/%s/%s: ETag %s, want %s", set, name, got, wantTag)
	}
	if _, err := http.ParseTime(a.Header.Get("Last-Modified")); err != nil {
		t.Fatalf("GET /files/%s/%s: Last-Modified %q: %v", set, name, a.Header.Get("Last-Modified"), err)
	}
	if cl := a.Header.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
		t.Fatalf("GET /files/%s/%s: Content-Length %q, want %d", set, name, cl, len(want))
	}
	return a
}

// assertStatusFiles requires the status to list exactly these files with their digests and sizes.
func assertStatusFiles(t testing.TB, st setStatus, want map[string][]byte) {
	t.Helper()
	if len(st.Files) != len(want) {
		t.Fatalf("status of %s lists %d files, want %d: %s", st.Set, len(st.Files), len(want), st)
	}
	for _, f := range st.Files {
		body, ok := want[f.Name]
		if !ok {
			t.Fatalf("status of %s lists unexpected file %q: %s", st.Set, f.Name, st)
		}
		if f.Digest != "sha256:"+sha256Hex(body) || f.Size != int64(len(body)) {
			t.Fatalf("status of %s: file %s has digest %s size %d, want sha256:%s size %d", st.Set, f.Name, f.Digest, f.Size, sha256Hex(body), len(body))
		}
		if !strings.HasSuffix(f.URL, "/files/"+st.Set+"/"+f.Name) {
			t.Fatalf("status of %s: file %s has url %q, want one ending in /files/%s/%s", st.Set, f.Name, f.URL, st.Set, f.Name)
		}
	}
}

// assertPlainMessage requires a status code with a non-empty plain-text body.
func assertPlainMessage(t testing.TB, what string, a answer, status int) {
	t.Helper()
	if a.Status != status || !strings.HasPrefix(a.Header.Get("Content-Type"), "text/plain") || len(bytes.TrimSpace(a.Body)) == 0 {
		t.Fatalf("%s: %d %s %q; want %d with a plain-text message", what, a.Status, a.Header.Get("Content-Type"), a.Body, status)
	}
}

func truncateBody(b []byte) []byte {
	if len(b) > 300 {
		return b[:300]
	}
	return b
}

func mentionsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(strings.ToLower(s), strings.ToLower(w)) {
			return true
		}
	}
	return false
}

// parseStatusTime reads a time from the status JSON: RFC 3339 or an HTTP date.
func parseStatusTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return http.ParseTime(s)
}

// TestFileSetRefresh: one download, then conditional refreshes that transfer nothing while the file is
// unchanged; a new upstream version is published; and readers never see a kernel and an initramfs from two
// different versions.
func TestFileSetRefresh(t *testing.T) {
	fs := startFileServer(t)
	const path = "/ipa/" + tarballName
	a, b := newIPATarball(t), newIPATarball(t)
	lmA := time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)
	lmB := lmA.Add(24 * time.Hour)
	fs.Set(path, a.Tgz, lmA)
	c := startImagecache(t, "files:\n"+ipaSetYAML("ipa", fs.URL+path))

	st := waitSetState(t, c, "ipa", "Ready", func(st setStatus) error {
		if st.Version < 1 {
			return fmt.Errorf("version %d", st.Version)
		}
		return nil
	})
	if n, ok, _, sent := fs.counts(path); n != 1 || ok != 1 || sent != int64(len(a.Tgz)) {
		t.Fatalf("first fetch: file server saw %d requests, %d 200s, %d body bytes; want one 200 of %d bytes: %+v", n, ok, sent, len(a.Tgz), fs.Requests(path))
	}
	assertStatusFiles(t, st, map[string][]byte{kernelFile: a.Kernel, initramfsFile: a.Initramfs})
	k1 := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	assertServed(t, c, "ipa", initramfsFile, a.Initramfs)
	if ct := k1.Header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("kernel Content-Type %q, want application/octet-stream", ct)
	}

	// Unchanged upstream: the refresh is conditional and answered 304, with nothing transferred.
	st2 := mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
	if st2.Version != st.Version {
		t.Errorf("refresh answered 304 changed the version from %d to %d", st.Version, st2.Version)
	}
	reqs := fs.Requests(path)
	if n, ok, nm, sent := fs.counts(path); n != 2 || ok != 1 || nm != 1 || sent != int64(len(a.Tgz)) {
		t.Fatalf("after an unchanged refresh: %d requests, %d 200s, %d 304s, %d body bytes; want 2, 1, 1, %d: %+v", n, ok, nm, sent, len(a.Tgz), reqs)
	}
	if r := reqs[1]; r.IfNoneMatch != `"`+sha256Hex(a.Tgz)+`"` || r.IfModifiedSince != lmA.Format(http.TimeFormat) {
		t.Errorf("refresh sent If-None-Match %q If-Modified-Since %q; want the stored ETag %q and Last-Modified %q",
			r.IfNoneMatch, r.IfModifiedSince, `"`+sha256Hex(a.Tgz)+`"`, lmA.Format(http.TimeFormat))
	}
	k2 := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	if k2.Header.Get("ETag") != k1.Header.Get("ETag") || k2.Header.Get("Last-Modified") != k1.Header.Get("Last-Modified") {
		t.Errorf("a 304 refresh changed the served validators: ETag %s -> %s, Last-Modified %s -> %s",
			k1.Header.Get("ETag"), k2.Header.Get("ETag"), k1.Header.Get("Last-Modified"), k2.Header.Get("Last-Modified"))
	}

	// New upstream content: a new version. Last-Modified has one-second resolution, so let a second pass
	// since the old one before publishing, whatever clock the cache takes it from.
	oldLM, _ := http.ParseTime(k1.Header.Get("Last-Modified"))
	time.Sleep(time.Until(oldLM.Add(time.Second)))
	fs.Set(path, b.Tgz, lmB)
	st3 := mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
	if st3.Version != st.Version+1 {
		t.Errorf("new upstream content: version %d, want %d", st3.Version, st.Version+1)
	}
	assertStatusFiles(t, st3, map[string][]byte{kernelFile: b.Kernel, initramfsFile: b.Initramfs})
	assertServed(t, c, "ipa", kernelFile, b.Kernel)
	assertServed(t, c, "ipa", initramfsFile, b.Initramfs)
	// A client revalidating its copy of the old version must get the new one, by either validator.
	for _, h := range [][2]string{{"If-None-Match", k1.Header.Get("ETag")}, {"If-Modified-Since", k1.Header.Get("Last-Modified")}} {
		if got := call(t, http.MethodGet, fileURL(c, "ipa", kernelFile), h[0], h[1]); got.Status != http.StatusOK || !bytes.Equal(got.Body, b.Kernel) {
			t.Errorf("GET kernel with %s: %s of the old version: %d (%d bytes); want 200 with the new kernel", h[0], h[1], got.Status, len(got.Body))
		}
	}

	checkAtomicPublish(t, c, fs, path, [2]ipaTarball{a, b}, lmB) // ends with a published

	// A release whose kernel is the same bytes: the kernel keeps its validators, the initramfs gets new ones.
	ka := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	ia := assertServed(t, c, "ipa", initramfsFile, a.Initramfs)
	iaLM, _ := http.ParseTime(ia.Header.Get("Last-Modified"))
	time.Sleep(time.Until(iaLM.Add(time.Second)))
	sameKernel := ipaTarballOf(t, a.Kernel, randomBytes(t, 512<<10))
	fs.Set(path, sameKernel.Tgz, lmB.Add(24*time.Hour))
	mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
	k := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	i := assertServed(t, c, "ipa", initramfsFile, sameKernel.Initramfs)
	if k.Header.Get("Last-Modified") != ka.Header.Get("Last-Modified") {
		t.Errorf("kernel Last-Modified changed from %s to %s in a release where its bytes did not change", ka.Header.Get("Last-Modified"), k.Header.Get("Last-Modified"))
	}
	if got := call(t, http.MethodGet, fileURL(c, "ipa", initramfsFile), "If-Modified-Since", ia.Header.Get("Last-Modified")); got.Status != http.StatusOK {
		t.Errorf("initramfs changed but If-Modified-Since its old Last-Modified %s answers %d (Last-Modified now %s)", ia.Header.Get("Last-Modified"), got.Status, i.Header.Get("Last-Modified"))
	}
}

// TestFileSetLastModified: the served Last-Modified moves when the content does, so that clients revalidating
// by date alone (curl -z, wget -N) get new bytes, also from origins whose own Last-Modified does not help:
// one that sends none, and one that stamps every build with the same date (reproducible builds set file
// times to SOURCE_DATE_EPOCH).
func TestFileSetLastModified(t *testing.T) {
	fs := startFileServer(t)
	const path = "/dl/ironic-python-agent.initramfs"
	v1, v2 := randomBytes(t, 256<<10), randomBytes(t, 256<<10)
	fs.SetFile(path, servedFile{Body: v1, ETag: `"` + sha256Hex(v1) + `"`})
	c := startImagecache(t, fmt.Sprintf(`files:
  - set: nolm
    url: %q
    refreshInterval: 1h
`, fs.URL+path))
	waitSetState(t, c, "nolm", "Ready", nil)
	first := assertServed(t, c, "nolm", initramfsFile, v1) // requires a Last-Modified

	// Unchanged: a 304 on the ETag alone; the served Last-Modified stays.
	mustRefresh(t, c, "nolm", http.StatusOK, "Ready")
	if r := fs.Requests(path); r[len(r)-1].IfNoneMatch != `"`+sha256Hex(v1)+`"` || r[len(r)-1].Status != http.StatusNotModified {
		t.Errorf("refresh: want If-None-Match with the stored ETag answered 304, got %+v", r[len(r)-1])
	}
	if again := assertServed(t, c, "nolm", initramfsFile, v1); again.Header.Get("Last-Modified") != first.Header.Get("Last-Modified") {
		t.Errorf("Last-Modified moved from %s to %s with the content unchanged", first.Header.Get("Last-Modified"), again.Header.Get("Last-Modified"))
	}

	lm, _ := http.ParseTime(first.Header.Get("Last-Modified"))
	time.Sleep(time.Until(lm.Add(time.Second))) // Last-Modified has one-second resolution
	fs.SetFile(path, servedFile{Body: v2, ETag: `"` + sha256Hex(v2) + `"`})
	mustRefresh(t, c, "nolm", http.StatusOK, "Ready")
	second := assertServed(t, c, "nolm", initramfsFile, v2)
	if got := call(t, http.MethodGet, fileURL(c, "nolm", initramfsFile), "If-Modified-Since", first.Header.Get("Last-Modified")); got.Status != http.StatusOK || !bytes.Equal(got.Body, v2) {
		t.Errorf("no Last-Modified upstream: content changed but If-Modified-Since the old Last-Modified %s answers %d (Last-Modified now %s)", first.Header.Get("Last-Modified"), got.Status, second.Header.Get("Last-Modified"))
	}

	// Every build carries the same date.
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const fixedPath = "/fixed/" + tarballName
	a, b := newIPATarball(t), newIPATarball(t)
	fs.Set(fixedPath, a.Tgz, epoch)
	c2 := startImagecache(t, "files:\n"+ipaSetYAML("fixed", fs.URL+fixedPath))
	waitSetState(t, c2, "fixed", "Ready", nil)
	ka := assertServed(t, c2, "fixed", kernelFile, a.Kernel)
	lm, _ = http.ParseTime(ka.Header.Get("Last-Modified"))
	time.Sleep(time.Until(lm.Add(time.Second)))
	fs.Set(fixedPath, b.Tgz, epoch)
	mustRefresh(t, c2, "fixed", http.StatusOK, "Ready")
	kb := assertServed(t, c2, "fixed", kernelFile, b.Kernel)
	if got := call(t, http.MethodGet, fileURL(c2, "fixed", kernelFile), "If-Modified-Since", ka.Header.Get("Last-Modified")); got.Status != http.StatusOK || !bytes.Equal(got.Body, b.Kernel) {
		t.Errorf("origin with a fixed Last-Modified %s: the kernel changed but If-Modified-Since its old Last-Modified %s answers %d (Last-Modified now %s)",
			epoch.Format(http.TimeFormat), ka.Header.Get("Last-Modified"), got.Status, kb.Header.Get("Last-Modified"))
	}
}

// readPair is what one reader saw: two files fetched one after the other.
type readPair struct {
	start, end time.Time
	first      string // file fetched first
	v1, v2     int    // version (index into the tarballs) of the first and the second file
}

// refreshWindow is one POST refresh that switched the published version from one tarball to the other.
type refreshWindow struct {
	start, end time.Time
	from, to   int
}

// checkAtomicPublish runs readers that GET the kernel and the initramfs in pairs while the set is switched
// five times between the two tarballs (the second one is published when it starts). With an atomic publish,
// a pair that overlaps no refresh sees one version, and a pair overlapping the switch from X to Y can only be
// (X, Y) in fetch order. Readers alternate which file they fetch first, so a publish that switches the files
// one by one, in either order, produces an impossible (Y, X) pair.
func checkAtomicPublish(t *testing.T, c *cacheProc, fs *fileServer, path string, tarballs [2]ipaTarball, lastLM time.Time) {
	const readers = 6
	content := func(v int, name string) []byte {
		if name == kernelFile {
			return tarballs[v].Kernel
		}
		return tarballs[v].Initramfs
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * readers}}
	defer client.CloseIdleConnections()
	fetch := func(name string) (int, error) {
		resp, err := client.Get(fileURL(c, "ipa", name))
		if err != nil {
			return -1, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return -1, fmt.Errorf("GET %s: reading the body: %w", name, err)
		}
		if resp.StatusCode != http.StatusOK {
			return -1, fmt.Errorf("GET %s: %d %q", name, resp.StatusCode, truncateBody(body))
		}
		for v := range tarballs {
			if bytes.Equal(body, content(v, name)) {
				return v, nil
			}
		}
		return -1, fmt.Errorf("GET %s: %d bytes that are neither version's %s", name, len(body), name)
	}

	var (
		mu      sync.Mutex
		pairs   []readPair
		errs    []error
		done    atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		stopped bool
	)
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	for g := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				first, second := kernelFile, initramfsFile
				if (g+i)%2 == 1 {
					first, second = second, first
				}
				p := readPair{start: time.Now(), first: first}
				v1, err1 := fetch(first)
				v2, err2 := fetch(second)
				p.end, p.v1, p.v2 = time.Now(), v1, v2
				mu.Lock()
				if err1 != nil || err2 != nil {
					errs = append(errs, fmt.Errorf("%v / %v", err1, err2))
				} else {
					pairs = append(pairs, p)
				}
				mu.Unlock()
				done.Add(1)
			}
		}()
	}

	published := 1 // tarballs[1] is what the cache serves now
	var windows []refreshWindow
	waitReads := func(what string) {
		n := done.Load()
		waitFor(t, 30*time.Second, "readers to finish pairs "+what, func() error {
			if got := done.Load() - n; got < 3*readers {
				return fmt.Errorf("%d pairs so far", got)
			}
			return nil
		})
	}
	waitReads("before the first refresh")
	version := getSetStatus(t, c, "ipa").Version
	for r := range 5 {
		next := 1 - published
		fs.Set(path, tarballs[next].Tgz, lastLM.Add(time.Duration(r+1)*time.Hour))
		w := refreshWindow{start: time.Now(), from: published, to: next}
		st := mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
		w.end = time.Now()
		windows = append(windows, w)
		version++
		if st.Version != version {
			t.Errorf("refresh %d: version %d, want %d", r+1, st.Version, version)
			version = st.Version
		}
		published = next
		waitReads(fmt.Sprintf("after refresh %d", r+1))
	}
	halt()

	for i, err := range errs {
		if i == 5 {
			t.Errorf("... and %d more reader errors", len(errs)-5)
			break
		}
		t.Errorf("reader: %v", err)
	}
	var mixed, during int
	var bad []string
	for _, p := range pairs {
		var over []refreshWindow
		for _, w := range windows {
			if p.start.Before(w.end) && p.end.After(w.start) {
				over = append(over, w)
			}
		}
		if len(over) > 0 {
			during++
		}
		if p.v1 != p.v2 {
			mixed++
		}
		// What this pair may legally have seen, given the refreshes it overlapped.
		switch len(over) {
		case 0:
			want := 1 // before the first refresh
			for _, w := range windows {
				if !p.start.Before(w.end) {
					want = w.to
				}
			}
			if p.v1 != want || p.v2 != want {
				bad = append(bad, fmt.Sprintf("%s first: got versions %d,%d between refreshes, when only %d was published", p.first, p.v1, p.v2, want))
			}
		case 1:
			w := over[0]
			if p.v1 == w.to && p.v2 == w.from {
				bad = append(bad, fmt.Sprintf("%s first: got versions %d then %d during the switch from %d to %d: the files did not switch together", p.first, p.v1, p.v2, w.from, w.to))
			}
		}
	}
	t.Logf("atomic publish: %d pairs read, %d overlapping one of %d refreshes, %d of them legitimately straddling a switch", len(pairs), during, len(windows), mixed)
	if len(bad) > 0 {
		t.Errorf("%d of %d pairs saw a mix of versions that an atomic publish cannot produce, e.g.:\n%s", len(bad), len(pairs), strings.Join(bad[:min(len(bad), 5)], "\n"))
	}
	if len(pairs) < 10*readers {
		t.Errorf("only %d pairs were read: the check proves little", len(pairs))
	}
}

// TestMinimumModificationTime: a cached copy older than minimumModificationTime is fetched unconditionally, so
// an upstream that re-published the same bytes (same ETag) under a newer date is not answered with a 304; and
// a copy that is still too old after that says so in the status.
func TestMinimumModificationTime(t *testing.T) {
	fs := startFileServer(t)
	const fresh, old = "/fresh/" + tarballName, "/old/" + tarballName
	a, o := newIPATarball(t), newIPATarball(t)
	lm2025 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lmJune := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	fs.Set(fresh, a.Tgz, lm2025)
	fs.Set(old, o.Tgz, lm2025)
	c := startImagecache(t, "files:\n"+ipaSetYAML("fresh", fs.URL+fresh)+ipaSetYAML("old", fs.URL+old))
	for _, set := range []string{"fresh", "old"} {
		st := waitSetState(t, c, set, "Ready", nil)
		if lm, err := parseStatusTime(st.UpstreamLastModified); err != nil || !lm.Equal(lm2025) {
			t.Errorf("%s: upstreamLastModified %q (%v), want %s", set, st.UpstreamLastModified, err, lm2025)
		}
		if st.OlderThanMinimum {
			t.Errorf("%s: olderThanMinimum with no minimumModificationTime configured: %s", set, st)
		}
	}
	// Without a minimum, refreshes are conditional (this is what the minimum must switch off).
	mustRefresh(t, c, "fresh", http.StatusOK, "Ready")
	if r := fs.Requests(fresh); len(r) != 2 || r[1].IfNoneMatch == "" || r[1].IfModifiedSince == "" || r[1].Status != http.StatusNotModified {
		t.Fatalf("refresh without a minimum: want a conditional request answered 304, got %+v", r)
	}

	// The upstream re-publishes the same bytes (same ETag) with a newer date; the cache restarts with a minimum.
	kBefore := assertServed(t, c, "fresh", kernelFile, a.Kernel)
	fs.Set(fresh, a.Tgz, lmJune)
	c.Stop(t)
	cfg, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	withMin := strings.ReplaceAll(string(cfg), "    refreshInterval: 1h\n", "    refreshInterval: 1h\n    minimumModificationTime: \"2026-01-01T00:00:00Z\"\n")
	if err := os.WriteFile(c.ConfigPath, []byte(withMin), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Start(t)

	// The startup fetch of each set is unconditional and downloads.
	for _, p := range []struct {
		path string
		n    int // requests before the restart
		size int
	}{{fresh, 2, len(a.Tgz)}, {old, 1, len(o.Tgz)}} {
		waitFor(t, 30*time.Second, "startup fetch of "+p.path, func() error {
			if got := len(fs.Requests(p.path)); got <= p.n {
				return fmt.Errorf("%d requests", got)
			}
			return nil
		})
		r := fs.Requests(p.path)[p.n]
		if r.IfNoneMatch != "" || r.IfModifiedSince != "" || r.Status != http.StatusOK || r.BodyBytes != int64(p.size) {
			t.Errorf("%s: startup fetch with a cached copy older than the minimum sent If-None-Match %q If-Modified-Since %q and got %d with %d bytes; want an unconditional 200 of %d bytes",
				p.path, r.IfNoneMatch, r.IfModifiedSince, r.Status, r.BodyBytes, p.size)
		}
	}
	st := waitSetState(t, c, "fresh", "Ready", func(st setStatus) error {
		if lm, err := parseStatusTime(st.UpstreamLastModified); err != nil || !lm.Equal(lmJune) {
			return fmt.Errorf("upstreamLastModified %q (%v), want %s", st.UpstreamLastModified, err, lmJune)
		}
		return nil
	})
	if st.OlderThanMinimum {
		t.Errorf("fresh: olderThanMinimum after downloading a copy from %s (minimum 2026-01-01): %s", lmJune, st)
	}
	if k := assertServed(t, c, "fresh", kernelFile, a.Kernel); k.Header.Get("Last-Modified") != kBefore.Header.Get("Last-Modified") {
		t.Errorf("fresh: the kernel's Last-Modified changed from %s to %s though its bytes did not (only the origin's date did)",
			kBefore.Header.Get("Last-Modified"), k.Header.Get("Last-Modified"))
	}
	// Now the copy is new enough: refreshes are conditional again.
	mustRefresh(t, c, "fresh", http.StatusOK, "Ready")
	if r := fs.Requests(fresh); r[len(r)-1].IfNoneMatch == "" || r[len(r)-1].Status != http.StatusNotModified {
		t.Errorf("fresh: refresh with a copy newer than the minimum: want a conditional request answered 304, got %+v", r[len(r)-1])
	}

	// The other upstream still has only a 2025 copy: served, but flagged, and every refresh downloads again.
	st = waitSetState(t, c, "old", "Ready", func(st setStatus) error {
		if !st.OlderThanMinimum {
			return fmt.Errorf("olderThanMinimum false with upstreamLastModified %q and minimum 2026-01-01", st.UpstreamLastModified)
		}
		return nil
	})
	assertServed(t, c, "old", kernelFile, o.Kernel)
	st2 := mustRefresh(t, c, "old", http.StatusOK, "Ready")
	if !st2.OlderThanMinimum {
		t.Errorf("old: olderThanMinimum false after a refresh that found the same 2025 copy: %s", st2)
	}
	if r := fs.Requests(old); r[len(r)-1].IfNoneMatch != "" || r[len(r)-1].IfModifiedSince != "" {
		t.Errorf("old: refresh of a copy still older than the minimum was conditional: %+v", r[len(r)-1])
	}
}

// TestChecksum: a download that does not match its sha256 (configured, or from a sha256sum file) is never
// published; the previous version stays.
func TestChecksum(t *testing.T) {
	fs := startFileServer(t)
	a, b, c3 := newIPATarball(t), newIPATarball(t), newIPATarball(t)
	lm := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	const pinned, summed, wrong = "/pinned/" + tarballName, "/sum/" + tarballName, "/wrong/" + tarballName
	const sumFile = "/sum/SHA256SUMS"
	fs.Set(pinned, a.Tgz, lm)
	fs.Set(summed, a.Tgz, lm)
	fs.Set(wrong, a.Tgz, lm)
	// A real sha256sum file lists several files; only the line for the download counts.
	sums := func(tgz []byte) []byte {
		return []byte(sha256sumLine([]byte("other"), "ipa-centos8-master.tar.gz") + sha256sumLine(tgz, tarballName))
	}
	fs.Set(sumFile, sums(a.Tgz), lm)
	c := startImagecache(t, "files:\n"+
		ipaSetYAML("pinned", fs.URL+pinned, "    sha256: "+sha256Hex(a.Tgz))+
		ipaSetYAML("summed", fs.URL+summed, fmt.Sprintf("    checksumURL: %q", fs.URL+sumFile))+
		ipaSetYAML("wrong", fs.URL+wrong, "    sha256: "+sha256Hex(b.Tgz)))

	st := waitSetState(t, c, "pinned", "Ready", nil)
	assertServed(t, c, "pinned", kernelFile, a.Kernel)
	waitSetState(t, c, "summed", "Ready", nil)
	assertServed(t, c, "summed", initramfsFile, a.Initramfs)

	// The pinned file changes upstream: the checksum no longer matches.
	fs.Set(pinned, b.Tgz, lm.Add(time.Hour))
	st2 := mustRefresh(t, c, "pinned", http.StatusBadGateway, "Stale")
	if !mentionsAny(st2.Message, []string{"checksum", "sha256"}) {
		t.Errorf("pinned: failed refresh message %q does not mention the checksum", st2.Message)
	}
	if st2.Version != st.Version {
		t.Errorf("pinned: version %d after a checksum mismatch, want %d", st2.Version, st.Version)
	}
	assertServed(t, c, "pinned", kernelFile, a.Kernel)
	assertServed(t, c, "pinned", initramfsFile, a.Initramfs)

	// checksumURL: a new version with a matching sha256sum file is published...
	fs.Set(summed, b.Tgz, lm.Add(time.Hour))
	fs.Set(sumFile, sums(b.Tgz), lm.Add(time.Hour))
	st3 := mustRefresh(t, c, "summed", http.StatusOK, "Ready")
	assertStatusFiles(t, st3, map[string][]byte{kernelFile: b.Kernel, initramfsFile: b.Initramfs})
	assertServed(t, c, "summed", kernelFile, b.Kernel)
	// ...and one whose sha256sum file was not updated is not.
	fs.Set(summed, c3.Tgz, lm.Add(2*time.Hour))
	st4 := mustRefresh(t, c, "summed", http.StatusBadGateway, "Stale")
	if !mentionsAny(st4.Message, []string{"checksum", "sha256"}) {
		t.Errorf("summed: failed refresh message %q does not mention the checksum", st4.Message)
	}
	if st4.Version != st3.Version {
		t.Errorf("summed: version %d after a checksum mismatch, want %d", st4.Version, st3.Version)
	}
	assertServed(t, c, "summed", kernelFile, b.Kernel)
	assertServed(t, c, "summed", initramfsFile, b.Initramfs)

	// A set whose first download never matched has nothing to serve.
	st5 := waitSetState(t, c, "wrong", "Failed", nil)
	if !mentionsAny(st5.Message, []string{"checksum", "sha256"}) {
		t.Errorf("wrong: Failed with message %q, which does not mention the checksum", st5.Message)
	}
	got := call(t, http.MethodGet, fileURL(c, "wrong", kernelFile))
	assertPlainMessage(t, "GET a file of a set that never verified", got, http.StatusServiceUnavailable)
}

// TestFileSetOffline: with the origin gone the published files keep being served, across a restart, with the
// same validators; a set that never got anything answers 503 and retries with backoff, not in a hot loop.
func TestFileSetOffline(t *testing.T) {
	fs := startFileServer(t)
	dead := startFileServer(t)
	dead.FailWith(http.StatusServiceUnavailable)
	a := newIPATarball(t)
	fs.Set("/"+tarballName, a.Tgz, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	c := startImagecache(t, "files:\n"+ipaSetYAML("ipa", fs.URL+"/"+tarballName)+ipaSetYAML("never", dead.URL+"/"+tarballName))

	// The set that never got an answer: 503 with Retry-After, status Failed.
	st := waitSetState(t, c, "never", "Failed", func(st setStatus) error {
		if st.Message == "" {
			return fmt.Errorf("no message")
		}
		return nil
	})
	if st.Version != 0 || len(st.Files) != 0 {
		t.Errorf("never: Failed but with version %d and files %v", st.Version, st.Files)
	}
	got := call(t, http.MethodGet, fileURL(c, "never", kernelFile))
	assertPlainMessage(t, "GET a file of a set never published", got, http.StatusServiceUnavailable)
	if ra := got.Header.Get("Retry-After"); ra == "" {
		t.Errorf("503 for a set never published has no Retry-After")
	} else if _, err := strconv.Atoi(ra); err != nil {
		if _, err := http.ParseTime(ra); err != nil {
			t.Errorf("Retry-After %q is neither seconds nor an HTTP date", ra)
		}
	}
	// Retries back off (1 s, 2 s, 4 s, ...): over the 3 s after the first attempt, a handful at most.
	first := dead.Requests("")[0].At
	time.Sleep(time.Until(first.Add(3 * time.Second))) // an observation window, not a wait for an event
	var attempts int
	for _, r := range dead.Requests("") {
		if !r.At.After(first.Add(3 * time.Second)) {
			attempts++
		}
	}
	if attempts > 4 || attempts < 2 {
		t.Errorf("the failing set made %d attempts in the 3 s after its first; want 2 to 4 (retries with exponential backoff from 1 s)", attempts)
	}
	// When the origin recovers, a retry (no refresh asked for) publishes the set.
	dead.FailWith(0)
	b := newIPATarball(t)
	dead.Set("/"+tarballName, b.Tgz, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	waitSetState(t, c, "never", "Ready", nil)
	assertServed(t, c, "never", kernelFile, b.Kernel)

	// The published set: its origin goes away and the cache restarts.
	waitSetState(t, c, "ipa", "Ready", nil)
	k := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	i := assertServed(t, c, "ipa", initramfsFile, a.Initramfs)
	fs.Stop()
	c.Restart(t)
	waitSetState(t, c, "ipa", "Stale", func(st setStatus) error {
		if st.Message == "" {
			return fmt.Errorf("no message")
		}
		return nil
	})
	for _, f := range []struct {
		name   string
		want   []byte
		before answer
	}{{kernelFile, a.Kernel, k}, {initramfsFile, a.Initramfs, i}} {
		after := assertServed(t, c, "ipa", f.name, f.want)
		for _, h := range []string{"ETag", "Last-Modified"} {
			if after.Header.Get(h) != f.before.Header.Get(h) {
				t.Errorf("%s after a restart with the origin down: %s %q, was %q", f.name, h, after.Header.Get(h), f.before.Header.Get(h))
			}
		}
	}
	st = mustRefresh(t, c, "ipa", http.StatusBadGateway, "Stale")
	if st.Message == "" || st.Version < 1 {
		t.Errorf("refresh with the origin down: status %s; want Stale with a message and the published version", st)
	}
	assertServed(t, c, "ipa", kernelFile, a.Kernel)

	// The origin comes back on the same address: the next refresh succeeds (with a 304: nothing changed).
	fs.Start(t)
	n := len(fs.Requests(""))
	mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
	if r := fs.Requests(""); len(r) <= n || r[len(r)-1].Status != http.StatusNotModified {
		t.Errorf("refresh after the origin came back: want a 304 from it, got %+v", r[n:])
	}
}

// TestFileServing: /files/<set>/<file> answers like a static file server (RFC 9110): ranges, HEAD,
// conditional requests; unknown names are 404s with a message; a download without extract rules is served
// under the last segment of its URL path; the status documents carry every field.
func TestFileServing(t *testing.T) {
	fs := startFileServer(t)
	a := newIPATarball(t)
	fs.Set("/"+tarballName, a.Tgz, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	fs.Set("/dl/"+tarballName, a.Tgz, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	c := startImagecache(t, "files:\n"+ipaSetYAML("ipa", fs.URL+"/"+tarballName)+fmt.Sprintf(`  - set: raw
    url: %q
    refreshInterval: 1h
`, fs.URL+"/dl/"+tarballName+"?signature=abc123"))
	waitSetState(t, c, "ipa", "Ready", nil)
	st := waitSetState(t, c, "raw", "Ready", nil)
	assertStatusFiles(t, st, map[string][]byte{tarballName: a.Tgz})
	assertServed(t, c, "raw", tarballName, a.Tgz)

	kernelURL := fileURL(c, "ipa", kernelFile)
	full := assertServed(t, c, "ipa", kernelFile, a.Kernel)
	etag, lm := full.Header.Get("ETag"), full.Header.Get("Last-Modified")
	size := len(a.Kernel)
	if full.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("Accept-Ranges %q, want bytes", full.Header.Get("Accept-Ranges"))
	}

	check := func(what string, got answer, status int, body []byte, headers ...string) {
		t.Helper()
		if got.Status != status {
			t.Errorf("%s: %d, want %d", what, got.Status, status)
			return
		}
		if body != nil && !bytes.Equal(got.Body, body) {
			t.Errorf("%s: %d bytes, want %d", what, len(got.Body), len(body))
		}
		for i := 0; i+1 < len(headers); i += 2 {
			if v := got.Header.Get(headers[i]); v != headers[i+1] {
				t.Errorf("%s: %s %q, want %q", what, headers[i], v, headers[i+1])
			}
		}
	}
	// Range (RFC 9110 §14): one satisfiable range is a 206 of exactly those bytes.
	check("Range bytes=10-19", call(t, http.MethodGet, kernelURL, "Range", "bytes=10-19"), http.StatusPartialContent, a.Kernel[10:20],
		"Content-Range", fmt.Sprintf("bytes 10-19/%d", size), "Content-Length", "10")
	check("Range bytes=-5", call(t, http.MethodGet, kernelURL, "Range", "bytes=-5"), http.StatusPartialContent, a.Kernel[size-5:],
		"Content-Range", fmt.Sprintf("bytes %d-%d/%d", size-5, size-1, size))
	check("unsatisfiable Range", call(t, http.MethodGet, kernelURL, "Range", fmt.Sprintf("bytes=%d-", size)), http.StatusRequestedRangeNotSatisfiable, nil,
		"Content-Range", fmt.Sprintf("bytes */%d", size))
	// If-Range (§13.1.5): the range only while the representation is the one the client has.
	check("If-Range with the ETag", call(t, http.MethodGet, kernelURL, "Range", "bytes=10-19", "If-Range", etag), http.StatusPartialContent, a.Kernel[10:20])
	check("If-Range with another ETag", call(t, http.MethodGet, kernelURL, "Range", "bytes=10-19", "If-Range", `"sha256:0000"`), http.StatusOK, a.Kernel)
	// HEAD (§9.3.2): the GET's headers, no body.
	check("HEAD", call(t, http.MethodHead, kernelURL), http.StatusOK, []byte{},
		"Content-Length", strconv.Itoa(size), "ETag", etag, "Last-Modified", lm, "Content-Type", "application/octet-stream")
	// If-None-Match (§13.1.2): weak comparison; a 304 carries the ETag and no body.
	check("If-None-Match: the ETag", call(t, http.MethodGet, kernelURL, "If-None-Match", etag), http.StatusNotModified, []byte{}, "ETag", etag)
	check("If-None-Match: W/ the ETag", call(t, http.MethodGet, kernelURL, "If-None-Match", "W/"+etag), http.StatusNotModified, []byte{})
	check("If-None-Match: a list with the ETag", call(t, http.MethodGet, kernelURL, "If-None-Match", `"sha256:0000", `+etag), http.StatusNotModified, []byte{})
	check("If-None-Match: *", call(t, http.MethodGet, kernelURL, "If-None-Match", "*"), http.StatusNotModified, []byte{})
	check("If-None-Match: another ETag", call(t, http.MethodGet, kernelURL, "If-None-Match", `"sha256:0000"`), http.StatusOK, a.Kernel)
	check("HEAD If-None-Match: the ETag", call(t, http.MethodHead, kernelURL, "If-None-Match", etag), http.StatusNotModified, []byte{})
	// If-Modified-Since (§13.1.3): 304 unless modified after the date; ignored when If-None-Match is present.
	lmTime, _ := http.ParseTime(lm)
	check("If-Modified-Since: Last-Modified", call(t, http.MethodGet, kernelURL, "If-Modified-Since", lm), http.StatusNotModified, []byte{}, "ETag", etag)
	check("If-Modified-Since: an hour before", call(t, http.MethodGet, kernelURL, "If-Modified-Since", lmTime.Add(-time.Hour).Format(http.TimeFormat)), http.StatusOK, a.Kernel)
	check("If-None-Match another ETag + If-Modified-Since: Last-Modified", call(t, http.MethodGet, kernelURL, "If-None-Match", `"sha256:0000"`, "If-Modified-Since", lm), http.StatusOK, a.Kernel)

	// Unknown names.
	assertPlainMessage(t, "GET an unknown file", call(t, http.MethodGet, fileURL(c, "ipa", "ironic-python-agent.iso")), http.StatusNotFound)
	assertPlainMessage(t, "GET a file of an unknown set", call(t, http.MethodGet, fileURL(c, "nosuchset", kernelFile)), http.StatusNotFound)
	if got := call(t, http.MethodGet, c.URL+"/files/nosuchset/"); got.Status != http.StatusNotFound {
		t.Errorf("GET /files/nosuchset/: %d, want 404", got.Status)
	}

	// The status documents.
	raw := call(t, http.MethodGet, c.URL+"/files/ipa/")
	var fields map[string]any
	if err := json.Unmarshal(raw.Body, &fields); err != nil {
		t.Fatalf("GET /files/ipa/: %v: %q", err, raw.Body)
	}
	for _, k := range []string{"set", "source", "state", "message", "version", "publishedAt", "checkedAt", "nextCheck", "upstreamETag", "upstreamLastModified", "olderThanMinimum", "files"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("GET /files/ipa/ has no %q: %s", k, raw.Body)
		}
	}
	ipa := getSetStatus(t, c, "ipa")
	if ipa.Set != "ipa" || ipa.Version != 1 || strings.TrimPrefix(strings.Trim(ipa.UpstreamETag, `"`), "W/") != sha256Hex(a.Tgz) {
		t.Errorf("GET /files/ipa/: %s; want set ipa, version 1, upstreamETag the origin's", ipa)
	}
	if next, err := parseStatusTime(ipa.NextCheck); err != nil || next.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("nextCheck %q (%v): want about an hour from now (refreshInterval: 1h)", ipa.NextCheck, err)
	}
	assertStatusFiles(t, ipa, map[string][]byte{kernelFile: a.Kernel, initramfsFile: a.Initramfs})
	base, _ := url.Parse(c.URL + "/")
	for _, f := range ipa.Files {
		u, err := url.Parse(f.URL)
		if err != nil {
			t.Fatalf("status file url %q: %v", f.URL, err)
		}
		if served := call(t, http.MethodHead, base.ResolveReference(u).String()); served.Status != http.StatusOK || served.Header.Get("ETag") != `"`+f.Digest+`"` {
			t.Errorf("status file url %s: HEAD %d ETag %s, want 200 %q", f.URL, served.Status, served.Header.Get("ETag"), `"`+f.Digest+`"`)
		}
	}
	all := call(t, http.MethodGet, c.URL+"/files/")
	var list struct {
		Sets []setStatus `json:"sets"`
	}
	if err := json.Unmarshal(all.Body, &list); err != nil || all.Status != http.StatusOK {
		t.Fatalf("GET /files/: %d %v: %q", all.Status, err, all.Body)
	}
	var names []string
	for _, s := range list.Sets {
		names = append(names, s.Set)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "ipa,raw" {
		t.Errorf("GET /files/ lists sets %v, want [ipa raw]", names)
	}
}

// TestBadTarballs: hostile, broken and mismatched downloads are refused with a message that names the
// problem, and the published version stays untouched.
func TestBadTarballs(t *testing.T) {
	fs := startFileServer(t)
	const path = "/" + tarballName
	a := newIPATarball(t)
	lm := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	fs.Set(path, a.Tgz, lm)
	c := startImagecache(t, "files:\n"+ipaSetYAML("ipa", fs.URL+path))
	st := waitSetState(t, c, "ipa", "Ready", nil)
	k := assertServed(t, c, "ipa", kernelFile, a.Kernel)

	truncated := newIPATarball(t)
	cases := badIPATarballs(t)
	cases = append(cases, badTarball{Name: "truncated download", Tgz: truncated.Tgz,
		Mention: []string{"truncat", "EOF", "short", "incomplete", "Content-Length", "corrupt", "unexpected end"}})
	for i, bad := range cases {
		t.Run(strings.ReplaceAll(bad.Name, " ", "_"), func(t *testing.T) {
			sf := servedFile{Body: bad.Tgz, ETag: `"` + sha256Hex(bad.Tgz) + `"`, LastModified: lm.Add(time.Duration(i+1) * time.Hour)}
			if bad.Name == "truncated download" {
				sf.Truncate = len(bad.Tgz) / 2
			}
			fs.SetFile(path, sf)
			st2 := mustRefresh(t, c, "ipa", http.StatusBadGateway, "Stale")
			if !mentionsAny(st2.Message, bad.Mention) {
				t.Errorf("message %q names none of %q", st2.Message, bad.Mention)
			}
			if st2.Version != st.Version {
				t.Errorf("version %d after a refused download, want %d", st2.Version, st.Version)
			}
			assertStatusFiles(t, st2, map[string][]byte{kernelFile: a.Kernel, initramfsFile: a.Initramfs})
			k2 := assertServed(t, c, "ipa", kernelFile, a.Kernel)
			assertServed(t, c, "ipa", initramfsFile, a.Initramfs)
			if k2.Header.Get("Last-Modified") != k.Header.Get("Last-Modified") {
				t.Errorf("Last-Modified changed from %s to %s by a refused download", k.Header.Get("Last-Modified"), k2.Header.Get("Last-Modified"))
			}
			if r := fs.Requests(path); bad.Name == "truncated download" && !r[len(r)-1].Truncated {
				t.Errorf("the file server did not serve the truncated body: %+v", r[len(r)-1])
			}
		})
	}
	// A good tarball afterwards is published as usual.
	b := newIPATarball(t)
	fs.Set(path, b.Tgz, lm.Add(24*time.Hour))
	st3 := mustRefresh(t, c, "ipa", http.StatusOK, "Ready")
	if st3.Version != st.Version+1 || st3.Message != "" {
		t.Errorf("good tarball after bad ones: version %d message %q, want version %d and no message", st3.Version, st3.Message, st.Version+1)
	}
	assertServed(t, c, "ipa", kernelFile, b.Kernel)
	assertServed(t, c, "ipa", initramfsFile, b.Initramfs)
}
