package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const fetchTarballPath = "/ipa-centos9-master.tar.gz"

// fetchRun is one `imagecache fetch` process, as an init container would run it.
type fetchRun struct{ cliRun }

// runFetch runs `imagecache fetch` with SHARED_DIR=sharedDir, the extra env (KEY=VALUE) and args, and no
// proxy or IPA settings from the test's own environment.
func runFetch(t *testing.T, sharedDir string, env []string, args ...string) fetchRun {
	t.Helper()
	// The test's own IPA_* (or FILENAME) would change what is downloaded.
	base := cleanEnvWithout("IPA_", "FILENAME=", "SHARED_DIR=")
	start := time.Now()
	r := runImagecache(t, "", append(append(base, "SHARED_DIR="+sharedDir), env...), append([]string{"fetch"}, args...)...)
	t.Logf("imagecache fetch %s (env %q): exit %d in %v", strings.Join(args, " "), env, r.code, time.Since(start).Round(time.Millisecond))
	return fetchRun{r}
}

func (r fetchRun) wantExit(t *testing.T, code int, what string) {
	t.Helper()
	if (code == 0) != (r.code == 0) {
		t.Fatalf("%s: exit %d, want %s; stderr:\n%s", what, r.code, map[bool]string{true: "0", false: "non-zero"}[code == 0], r.stderr)
	}
}

// lastLine is the line the user reads first when the command fails: main prints the error last.
func (r fetchRun) lastLine() string {
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	return lines[len(lines)-1]
}

func fetchImagesDir(sharedDir string) string { return filepath.Join(sharedDir, "html", "images") }

// assertFetched checks the metal3 layout: the kernel and initramfs under their fixed names, byte-exact.
func assertFetched(t *testing.T, sharedDir, dest string, ipa ipaTarball) {
	t.Helper()
	for ext, want := range map[string][]byte{".kernel": ipa.Kernel, ".initramfs": ipa.Initramfs} {
		p := filepath.Join(fetchImagesDir(sharedDir), dest+ext)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes with sha256 %s, want %d bytes with sha256 %s", p, len(got), sha256Hex(got), len(want), sha256Hex(want))
		}
	}
}

// assertNoFetchTemps checks that nothing but the published files and the state file is left behind.
func assertNoFetchTemps(t *testing.T, sharedDir string) {
	t.Helper()
	ents, _ := os.ReadDir(fetchImagesDir(sharedDir))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
}

func fetchServeIPA(t *testing.T, path string) (*fileServer, ipaTarball) {
	t.Helper()
	srv := startFileServer(t)
	ipa := newIPATarball(t)
	srv.Set(path, ipa.Tgz, time.Now().Add(-time.Hour).Truncate(time.Second))
	return srv, ipa
}

func TestFetchConditionalRefresh(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	shared := t.TempDir()
	env := []string{"IPA_BASEURI=" + srv.URL}

	runFetch(t, shared, env).wantExit(t, 0, "first run")
	assertFetched(t, shared, "ironic-python-agent", ipa)
	assertNoFetchTemps(t, shared)
	state := readFetchState(t, shared, ".ironic-python-agent.imagecache.json")
	if len(state.Sources) != 1 || state.Sources[0].ETag != `"`+sha256Hex(ipa.Tgz)+`"` || state.Sources[0].Digest != "sha256:"+sha256Hex(ipa.Tgz) {
		t.Errorf("state after the first run: %+v, want the tarball's ETag and digest", state)
	}

	second := runFetch(t, shared, env)
	second.wantExit(t, 0, "second run, unchanged tarball")
	reqs := srv.Requests(fetchTarballPath)
	if len(reqs) != 2 {
		t.Fatalf("the server saw %d requests, want 2: %+v", len(reqs), reqs)
	}
	r := reqs[1]
	if r.IfNoneMatch != `"`+sha256Hex(ipa.Tgz)+`"` || r.IfModifiedSince == "" || r.Status != http.StatusNotModified || r.BodyBytes != 0 {
		t.Errorf("second request %+v, want If-None-Match with the ETag, If-Modified-Since, 304 and no body", r)
	}
	if !strings.Contains(second.stderr, `"result":"not modified"`) {
		t.Errorf("the second run's summary does not say not modified:\n%s", second.stderr)
	}
	assertFetched(t, shared, "ironic-python-agent", ipa)

	next := newIPATarball(t)
	srv.Set(fetchTarballPath, next.Tgz, time.Now().Truncate(time.Second))
	third := runFetch(t, shared, env)
	third.wantExit(t, 0, "third run, new tarball")
	assertFetched(t, shared, "ironic-python-agent", next)
	assertNoFetchTemps(t, shared)
	if reqs := srv.Requests(fetchTarballPath); reqs[2].Status != http.StatusOK || reqs[2].BodyBytes != int64(len(next.Tgz)) {
		t.Errorf("third request %+v, want a 200 with the whole new tarball", reqs[2])
	}
	if !strings.Contains(third.stderr, `"result":"downloaded"`) || !strings.Contains(third.stderr, "sha256:"+sha256Hex(next.Kernel)) {
		t.Errorf("the third run's summary does not name the new kernel's digest:\n%s", third.stderr)
	}
}

