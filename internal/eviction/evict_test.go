package eviction

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"imagecache.io/imagecache/internal/store"
)

type fixture struct {
	t  *testing.T
	st *store.Store
}

func newFixture(t *testing.T) *fixture {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fixture{t: t, st: st}
}

// blob stores n random bytes.
func (f *fixture) blob(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	d := digest.FromBytes(b).String()
	if err := f.st.Put(d, "", b); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// image stores a manifest over config and layers, tags it, and marks it used at the given time.
func (f *fixture) image(tag string, used time.Time, layers ...string) string {
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.oci.image.manifest.v1+json"}
	m.Config = desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: f.blob(100)}
	for _, l := range layers {
		m.Layers = append(m.Layers, desc{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: l})
	}
	body, _ := json.Marshal(m)
	d := digest.FromBytes(body).String()
	if err := f.st.Put(d, m.MediaType, body); err != nil {
		f.t.Fatal(err)
	}
	f.st.PutTag("up", "team/"+tag, "v1", store.Tag{Digest: d, MediaType: m.MediaType})
	f.st.Link("up", "team/"+tag, d)
	f.use(used, append([]string{d, m.Config.Digest}, layers...)...)
	return d
}

func (f *fixture) use(at time.Time, ds ...string) {
	// Access times are whole seconds; write them the way Touch would have, at a chosen time.
	for _, d := range ds {
		f.st.Touch(d)
	}
	f.st.FlushAccessTimes()
	f.setAtimes(at, ds...)
}

func (f *fixture) present(d string) bool { _, err := f.st.Stat(d); return err == nil }

func TestEvictsLeastRecentlyUsedImagesKeepingSharedLayers(t *testing.T) {
	f := newFixture(t)
	base := f.blob(400_000)           // a base layer shared by every image
	now := time.Now().Add(-time.Hour) // every use in the past: a unit used after the plan is left alone
	var images, own []string
	for i := range 5 {
		l := f.blob(300_000)
		own = append(own, l)
		images = append(images, f.image(fmt.Sprintf("app%d", i), now.Add(time.Duration(i)*time.Minute), base, l))
	}
	total, _ := f.st.Usage()
	limit := total - 500_000 // two images' own layers must go
	e := New(f.st, limit, 0.9, slog.New(slog.DiscardHandler))
	p, err := e.Run(false)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := f.st.Usage()
	if after > int64(float64(limit)*0.9) {
		t.Fatalf("stored %d after eviction, want at most the low watermark %d", after, int64(float64(limit)*0.9))
	}
	if !f.present(base) {
		t.Fatal("the shared base layer was evicted while images using it remain")
	}
	evicted := len(p.Evicted)
	if evicted == 0 || evicted == 5 {
		t.Fatalf("evicted %d of 5 images", evicted)
	}
	for i := range 5 {
		gone := i < evicted // oldest first
		if f.present(images[i]) == gone || f.present(own[i]) == gone {
			t.Fatalf("image %d (used %d min after the first): manifest present %v, layer present %v; want evicted=%v",
				i, i, f.present(images[i]), f.present(own[i]), gone)
		}
		if _, err := f.st.Tag("up", fmt.Sprintf("team/app%d", i), "v1"); (err == nil) == gone {
			t.Fatalf("image %d: tag record present=%v, want %v", i, err == nil, !gone)
		}
	}
	assertNoHoles(t, f.st)
}

func TestPinsAreNeverEvicted(t *testing.T) {
	f := newFixture(t)
	old := time.Now().Add(-time.Hour)
	pinned := f.image("pinned", old, f.blob(500_000))
	other := f.image("other", time.Now(), f.blob(500_000))
	f.st.SetPins("config", []string{"up/team/pinned:v1"})
	e := New(f.st, 600_000, 0.9, slog.New(slog.DiscardHandler))
	p, err := e.Run(false)
	if err != nil {
		t.Fatal(err)
	}
	if !f.present(pinned) || f.present(other) {
		t.Fatalf("pinned present %v, unpinned (newer) present %v; want the pin kept and the other evicted", f.present(pinned), f.present(other))
	}
	if p.PinnedBytes < 500_000 || p.PinnedOverLimit {
		t.Fatalf("pinned bytes %d, over limit %v", p.PinnedBytes, p.PinnedOverLimit)
	}
	// A limit below the pins: nothing pinned goes, and the plan says so.
	e = New(f.st, 100_000, 0.9, slog.New(slog.DiscardHandler))
	p, _ = e.Run(false)
	if !f.present(pinned) || !p.PinnedOverLimit {
		t.Fatalf("limit below pins: pinned present %v, over limit reported %v", f.present(pinned), p.PinnedOverLimit)
	}
}

func TestDryRunRemovesNothing(t *testing.T) {
	f := newFixture(t)
	img := f.image("app", time.Now(), f.blob(500_000))
	e := New(f.st, 100_000, 0.9, slog.New(slog.DiscardHandler))
	p, err := e.Run(true)
	if err != nil || len(p.Evicted) != 1 || !p.DryRun {
		t.Fatalf("plan %+v %v", p, err)
	}
	if !f.present(img) {
		t.Fatal("a dry run removed content")
	}
}

func TestUnboundedEvictsNothing(t *testing.T) {
	f := newFixture(t)
	f.image("app", time.Now(), f.blob(500_000))
	p, err := New(f.st, 0, 0.9, slog.New(slog.DiscardHandler)).Run(false)
	if err != nil || len(p.Evicted) != 0 {
		t.Fatalf("%+v %v", p, err)
	}
}

