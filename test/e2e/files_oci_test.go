package e2e

import (
	"fmt"
	"net/http"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ipaArtifact is the kernel and initramfs of one IPA build, as the two layers of an OCI artifact.
type ipaArtifact struct {
	Kernel, Initramfs []byte
}

func newIPAArtifact(t testing.TB) ipaArtifact {
	t.Helper()
	return ipaArtifact{Kernel: randomBytes(t, 32<<10), Initramfs: randomBytes(t, 128<<10)}
}

// image builds the artifact the way `oras push` does: an OCI manifest with a config of its own media type
// and one layer per file (media type application/vnd.oci.image.layer.v1.tar, oras's default), each titled
// with its file name. arch, when set, goes into the config too, for an image index entry.
func (a ipaArtifact) image(t testing.TB, arch string) v1.Image {
	t.Helper()
	var img v1.Image
	if arch == "" {
		img = mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, "application/vnd.metal3.ironic-python-agent.config.v1+json")
	} else {
		img = ociBase(t, "linux", arch)
	}
	for _, f := range []struct {
		title string
		body  []byte
	}{{kernelFile, a.Kernel}, {initramfsFile, a.Initramfs}} {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(f.body, types.OCIUncompressedLayer),
			Annotations: map[string]string{"org.opencontainers.image.title": f.title},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	img, ok := mutate.Annotations(img, map[string]string{"org.opencontainers.image.description": "ironic-python-agent"}).(v1.Image)
	if !ok {
		t.Fatal("mutate.Annotations of an image is not an image")
	}
	return img
}

// pushIPAArtifact pushes a single-architecture artifact and returns its manifest digest.
func pushIPAArtifact(t testing.TB, reg *registryProc, repoTag string, a ipaArtifact) string {
	t.Helper()
	img := a.image(t, "")
	if err := remote.Write(parseRef(t, reg.Host, repoTag), img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", repoTag, err)
	}
	return digestOf(t, img)
}

// pushIPAIndex pushes an image index with one artifact per architecture and returns the index digest.
func pushIPAIndex(t testing.TB, reg *registryProc, repoTag string, perArch map[string]ipaArtifact) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        perArch[arch].image(t, arch),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	if err := remote.WriteIndex(parseRef(t, reg.Host, repoTag), idx, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push index %s: %v", repoTag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestFileSetFromOCI: an oci:// set publishes the titled layers of an artifact, read through the cache's own
// upstreams; an image index is resolved to the architecture's manifest; tags and digests both work, and a
// moved tag is a new version on refresh.
func TestFileSetFromOCI(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	single := newIPAArtifact(t)
	singleDigest := pushIPAArtifact(t, reg, "team/ipa:v1", single)
	multi := map[string]ipaArtifact{"amd64": newIPAArtifact(t), "arm64": newIPAArtifact(t)}
	indexDigest := pushIPAIndex(t, reg, "team/ipa-multi:v1", multi)

	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q}
files:
  - set: ipa-oci
    url: oci://upstream.test/team/ipa:v1
    refreshInterval: 1h
  - set: ipa-arm
    url: oci://upstream.test/team/ipa-multi:v1
    architecture: aarch64
    refreshInterval: 1h
  - set: ipa-x86
    url: oci://upstream.test/team/ipa-multi:v1
    architecture: x86_64
    refreshInterval: 1h
  - set: ipa-default-arch
    url: oci://upstream.test/team/ipa-multi:v1
    refreshInterval: 1h
  - set: ipa-digest
    url: oci://upstream.test/team/ipa@%s
    refreshInterval: 1h
  - set: ipa-arm-digest
    url: oci://upstream.test/team/ipa-multi@%s
    architecture: arm64
    refreshInterval: 1h
`, reg.URL, singleDigest, indexDigest))

	for _, s := range []struct {
		set  string
		want ipaArtifact
	}{
		{"ipa-oci", single},
		{"ipa-arm", multi["arm64"]},
		{"ipa-x86", multi["amd64"]},
		{"ipa-default-arch", multi["amd64"]},
		{"ipa-digest", single},
		{"ipa-arm-digest", multi["arm64"]},
	} {
		st := waitSetState(t, c, s.set, "Ready", nil)
		assertStatusFiles(t, st, map[string][]byte{kernelFile: s.want.Kernel, initramfsFile: s.want.Initramfs})
		assertServed(t, c, s.set, kernelFile, s.want.Kernel)
		assertServed(t, c, s.set, initramfsFile, s.want.Initramfs)
	}

	// The tag moves: a refresh of the tag's set publishes the new artifact; the digest's set stays put.
	next := newIPAArtifact(t)
	pushIPAArtifact(t, reg, "team/ipa:v1", next)
	before := getSetStatus(t, c, "ipa-oci")
	st := mustRefresh(t, c, "ipa-oci", http.StatusOK, "Ready")
	if st.Version != before.Version+1 {
		t.Errorf("ipa-oci: version %d after the tag moved, want %d", st.Version, before.Version+1)
	}
	assertServed(t, c, "ipa-oci", kernelFile, next.Kernel)
	assertServed(t, c, "ipa-oci", initramfsFile, next.Initramfs)
	beforeDigest := getSetStatus(t, c, "ipa-digest")
	if st := mustRefresh(t, c, "ipa-digest", http.StatusOK, "Ready"); st.Version != beforeDigest.Version {
		t.Errorf("ipa-digest: version %d after a refresh of an immutable reference, want %d", st.Version, beforeDigest.Version)
	}
	assertServed(t, c, "ipa-digest", kernelFile, single.Kernel)

	// The artifact's manifests and layers were cached like any image's: with the registry gone the sets are
	// still served, and a refresh of the tag fails without unpublishing anything.
	reg.Stop(t)
	c.Restart(t)
	assertServed(t, c, "ipa-oci", kernelFile, next.Kernel)
	assertServed(t, c, "ipa-arm", initramfsFile, multi["arm64"].Initramfs)
	if code, st := refreshSet(t, c, "ipa-x86"); (code == http.StatusOK) != (st.State == "Ready") || st.Version < 1 {
		t.Errorf("ipa-x86 refresh with the registry down: %d %s", code, st)
	}
	assertServed(t, c, "ipa-x86", kernelFile, multi["amd64"].Kernel)
}