func readFetchState(t *testing.T, sharedDir, name string) (st struct {
	Sources []struct{ URL, ETag, LastModified, Digest string }
	Files   []struct {
		Name, Digest string
		Size         int64
	}
}) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fetchImagesDir(sharedDir), name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
	return st
}

func TestFetchBranchWithSlash(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, "/ipa-centos9-stable-2025.1.tar.gz")
	shared := t.TempDir()
	runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL, "IPA_BRANCH=stable/2025.1"}).wantExit(t, 0, "IPA_BRANCH=stable/2025.1")
	assertFetched(t, shared, "ironic-python-agent", ipa)

	// A flag overrides the environment, and FILENAME (the old name) is read when IPA_FILENAME is not set.
	srv.Set("/custom.tar.gz", ipa.Tgz, time.Now())
	runFetch(t, t.TempDir(), []string{"IPA_BASEURI=http://127.0.0.1:1", "FILENAME=custom.tar.gz"}, "--base-uri", srv.URL).wantExit(t, 0, "FILENAME and --base-uri")
	if n := len(srv.Requests("/custom.tar.gz")); n != 1 {
		t.Errorf("FILENAME=custom.tar.gz: %d requests for it, want 1; all: %+v", n, srv.Requests(""))
	}
}

func TestFetchArch(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	shared := t.TempDir()
	runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL, "IPA_ARCH=aarch64"}).wantExit(t, 0, "IPA_ARCH=aarch64")
	assertFetched(t, shared, "ironic-python-agent_aarch64", ipa)
	if _, err := os.Stat(filepath.Join(fetchImagesDir(shared), "ironic-python-agent.kernel")); err == nil {
		t.Error("IPA_ARCH=aarch64 also wrote ironic-python-agent.kernel")
	}
	readFetchState(t, shared, ".ironic-python-agent_aarch64.imagecache.json")
}

func TestFetchUpstreamDownKeepsCopy(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	shared := t.TempDir()
	env := []string{"IPA_BASEURI=" + srv.URL}
	runFetch(t, shared, env).wantExit(t, 0, "first run")
	srv.Stop()
	r := runFetch(t, shared, env)
	r.wantExit(t, 0, "upstream stopped, earlier copy present")
	if !strings.Contains(r.stderr, "upstream unreachable, keeping the existing copy from ") || !strings.Contains(r.stderr, `"level":"WARN"`) {
		t.Errorf("no warning about keeping the existing copy:\n%s", r.stderr)
	}
	assertFetched(t, shared, "ironic-python-agent", ipa)
}

