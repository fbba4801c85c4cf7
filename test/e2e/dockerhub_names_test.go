package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestConfigNamesAsReferencesDo: pins and policies name images the way references do. On Docker Hub
// "busybox" is library/busybox, and an upstream may be named by its URL's host; a pin or a policy written
// that way must apply, not be accepted and silently match nothing.
func TestConfigNamesAsReferencesDo(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	pinned, _ := pushImage(t, reg.Host, "library/busybox:pinme", "oci", 1, 4096)
	pushImage(t, reg.Host, "library/busybox:nv", "oci", 1, 4096)
	// The upstream is called docker.io, which makes it Docker Hub for naming; its content is the local registry's.
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: docker.io, url: %q, default: true}
pins: [docker.io/busybox:pinme]
policies:
  - match: {upstream: %q, repository: busybox, tag: nv}
    pull: Never
`, reg.URL, reg.Host))

	expect(t, manifest(t, c, http.MethodGet, "busybox", "pinme"), 200, "MISS", "pull the pinned image by its short name")
	a := call(t, http.MethodGet, c.URL+"/api/v1/images?name=docker.io/library/busybox")
	var list struct {
		Images []struct {
			Digest string `json:"digest"`
			Pinned bool   `json:"pinned"`
		} `json:"images"`
	}
	if err := json.Unmarshal(a.Body, &list); err != nil || len(list.Images) != 1 {
		t.Fatalf("GET /api/v1/images: %d %s (%v)", a.Status, a.Body, err)
	}
	images := list.Images
	if images[0].Digest != pinned || !images[0].Pinned {
		t.Errorf("docker.io/library/busybox:pinme: %+v; want %s pinned by the config's docker.io/busybox:pinme", images[0], pinned)
	}

	// The Never rule names the upstream by its URL's host and the repository without library/.
	b := manifest(t, c, http.MethodGet, "busybox", "nv")
	if code, msg := b.ociError(); b.Status != http.StatusNotFound || !strings.Contains(msg, "Never") {
		t.Errorf("busybox:nv under a Never rule: %d %s %q; want 404 saying the policy forbids fetching", b.Status, code, msg)
	}
}
