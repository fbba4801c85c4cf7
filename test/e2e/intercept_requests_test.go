package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInterceptNamespaceAndPush: through the proxy the CONNECT host chooses the upstream, so a ?ns= in the
// request is neither used nor echoed in OCI-Namespace; and a push gets the cache's 405 with advice a
// client behind the proxy can follow (NO_PROXY), reaching neither the cache's store nor the upstream.
func TestInterceptNamespaceAndPush(t *testing.T) {
	s := startIntercept(t, "")
	digest, _ := pushImage(t, s.reg.Host, "secure/app:v1", "oci", 1, 2048, s.trusting)
	c := &http.Client{Transport: s.transport(nil), Timeout: 10 * time.Second}

	req, _ := http.NewRequest(http.MethodGet, "https://"+s.host+"/v2/secure/app/manifests/v1?ns=other.example", nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readBody(resp)
	if resp.StatusCode != 200 || resp.Header.Get("Docker-Content-Digest") != digest {
		t.Fatalf("GET manifest with ?ns=other.example through the proxy: %s %s, want 200 %s", resp.Status, resp.Header.Get("Docker-Content-Digest"), digest)
	}
	if ns := resp.Header.Get("OCI-Namespace"); ns != "" {
		t.Errorf("OCI-Namespace %q: the proxy served registry.test (the CONNECT host) but echoed another namespace", ns)
	}

	before := len(s.reg.Log())
	out, err := runEnv(t, s.craneEnv(), tool(t, "crane"), "tag", s.host+"/secure/app:v1", "v2")
	if err == nil {
		t.Fatalf("crane tag through the proxy succeeded: %s", out)
	}
	for _, want := range []string{"UNSUPPORTED", "add registry.test to the client's NO_PROXY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("crane tag through the proxy: %v\nwant it to contain %q", err, want)
		}
	}
	if log := s.reg.Log()[before:]; strings.Contains(log, `"PUT /v2/`) {
		t.Errorf("the push reached the upstream:\n%s", log)
	}
}