func TestFetchUpstreamDownNoCopy(t *testing.T) {
	t.Parallel()
	srv := startFileServer(t)
	srv.Stop()
	shared := t.TempDir()
	r := runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL}, "--timeout", "5s")
	r.wantExit(t, 1, "upstream stopped, no copy")
	line := r.lastLine()
	for _, want := range []string{srv.URL + fetchTarballPath, "no earlier copy", "reachable", "HTTP_PROXY"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error line does not mention %q:\n%s", want, line)
		}
	}
	if _, err := os.Stat(filepath.Join(fetchImagesDir(shared), "ironic-python-agent.kernel")); err == nil {
		t.Error("a kernel was published")
	}
}

func TestFetchNotFound(t *testing.T) {
	t.Parallel()
	srv, _ := fetchServeIPA(t, fetchTarballPath)
	shared := t.TempDir()
	runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL}).wantExit(t, 0, "first run")
	// A 404 is a wrong branch or flavor, not an outage: keeping the old copy silently would hide the mistake.
	r := runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL, "IPA_FLAVOR=nosuch"})
	r.wantExit(t, 1, "404")
	if line := r.lastLine(); !strings.Contains(line, "404") || !strings.Contains(line, "IPA_FLAVOR") || !strings.Contains(line, "left as they were") {
		t.Errorf("the error line does not say 404, what to check and that the files were kept:\n%s", line)
	}
}

func TestFetchChecksumMismatch(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	shared := t.TempDir()
	env := []string{"IPA_BASEURI=" + srv.URL}
	runFetch(t, shared, env, "--sha256", sha256Hex(ipa.Tgz)).wantExit(t, 0, "right --sha256")
	assertFetched(t, shared, "ironic-python-agent", ipa)

	srv.Set(fetchTarballPath, newIPATarball(t).Tgz, time.Now().Truncate(time.Second))
	r := runFetch(t, shared, env, "--sha256", sha256Hex(ipa.Tgz))
	r.wantExit(t, 1, "changed tarball, old --sha256")
	if line := r.lastLine(); !strings.Contains(line, "checksum mismatch") || !strings.Contains(line, "--sha256") {
		t.Errorf("the error line does not say checksum mismatch and what to check:\n%s", line)
	}
	assertFetched(t, shared, "ironic-python-agent", ipa)
	assertNoFetchTemps(t, shared)

	// --checksum-url: a sha256sum file naming the tarball.
	srv.Set("/ipa-centos9-master.tar.gz.sha256", []byte(sha256sumLine(ipa.Tgz, "ipa-centos9-master.tar.gz")), time.Now())
	r = runFetch(t, shared, env, "--checksum-url", srv.URL+"/ipa-centos9-master.tar.gz.sha256")
	r.wantExit(t, 1, "changed tarball, old --checksum-url")
	assertFetched(t, shared, "ironic-python-agent", ipa)
}

func TestFetchBadTarball(t *testing.T) {
	t.Parallel()
	srv := startFileServer(t)
	for _, bad := range badIPATarballs(t) {
		t.Run(bad.Name, func(t *testing.T) {
			srv.Set(fetchTarballPath, bad.Tgz, time.Now())
			shared := t.TempDir()
			r := runFetch(t, shared, []string{"IPA_BASEURI=" + srv.URL})
			r.wantExit(t, 1, bad.Name)
			if !fetchMentions(r.lastLine(), bad.Mention) {
				t.Errorf("the error line mentions none of %q:\n%s", bad.Mention, r.lastLine())
			}
			ents, _ := os.ReadDir(fetchImagesDir(shared))
			for _, e := range ents {
				t.Errorf("%s left %s", bad.Name, e.Name())
			}
		})
	}
}

func TestFetchNoKernelMember(t *testing.T) {
	t.Parallel()
	srv := startFileServer(t)
	srv.Set(fetchTarballPath, tarGz(t, tarEntry{Name: ipaInitramfsMember, Body: randomBytes(t, 4096)}), time.Now())
	r := runFetch(t, t.TempDir(), []string{"IPA_BASEURI=" + srv.URL})
	r.wantExit(t, 1, "no *.kernel member")
	if line := r.lastLine(); !strings.Contains(line, `extract rule from="*.kernel" matched no member`) || !strings.Contains(line, ipaInitramfsMember) {
		t.Errorf("the error line does not name the rule and the members there are:\n%s", line)
	}
}

