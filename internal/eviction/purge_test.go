package eviction

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"imagecache.io/imagecache/internal/store"
)

func TestPurgeKeepsWhatOthersUse(t *testing.T) {
	f := newFixture(t)
	base := f.blob(400_000)
	own := f.blob(300_000)
	app := f.image("app", time.Now(), base, own)
	other := f.image("other", time.Now(), base, f.blob(300_000))
	e := New(f.st, 0, 0.9, slog.New(slog.DiscardHandler))

	images, err := e.Images()
	if err != nil || len(images) != 2 {
		t.Fatalf("Images: %v %+v", err, images)
	}
	for _, img := range images {
		if img.Size < 700_000 || img.UniqueSize >= img.Size || img.Missing != 0 || len(img.Repositories) != 1 {
			t.Errorf("image %+v: want the shared base in Size, not in UniqueSize", img)
		}
	}

	p, err := e.Purge("up", "team/app", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if f.present(app) || f.present(own) || !f.present(base) || !f.present(other) {
		t.Errorf("after purge: app %v, own layer %v, shared base %v, other image %v; want only app and its own layer gone",
			f.present(app), f.present(own), f.present(base), f.present(other))
	}
	if p.Objects[0] != app || len(p.Objects) != 3 { // manifest, its config, its own layer
		t.Errorf("purged objects %v, want the manifest first and 3 in all", p.Objects)
	}
	if _, err := f.st.Tag("up", "team/app", "v1"); err == nil {
		t.Error("tag record kept")
	}
	if _, err := e.Purge("up", "team/app", "v1"); !errors.Is(err, ErrNotCached) {
		t.Errorf("second purge: %v, want ErrNotCached", err)
	}
	if _, err := e.Purge("up", "team/app", app); !errors.Is(err, ErrNotCached) {
		t.Errorf("purge of a gone digest: %v, want ErrNotCached", err)
	}
	assertNoHoles(t, f.st)
}

func TestPurgeRefusesPinsAndParts(t *testing.T) {
	f := newFixture(t)
	pinned := f.image("pinned", time.Now(), f.blob(1000))
	f.st.SetPins("k8s/ImageCache/apps/platform", []string{"up/team/pinned:v1"})
	e := New(f.st, 0, 0.9, slog.New(slog.DiscardHandler))
	_, err := e.Purge("up", "team/pinned", pinned)
	var pe *PinnedError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "ImageCache apps/platform") {
		t.Fatalf("purge of a pinned image: %v", err)
	}
	if !f.present(pinned) {
		t.Fatal("a refused purge removed content")
	}

	// An index over a platform manifest: the platform manifest alone is part of the index's image.
	child := f.image("multi-child", time.Now(), f.blob(1000))
	f.st.DeleteTag(store.TagRef{Upstream: "up", Repository: "team/multi-child", Tag: "v1"})
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{"digest": child, "mediaType": "application/vnd.oci.image.manifest.v1+json"}}})
	id := digest.FromBytes(index).String()
	f.st.Put(id, "application/vnd.oci.image.index.v1+json", index)
	f.st.Link("up", "team/multi-child", id)
	_, err = e.Purge("up", "team/multi-child", child)
	var part *PartOfError
	if !errors.As(err, &part) || !f.present(child) {
		t.Fatalf("purge of a platform manifest: %v (present %v)", err, f.present(child))
	}
	if _, err := e.Purge("up", "team/multi-child", id); err != nil || f.present(child) {
		t.Fatalf("purge of the index: %v (child present %v)", err, f.present(child))
	}
}