// assertNoHoles checks the promise that matters: every manifest still indexed has its whole graph.
func assertNoHoles(t *testing.T, st *store.Store) {
	t.Helper()
	st.ForEachObject(func(o store.Object) error {
		if o.MediaType == "" {
			return nil
		}
		body, _, err := st.ReadAll(o.Digest)
		if err != nil {
			t.Fatalf("read manifest %s: %v", o.Digest, err)
		}
		var refs manifestRefs
		json.Unmarshal(body, &refs)
		for _, c := range refs.children() {
			if _, err := st.Stat(c); err != nil {
				t.Errorf("manifest %s is indexed but its %s is gone", o.Digest, c)
			}
		}
		return nil
	})
}

func (f *fixture) setAtimes(at time.Time, ds ...string) {
	for _, d := range ds {
		if err := f.st.SetAccessTime(d, at); err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestCrashMidEviction stops a unit's removal after each of its steps, as kill -9 would, and checks the
// promise that matters after a restart: no indexed manifest has a hole in its graph, and the next run removes
// what the interrupted one left behind.
func TestCrashMidEviction(t *testing.T) {
	for steps := 1; steps <= 3; steps++ {
		t.Run(fmt.Sprintf("after %d removals", steps), func(t *testing.T) {
			f := newFixture(t)
			old := f.image("old", time.Now().Add(-time.Hour), f.blob(300_000), f.blob(300_000))
			keep := f.image("keep", time.Now(), f.blob(300_000))
			e := New(f.st, 800_000, 0.5, slog.New(slog.DiscardHandler))
			p, err := e.Run(true)
			if err != nil || len(p.Evicted) == 0 || p.Evicted[0].Root != old {
				t.Fatalf("plan %+v %v", p, err)
			}
			u := p.Evicted[0]
			for _, tag := range u.tags {
				f.st.DeleteTag(tag)
			}
			for _, d := range u.Objects[:steps] { // the process dies after this many removals
				f.st.Remove(d)
			}
			assertNoHoles(t, f.st)
			// The next run that needs room takes the leftovers first: they are stray blobs, last used long ago.
			// Its target is exactly what the kept image occupies, so that every leftover, even the 100-byte
			// config, has to go (a looser target may be met with a small stray still stored, which is right).
			total, _ := f.st.Usage()
			for _, d := range u.Objects[steps:] {
				o, err := f.st.Stat(d)
				if err != nil {
					t.Fatal(err)
				}
				total -= o.Size
			}
			limit := (total*10 + 8) / 9 // the smallest limit whose 0.9 low watermark is at least total
			if _, err := New(f.st, limit, 0.9, slog.New(slog.DiscardHandler)).Run(false); err != nil {
				t.Fatal(err)
			}
			assertNoHoles(t, f.st)
			for _, d := range u.Objects {
				if f.present(d) {
					t.Errorf("%s, left by the interrupted run, survived the next one", d)
				}
			}
			if !f.present(keep) {
				t.Fatal("the recently used image was evicted")
			}
		})
	}
}

// TestWhatChangesDuringARunIsLeftAlone: between the plan and the removals, serving goes on. A manifest
// stored meanwhile that shares a blob with an evicted image keeps it; an image pulled meanwhile is not
// evicted; a tag moved meanwhile keeps its new record.
func TestWhatChangesDuringARunIsLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during func(f *fixture, old, shared string)
		check  func(t *testing.T, f *fixture, p Plan, old, shared string)
	}{
		{"new manifest shares a blob", func(f *fixture, old, shared string) {
			f.image("new", time.Now(), shared)
		}, func(t *testing.T, f *fixture, p Plan, old, shared string) {
			if f.present(old) || !f.present(shared) {
				t.Fatalf("old image present %v, the blob a new image shares present %v; want the image gone and the blob kept", f.present(old), f.present(shared))
			}
		}},
		{"image pulled meanwhile", func(f *fixture, old, shared string) {
			f.st.Touch(old)
		}, func(t *testing.T, f *fixture, p Plan, old, shared string) {
			if !f.present(old) || !f.present(shared) || len(p.Evicted) != 0 {
				t.Fatalf("image in use: present %v, layer present %v, reported evicted %d; want it left alone", f.present(old), f.present(shared), len(p.Evicted))
			}
		}},
		{"tag moved meanwhile", func(f *fixture, old, shared string) {
			other := f.image("other", time.Now(), f.blob(1000))
			f.st.PutTag("up", "team/old", "v1", store.Tag{Digest: other})
		}, func(t *testing.T, f *fixture, p Plan, old, shared string) {
			if f.present(old) {
				t.Fatal("the old image was not evicted")
			}
			if tag, err := f.st.Tag("up", "team/old", "v1"); err != nil || tag.Digest == old {
				t.Fatalf("the moved tag: %+v %v; want it kept, pointing at its new image", tag, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			shared := f.blob(300_000)
			old := f.image("old", time.Now().Add(-time.Hour), shared)
			f.image("keep", time.Now().Add(-time.Minute), f.blob(300_000))
			e := New(f.st, 500_000, 0.9, slog.New(slog.DiscardHandler))
			p, err := e.run(false, 0, func(p Plan) error {
				if len(p.Evicted) != 1 || p.Evicted[0].Root != old {
					t.Fatalf("plan %+v, want the old image", p.Evicted)
				}
				tc.during(f, old, shared)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f, p, old, shared)
			assertNoHoles(t, f.st)
		})
	}
}