func fetchMentions(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(strings.ToLower(s), strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

// TestFetchThroughProxy addresses the file server by a name that is not loopback (Go never proxies
// localhost or 127.0.0.1), so the request goes to HTTP_PROXY in absolute form and the proxy forwards it.
func TestFetchThroughProxy(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	_, port, _ := strings.Cut(srv.Addr, ":")
	host := "ipa.test:" + port
	var proxied atomic.Int64
	forward := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", srv.Addr
	}}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host != host {
			http.Error(w, fmt.Sprintf("this proxy only forwards to %s, not %q", host, r.URL.Host), http.StatusBadGateway)
			return
		}
		proxied.Add(1)
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	shared := t.TempDir()
	runFetch(t, shared, []string{"IPA_BASEURI=http://" + host, "HTTP_PROXY=" + proxy.URL}).wantExit(t, 0, "through HTTP_PROXY")
	assertFetched(t, shared, "ironic-python-agent", ipa)
	if proxied.Load() != 1 {
		t.Errorf("the proxy forwarded %d requests, want 1", proxied.Load())
	}
	// NO_PROXY wins: without the proxy, ipa.test does not resolve and the run fails.
	r := runFetch(t, t.TempDir(), []string{"IPA_BASEURI=http://" + host, "http_proxy=" + proxy.URL, "no_proxy=ipa.test"}, "--timeout", "5s")
	r.wantExit(t, 1, "NO_PROXY=ipa.test")
	if proxied.Load() != 1 {
		t.Errorf("the proxy was used although NO_PROXY names the host")
	}
}

// TestFetchFromImagecache takes the files from a cache's file set instead of the tarball.
func TestFetchFromImagecache(t *testing.T) {
	t.Parallel()
	srv, ipa := fetchServeIPA(t, fetchTarballPath)
	cache := startImagecache(t, fmt.Sprintf(`files:
  - set: ipa
    url: %s%s
    extract:
      - {from: "*.kernel", to: ironic-python-agent.kernel}
      - {from: "*.initramfs", to: ironic-python-agent.initramfs}
`, srv.URL, fetchTarballPath))
	from := cache.URL + "/files/ipa"
	waitFor(t, 30*time.Second, "the cache serves "+from+"/ironic-python-agent.kernel", func() error {
		resp, err := http.Get(from + "/ironic-python-agent.kernel")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})

	shared := t.TempDir()
	// IPA_BRANCH from the old init container's environment must not matter with --from.
	runFetch(t, shared, []string{"IPA_BRANCH=stable/2025.1"}, "--from", from).wantExit(t, 0, "--from the cache")
	assertFetched(t, shared, "ironic-python-agent", ipa)
	state := readFetchState(t, shared, ".ironic-python-agent.imagecache.json")
	if len(state.Sources) != 2 || state.Sources[0].URL != from+"/ironic-python-agent.kernel" {
		t.Errorf("state %+v, want one source per file", state)
	}
	r := runFetch(t, shared, nil, "--from", from)
	r.wantExit(t, 0, "--from the cache, again")
	if !strings.Contains(r.stderr, `"result":"not modified"`) {
		t.Errorf("the second run from the cache was not answered 304:\n%s", r.stderr)
	}
	assertFetched(t, shared, "ironic-python-agent", ipa)
}

