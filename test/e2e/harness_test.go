package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/test/faultproxy"
)

// TestHarnessUpstream proves the upstream side of the harness: registry, seeding, fault proxy counts, and
// a registry stopped and started again on the same port and data.
func TestHarnessUpstream(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)

	imgDigest, _ := pushImage(t, reg.Host, "harness/oci:v1", "oci", 2, 4096)
	idxDigest, _ := pushIndex(t, reg.Host, "harness/multi:v1")
	dockerDigest, _ := pushImage(t, reg.Host, "harness/docker:v1", "docker", 1, 1024)

	pullImage(t, px.Addr(), "harness/oci:v1", imgDigest, types.OCIManifestSchema1)
	if got := px.Count(http.MethodGet, faultproxy.KindManifest); got != 1 {
		t.Errorf("GET manifest through the proxy: %d, want 1", got)
	}
	if got := px.Count(http.MethodGet, faultproxy.KindBlob); got != 3 {
		t.Errorf("GET blob through the proxy: %d, want 3 (config and 2 layers)", got)
	}
	pullImage(t, px.Addr(), "harness/docker:v1", dockerDigest, types.DockerManifestSchema2)
	pullIndex(t, px.Addr(), "harness/multi:v1", idxDigest, 2)

	reg.Stop(t)
	px.Reset()
	// No retries: go-containerregistry would otherwise back off for seconds on the proxy's 502s.
	noRetry := remote.WithRetryBackoff(remote.Backoff{Steps: 1})
	if _, err := remote.Image(parseRef(t, px.Addr(), "harness/oci:v1"), remote.WithContext(t.Context()), noRetry); err == nil {
		t.Fatal("pull succeeded with the registry stopped")
	}
	if px.Total() == 0 {
		t.Error("proxy saw no request while the registry was down")
	}
	reg.Start(t)
	pullImage(t, px.Addr(), "harness/oci:v1", imgDigest, types.OCIManifestSchema1)
	pullIndex(t, px.Addr(), "harness/multi:v1", idxDigest, 2)
	if !strings.Contains(reg.Log(), "/v2/harness/oci/manifests/v1") {
		t.Error("registry access log does not show the manifest request")
	}
}

// pullImage pulls repoTag from host, reads every blob, and checks digest and manifest media type.
func pullImage(t *testing.T, host, repoTag, wantDigest string, wantType types.MediaType) v1.Image {
	t.Helper()
	img, err := remote.Image(parseRef(t, host, repoTag), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull %s/%s: %v", host, repoTag, err)
	}
	if d := digestOf(t, img); d != wantDigest {
		t.Errorf("%s: digest %s, want %s", repoTag, d, wantDigest)
	}
	if mt, _ := img.MediaType(); mt != wantType {
		t.Errorf("%s: media type %s, want %s", repoTag, mt, wantType)
	}
	if _, err := img.RawConfigFile(); err != nil {
		t.Fatalf("%s: config: %v", repoTag, err)
	}
	if err := readLayers(img); err != nil {
		t.Fatalf("%s: %v", repoTag, err)
	}
	return img
}

// readLayers reads every layer of img to its end; go-containerregistry verifies each against its digest.
func readLayers(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
	}
	return nil
}

func pullIndex(t *testing.T, host, repoTag, wantDigest string, wantChildren int) {
	t.Helper()
	idx, err := remote.Index(parseRef(t, host, repoTag), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull index %s/%s: %v", host, repoTag, err)
	}
	if d, _ := idx.Digest(); d.String() != wantDigest {
		t.Errorf("%s: digest %s, want %s", repoTag, d, wantDigest)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != wantChildren {
		t.Fatalf("%s: %s with %d manifests, want OCI index with %d", repoTag, m.MediaType, len(m.Manifests), wantChildren)
	}
	for _, desc := range m.Manifests {
		child, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := child.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != desc.Platform.Architecture {
			t.Errorf("%s: child %s has architecture %s, index says %s", repoTag, desc.Digest, cf.Architecture, desc.Platform.Architecture)
		}
	}
}

// TestHarnessRegistryTLSAuth proves the registry options: HTTPS with a self-signed certificate and
// htpasswd basic auth.
func TestHarnessRegistryTLSAuth(t *testing.T) {
	cert, key := selfSignedCert(t)
	reg := startRegistry(t, registryOpts{auth: true, tlsCert: cert, tlsKey: key})
	if !strings.HasPrefix(reg.URL, "https://") {
		t.Fatalf("URL %s", reg.URL)
	}
	resp, err := reg.client.Get(reg.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v2/ without credentials: %s, want 401", resp.Status)
	}
	// startRegistry already waited for a 200 with the credentials.
}

// TestHarnessContainerd proves the containerd side: ctr pulls an OCI image from the registry through a
// hosts.toml mirror entry (the registry name itself is unreachable).
func TestHarnessContainerd(t *testing.T) {
	ctd := startContainerd(t)
	reg := startRegistry(t, registryOpts{})
	pushImage(t, reg.Host, "harness/oci:v1", "oci", 2, 4096)
	hosts := writeHostsTOML(t, "", "upstream.test", reg.Host)
	out, err := ctrPull(t, ctd.Socket, hosts, "upstream.test/harness/oci:v1")
	if err != nil {
		t.Fatalf("ctr pull: %v\n%s", err, out)
	}
	if !strings.Contains(out, "unpacking linux/amd64") {
		t.Errorf("ctr did not unpack the image:\n%s", out)
	}
	// containerd names the namespace it resolves for; seeing it proves the request came through the mirror.
	if !strings.Contains(reg.Log(), "ns=upstream.test") {
		t.Errorf("registry log shows no ?ns=upstream.test request:\n%s", reg.logTail(2048))
	}
}
