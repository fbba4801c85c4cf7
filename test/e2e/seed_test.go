package e2e

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Seeding writes straight to a registry over plain HTTP (go-containerregistry picks http for 127.0.0.1).
// opts can add remote.WithAuth for a registry started with registryOpts.auth.

// pushImage pushes a random image with layers layers of about layerSize bytes each (random tar content,
// gzipped) and returns its manifest digest. mediaTypes is "docker" (Docker schema 2) or "oci".
func pushImage(t testing.TB, registryHost, repoTag, mediaTypes string, layers int, layerSize int64, opts ...remote.Option) (string, v1.Image) {
	t.Helper()
	img := randomImage(t, mediaTypes, "linux", "amd64", layers, layerSize)
	ref := parseRef(t, registryHost, repoTag)
	if err := remote.Write(ref, img, append([]remote.Option{remote.WithContext(t.Context())}, opts...)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return digestOf(t, img), img
}

// pushIndex pushes an OCI image index with one small OCI image per platform ("os/arch"; linux/amd64 and
// linux/arm64 when none are given) and returns the index digest.
func pushIndex(t testing.TB, registryHost, repoTag string, platforms ...string) (string, v1.ImageIndex) {
	t.Helper()
	return pushIndexOpts(t, registryHost, repoTag, platforms, nil)
}

func pushIndexOpts(t testing.TB, registryHost, repoTag string, platforms []string, opts []remote.Option) (string, v1.ImageIndex) {
	t.Helper()
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64", "linux/arm64"}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		os, arch, ok := strings.Cut(p, "/")
		if !ok {
			t.Fatalf("platform %q: want os/arch", p)
		}
		img := randomImage(t, "oci", os, arch, 1, 1024)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os, Architecture: arch}},
		})
	}
	ref := parseRef(t, registryHost, repoTag)
	if err := remote.WriteIndex(ref, idx, append([]remote.Option{remote.WithContext(t.Context())}, opts...)...); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String(), idx
}

// pushBlobOfSize uploads a blob of exactly size random bytes (not a tar: for blob-level tests such as the
// thundering herd, not for images a runtime unpacks) and returns its digest.
func pushBlobOfSize(t testing.TB, registryHost, repo string, size int64, opts ...remote.Option) string {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	layer := static.NewLayer(b, types.OCILayer)
	r, err := name.NewRepository(registryHost+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(r, layer, append([]remote.Option{remote.WithContext(t.Context())}, opts...)...); err != nil {
		t.Fatalf("push blob of %d bytes to %s: %v", size, r, err)
	}
	d, _ := layer.Digest()
	return d.String()
}

// pushBigImage pushes an OCI image whose only layer is an exact size random blob and returns the manifest
// and layer digests: one large object that many clients ask for at once.
func pushBigImage(t testing.TB, registryHost, repoTag string, size int64, opts ...remote.Option) (manifestDigest, layerDigest string) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	layer := static.NewLayer(b, types.OCILayer)
	img := ociBase(t, "linux", "amd64")
	img, err := mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	ref := parseRef(t, registryHost, repoTag)
	if err := remote.Write(ref, img, append([]remote.Option{remote.WithContext(t.Context())}, opts...)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	ld, _ := layer.Digest()
	return digestOf(t, img), ld.String()
}

func randomImage(t testing.TB, mediaTypes, os, arch string, layers int, layerSize int64) v1.Image {
	t.Helper()
	var base v1.Image
	layerType := types.DockerLayer
	switch mediaTypes {
	case "docker":
		base = empty.Image // go-containerregistry's empty image is Docker schema 2
		cf, err := base.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = os, arch
		if base, err = mutate.ConfigFile(base, cf); err != nil {
			t.Fatal(err)
		}
	case "oci":
		base = ociBase(t, os, arch)
		layerType = types.OCILayer
	default:
		t.Fatalf("media types %q: want docker or oci", mediaTypes)
	}
	ls := make([]v1.Layer, layers)
	for i := range ls {
		l, err := random.Layer(layerSize, layerType)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	img, err := mutate.AppendLayers(base, ls...)
	if err != nil {
		t.Fatal(err)
	}
	mustMediaType(t, img, mediaTypes)
	return img
}

// ociBase is an empty image that really carries OCI media types: random.Image and empty.Image are Docker.
func ociBase(t testing.TB, os, arch string) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = os, arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// mustMediaType guards the seeding itself: a test about OCI content must not silently push Docker content.
func mustMediaType(t testing.TB, img v1.Image, mediaTypes string) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]types.MediaType{"docker": types.DockerManifestSchema2, "oci": types.OCIManifestSchema1}[mediaTypes]
	if m.MediaType != want {
		t.Fatalf("seeded %s image has manifest media type %s", mediaTypes, m.MediaType)
	}
	if mediaTypes == "oci" && m.Config.MediaType != types.OCIConfigJSON {
		t.Fatalf("seeded oci image has config media type %s", m.Config.MediaType)
	}
	for _, l := range m.Layers {
		if (mediaTypes == "oci") != (l.MediaType == types.OCILayer || l.MediaType == types.OCIUncompressedLayer) {
			t.Fatalf("seeded %s image has layer media type %s", mediaTypes, l.MediaType)
		}
	}
}

func parseRef(t testing.TB, host, repoTag string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(host+"/"+repoTag, name.Insecure, name.StrictValidation)
	if err != nil {
		t.Fatalf("reference %s/%s: %v", host, repoTag, err)
	}
	return ref
}

func digestOf(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// blobDigests lists the config and layer digests of an image, e.g. for conformance read-only data.
func blobDigests(t testing.TB, img v1.Image) []string {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	ds := []string{m.Config.Digest.String()}
	for _, l := range m.Layers {
		ds = append(ds, l.Digest.String())
	}
	return ds
}