// TestFetchFromImagecacheVersionSwitch: the cache publishes a new version of the set between fetch's request
// for the kernel and its request for the initramfs. A proxy in front of the cache makes that happen every
// time: when the cache has answered the first kernel request, and before fetch gets that answer, it has the
// cache refresh the set from an upstream that already serves the next release. fetch must not publish the
// kernel of one version next to the initramfs of the other.
func TestFetchFromImagecacheVersionSwitch(t *testing.T) {
	t.Parallel()
	srv, _ := fetchServeIPA(t, fetchTarballPath)
	cache := startImagecache(t, fmt.Sprintf(`files:
  - set: ipa
    url: %s%s
    refreshInterval: 1h
    extract:
      - {from: "*.kernel", to: ironic-python-agent.kernel}
      - {from: "*.initramfs", to: ironic-python-agent.initramfs}
`, srv.URL, fetchTarballPath))
	waitFor(t, 30*time.Second, "the cache publishes version 1 of the set", func() error {
		if v := setVersionOf(t, cache.URL+"/api/v1/sets/ipa"); v != 1 {
			return fmt.Errorf("version %d", v)
		}
		return nil
	})
	second := newIPATarball(t)
	srv.Set(fetchTarballPath, second.Tgz, time.Now().Truncate(time.Second))

	sw := &versionSwitcher{t: t, cache: cache.URL, trigger: "ironic-python-agent.kernel"}
	proxy := httptest.NewServer(sw)
	t.Cleanup(proxy.Close)

	shared := t.TempDir()
	r := runFetch(t, shared, nil, "--from", proxy.URL+"/files/ipa")
	r.wantExit(t, 0, "--from a cache that switches versions between the two requests")
	if got, want := sw.log(), "ironic-python-agent.kernel@1 ironic-python-agent.initramfs@2 ironic-python-agent.kernel@2"; got != want {
		t.Errorf("the cache answered %s, want %s (the kernel of version 1 fetched again from version 2)", got, want)
	}
	assertFetched(t, shared, "ironic-python-agent", second)
	assertNoFetchTemps(t, shared)
	for _, want := range []string{"published a new version of its file set", `"again":"ironic-python-agent.kernel"`, `"setVersion":"2"`, `"result":"downloaded"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("fetch does not report %s:\n%s", want, r.stderr)
		}
	}
	var state struct{ SetVersion string }
	b, _ := os.ReadFile(filepath.Join(fetchImagesDir(shared), ".ironic-python-agent.imagecache.json"))
	if err := json.Unmarshal(b, &state); err != nil || state.SetVersion != "2" {
		t.Errorf("the state file does not record set version 2 (%v):\n%s", err, b)
	}
}

// setVersionOf reads a file set's published version from the admin API.
func setVersionOf(t *testing.T, url string) int {
	t.Helper()
	a := call(t, http.MethodGet, url)
	var st struct{ Version int }
	if a.Status != http.StatusOK || json.Unmarshal(a.Body, &st) != nil {
		t.Fatalf("GET %s: %d %s", url, a.Status, a.Body)
	}
	return st.Version
}

// versionSwitcher forwards GET /files/... to the cache (unconditionally: the test's fetch runs with an empty
// shared directory, so it sends no validators). After the cache answered the first request for trigger,
// it asks the cache to refresh the set (POST /api/v1/sets/ipa/refresh, which returns once the new version is
// published) and only then passes the answer on, so the client's next request meets the new version.
type versionSwitcher struct {
	t       *testing.T
	cache   string
	trigger string

	mu       sync.Mutex
	switched bool
	served   []string // "<file>@<X-Set-Version>" in order
}

func (s *versionSwitcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := http.Get(s.cache + r.URL.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	file := path.Base(r.URL.Path)
	s.mu.Lock()
	s.served = append(s.served, file+"@"+resp.Header.Get("X-Set-Version"))
	refresh := file == s.trigger && !s.switched
	s.switched = s.switched || refresh
	s.mu.Unlock()
	if refresh {
		s.refresh()
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// refresh has the cache publish the next version; t.Errorf, not Fatal: this runs on the server's goroutine.
func (s *versionSwitcher) refresh() {
	resp, err := http.Post(s.cache+"/api/v1/sets/ipa/refresh", "application/json", nil)
	if err != nil {
		s.t.Errorf("refresh the set: %v", err)
		return
	}
	defer resp.Body.Close()
	var st struct{ Version int }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK || st.Version != 2 {
		s.t.Errorf("refresh the set: status %d, version %d (%v), want 200 and version 2", resp.StatusCode, st.Version, err)
	}
}

func (s *versionSwitcher) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.served, " ")
}
