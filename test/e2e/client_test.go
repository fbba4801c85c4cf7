package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// answer is one response from the cache, read whole.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// ociError is the first error of an OCI error body, or empty.
func (a answer) ociError() (code, message string) {
	var e struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	if json.Unmarshal(a.Body, &e) == nil && len(e.Errors) > 0 {
		return e.Errors[0].Code, e.Errors[0].Message
	}
	return "", ""
}

// call sends method to url (a full URL on the cache) and reads the whole answer.
func call(t testing.TB, method, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", strings.Join([]string{
		"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
	}, ", "))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// manifest GETs (or HEADs) repo's manifest ref from the cache.
func manifest(t testing.TB, c *cacheProc, method, repo, ref string) answer {
	t.Helper()
	return call(t, method, c.URL+"/v2/"+repo+"/manifests/"+ref)
}

// expect fails the test unless the answer has the status and X-Cache result.
func expect(t testing.TB, a answer, status int, xcache string, context string) {
	t.Helper()
	if a.Status != status || a.Header.Get("X-Cache") != xcache {
		code, msg := a.ociError()
		t.Fatalf("%s: got %d X-Cache=%q (%s %s), want %d X-Cache=%q", context, a.Status, a.Header.Get("X-Cache"), code, msg, status, xcache)
	}
}
