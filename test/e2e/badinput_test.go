package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"imagecache.io/imagecache/test/faultproxy"
)

// sendRaw writes one HTTP/1.1 request exactly as given (no client cleans or escapes the target) and reads
// the answer. body is sent in full; declaredLength, when not negative, is the Content-Length announced
// instead of len(body), so a test can announce a large body it never sends.
func sendRaw(t testing.TB, host, method, target string, body []byte, declaredLength int64) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Every answer here must come fast: a cache that waits for a body it should refuse fails on this.
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	length := int64(len(body))
	if declaredLength >= 0 {
		length = declaredLength
	}
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: imagecache-e2e\r\nAccept: %s\r\n", method, target, host, allManifestTypes)
	if length > 0 || method == http.MethodPut || method == http.MethodPost || method == http.MethodPatch {
		req += fmt.Sprintf("Content-Type: application/octet-stream\r\nContent-Length: %d\r\n", length)
	}
	req += "Connection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("%s %s: write: %v", method, target, err)
	}
	if len(body) > 0 {
		if _, err := conn.Write(body); err != nil {
			t.Fatalf("%s %s: write body: %v", method, target, err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s %s: read answer body: %v", method, target, err)
	}
	return resp, b
}

// TestBadInput sends the cache malformed names, tags and digests, paths that try to climb out of /v2/,
// unknown endpoints and every kind of write. Each must get a 4xx OCI error that says what is wrong, none
// may reach the upstream or touch the filesystem outside the storage directory, and the cache must go on
// serving real images afterwards.
func TestBadInput(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	imgDigest, _ := pushImage(t, reg.Host, "team/app:v1", "oci", 1, 2048)
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    default: true
`, px.URL()))
	// The harness made exactly these next to the storage directory; anything else appearing there (or in
	// the storage root) was written by a request that escaped it.
	parent := filepath.Dir(cache.StorageDir)
	parentBefore := dirNames(t, parent)

	hex64 := strings.Repeat("ab", 32)
	digest := "sha256:" + hex64
	const (
		nameInvalid   = "NAME_INVALID"
		tagInvalid    = "TAG_INVALID"
		digestInvalid = "DIGEST_INVALID"
		unsupported   = "UNSUPPORTED"
	)
	// notFound is what an unknown endpoint may say: the spec has no code for it, so either of these.
	notFound := []string{"NOT_FOUND", unsupported}
	for _, tc := range []struct {
		name   string
		method string
		target string
		status []int
		codes  []string
	}{
		{"uppercase name", "GET", "/v2/Team/app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"empty component", "GET", "/v2/team//app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"dot-dot component", "GET", "/v2/team/../app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"escaped dot-dot component", "GET", "/v2/team/%2e%2e/app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"dot component", "GET", "/v2/team/./app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"climb out of /v2", "GET", "/v2/../../etc/passwd", []int{400, 404}, []string{nameInvalid, "NOT_FOUND", "NAME_UNKNOWN"}},
		{"climb out after a prefix", "GET", "/v2/upstream.test/../../../etc/passwd/manifests/v1", []int{400}, []string{nameInvalid}},
		{"escaped slash", "GET", "/v2/team%2Fapp/manifests/v1", []int{400}, []string{nameInvalid}},
		{"escaped NUL", "GET", "/v2/team%00/app/manifests/v1", []int{400}, []string{nameInvalid}},
		{"backslash", "GET", `/v2/team\..\app/manifests/v1`, []int{400}, []string{nameInvalid}},
		{"bad separator", "GET", "/v2/team/app--/manifests/v1", []int{400}, []string{nameInvalid}},
		{"256-character name", "GET", "/v2/" + strings.Repeat("a", 256) + "/manifests/v1", []int{400}, []string{nameInvalid}},
		{"256-character name of components", "GET", "/v2/" + strings.Repeat("abcdefg/", 31) + "abcdefgh/blobs/" + digest, []int{400}, []string{nameInvalid}},
		{"129-character tag", "GET", "/v2/team/app/manifests/" + strings.Repeat("t", 129), []int{400}, []string{tagInvalid}},
		{"tag starting with a dot", "GET", "/v2/team/app/manifests/.v1", []int{400}, []string{tagInvalid}},
		{"tag starting with a dash", "GET", "/v2/team/app/manifests/-v1", []int{400}, []string{tagInvalid}},
		{"tag with a slash", "GET", "/v2/team/app/manifests/v1/extra", []int{400}, []string{tagInvalid}},
		{"md5 blob digest", "GET", "/v2/team/app/blobs/md5:d41d8cd98f00b204e9800998ecf8427e", []int{400}, []string{digestInvalid}},
		{"md5 manifest digest", "GET", "/v2/team/app/manifests/md5:d41d8cd98f00b204e9800998ecf8427e", []int{400}, []string{digestInvalid}},
		{"63 hex", "GET", "/v2/team/app/blobs/sha256:" + hex64[:63], []int{400}, []string{digestInvalid}},
		{"65 hex", "GET", "/v2/team/app/manifests/sha256:" + hex64 + "a", []int{400}, []string{digestInvalid}},
		{"uppercase hex", "GET", "/v2/team/app/blobs/sha256:" + strings.ToUpper(hex64), []int{400}, []string{digestInvalid}},
		{"not hex", "GET", "/v2/team/app/blobs/sha256:" + strings.Repeat("zz", 32), []int{400}, []string{digestInvalid}},
		{"no algorithm", "GET", "/v2/team/app/blobs/" + hex64, []int{400}, []string{digestInvalid}},
		{"referrers of a bad digest", "GET", "/v2/team/app/referrers/sha256:" + hex64[:63], []int{400}, []string{digestInvalid}},
		{"catalog", "GET", "/v2/_catalog", []int{404}, notFound},
		{"unknown endpoint", "GET", "/v2/team/app/unknown/thing", []int{404}, notFound},
		{"tags but not list", "GET", "/v2/team/app/tags/all", []int{404}, notFound},
		{"put manifest", "PUT", "/v2/team/app/manifests/v1", []int{405}, []string{unsupported}},
		{"put manifest by digest", "PUT", "/v2/team/app/manifests/" + digest, []int{405}, []string{unsupported}},
		{"delete manifest", "DELETE", "/v2/team/app/manifests/" + digest, []int{405}, []string{unsupported}},
		{"delete tag", "DELETE", "/v2/team/app/manifests/v1", []int{405}, []string{unsupported}},
		{"delete blob", "DELETE", "/v2/team/app/blobs/" + digest, []int{405}, []string{unsupported}},
		{"put blob", "PUT", "/v2/team/app/blobs/" + digest, []int{405}, []string{unsupported}},
		{"start upload", "POST", "/v2/team/app/blobs/uploads/", []int{405}, []string{unsupported}},
		{"monolithic upload", "POST", "/v2/team/app/blobs/uploads/?digest=" + digest, []int{405}, []string{unsupported}},
		{"cross-repository mount", "POST", "/v2/team/app/blobs/uploads/?mount=" + digest + "&from=other/repo", []int{405}, []string{unsupported}},
		{"upload chunk", "PATCH", "/v2/team/app/blobs/uploads/0f6d2c1e", []int{405}, []string{unsupported}},
		{"finish upload", "PUT", "/v2/team/app/blobs/uploads/0f6d2c1e?digest=" + digest, []int{405}, []string{unsupported}},
		{"cancel upload", "DELETE", "/v2/team/app/blobs/uploads/0f6d2c1e", []int{405}, []string{unsupported}},
		{"upload status", "GET", "/v2/team/app/blobs/uploads/0f6d2c1e", []int{404, 405}, []string{unsupported, "BLOB_UPLOAD_UNKNOWN"}},
		{"write to /v2/", "POST", "/v2/", []int{405}, []string{unsupported}},
		{"write with a bad name", "PUT", "/v2/Team/../app/manifests/v1", []int{400, 405}, []string{nameInvalid, unsupported}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.method == http.MethodPut || tc.method == http.MethodPatch || tc.method == http.MethodPost {
				body = []byte(`{"schemaVersion":2}`)
			}
			resp, b := sendRaw(t, cache.Host, tc.method, tc.target, body, -1)
			checkOCIError(t, tc.method+" "+tc.target, resp, b, tc.status, tc.codes)
		})
	}

	t.Run("5 MiB PUT body is refused unread", func(t *testing.T) {
		// The body is announced and never sent: an answer at all proves the cache did not wait to read it.
		resp, b := sendRaw(t, cache.Host, http.MethodPut, "/v2/team/app/blobs/uploads/0f6d2c1e?digest="+digest, nil, 5<<20)
		checkOCIError(t, "PUT of 5 MiB", resp, b, []int{405}, []string{unsupported})
	})

	if n := px.Total(); n != 0 {
		t.Errorf("bad requests reached the upstream %d times: %v", n, px.Requests())
	}
	if after := dirNames(t, parent); !slices.Equal(after, parentBefore) {
		t.Errorf("next to the storage directory: %v, before the bad requests: %v", after, parentBefore)
	}
	// The storage root holds content, index and downloads in progress (README), and nothing a request named.
	for _, n := range dirNames(t, cache.StorageDir) {
		if !slices.Contains([]string{"blobs", "index.db", "tmp"}, n) {
			t.Errorf("storage root holds %q", n)
		}
	}
	_ = filepath.WalkDir(cache.StorageDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && (strings.Contains(d.Name(), "passwd") || strings.Contains(d.Name(), "..")) {
			t.Errorf("storage holds %s", p)
		}
		return nil
	})

	// Still alive and still serving.
	if !cache.running() {
		t.Fatalf("the cache exited during the bad requests")
	}
	verifyPulledImage(t, pullRef(t, cache.Host+"/team/app:v1"), imgDigest)
	if px.Count(http.MethodGet, faultproxy.KindBlob) == 0 {
		t.Error("the pull after the bad requests fetched no blob from the upstream")
	}
}

// checkOCIError fails unless the answer has one of the statuses and is OCI error JSON whose first code is
// one of codes and whose message is not empty.
func checkOCIError(t testing.TB, what string, resp *http.Response, body []byte, statuses []int, codes []string) {
	t.Helper()
	if !slices.Contains(statuses, resp.StatusCode) {
		t.Errorf("%s: status %d (Location %q), want one of %v; body %.300s", what, resp.StatusCode, resp.Header.Get("Location"), statuses, body)
		return
	}
	var e struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &e); err != nil || len(e.Errors) == 0 {
		t.Errorf("%s: body is not OCI error JSON (%v): %.300s", what, err, body)
		return
	}
	if !slices.Contains(codes, e.Errors[0].Code) {
		t.Errorf("%s: code %q, want one of %v (message %q)", what, e.Errors[0].Code, codes, e.Errors[0].Message)
	}
	if strings.TrimSpace(e.Errors[0].Message) == "" {
		t.Errorf("%s: empty error message", what)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
}

// dirNames lists a directory's entries, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestBadInputOversizedManifest has an upstream answer a 5 MiB manifest, over the 4 MiB limit that
// distribution and containerd apply: the cache must refuse it with a 502 that names the limit, and keep
// nothing of it. A tiny upstream in the test process serves it, since a real registry refuses to store it.
func TestBadInputOversizedManifest(t *testing.T) {
	body := oversizedManifest(5 << 20)
	sum := sha256.Sum256(body)
	dgst := "sha256:" + hex.EncodeToString(sum[:])
	var gets atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/", "/v2":
			w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
			io.WriteString(w, "{}")
		case "/v2/big/app/manifests/v1", "/v2/big/app/manifests/" + dgst:
			if r.Method == http.MethodGet {
				gets.Add(1)
			}
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", dgst)
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			if r.Method == http.MethodGet {
				w.Write(body)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(upstream.Close)

	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: big.test
    url: %s
`, upstream.URL))
	limit := regexp.MustCompile(`4 ?MiB|4194304|4 ?MB`)
	for i, ref := range []string{"v1", dgst, "v1"} {
		before := gets.Load()
		a := call(t, http.MethodGet, cache.URL+"/v2/big.test/big/app/manifests/"+ref, "Accept", allManifestTypes)
		code, msg := a.ociError()
		if a.Status != http.StatusBadGateway || code == "" {
			t.Errorf("GET %s: %d %.300s, want 502 with an OCI error", ref, a.Status, a.Body)
		}
		if !limit.MatchString(msg) {
			t.Errorf("GET %s: message %q does not name the 4 MiB limit", ref, msg)
		}
		// Asked again (i == 2: the tag after the digest), the cache must go back to the upstream: it kept nothing.
		if got := gets.Load(); got != before+1 {
			t.Errorf("request %d (GET %s): upstream GETs went from %d to %d, want one more", i, ref, before, got)
		}
	}
	hexPart := strings.TrimPrefix(dgst, "sha256:")
	_ = filepath.WalkDir(cache.StorageDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.Contains(d.Name(), hexPart) || strings.HasPrefix(p, filepath.Join(cache.StorageDir, "blobs")) && d.Type().IsRegular()) {
			t.Errorf("the oversized manifest left %s in the store", p)
		}
		return nil
	})
}

// oversizedManifest is a syntactically valid OCI image manifest of exactly size bytes, padded with an
// annotation.
func oversizedManifest(size int) []byte {
	head := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},` +
		`"layers":[],"annotations":{"pad":"`
	tail := `"}}`
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}
