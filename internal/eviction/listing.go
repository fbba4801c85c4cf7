package eviction

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/store"
)

// Image is one image unit as the admin API lists it: the same graph and reference counts eviction uses.
type Image struct {
	Digest       string         // the root manifest or index
	MediaType    string         //
	Tags         []store.TagRef // tags that point at it
	Repositories []string       // upstream/repository it was pulled under, sorted
	Size         int64          // every stored object of its graph, shared or not
	UniqueSize   int64          // objects no other unit uses: about what purging it frees
	Objects      int            // stored objects in its graph
	Missing      int            // blobs (or, for an index with no platform stored, manifests) named but not stored
	LastUse      time.Time      //
	Uses         int64          // how many times its root manifest (or index) was served
	PinnedBy     []store.Pin    // the pins that keep it; empty when it is not pinned
}

// Images lists the image units of the store (not file sets or stray blobs), most recently used first. It
// reads the store without changing it and may run alongside serving and eviction.
func (e *Evictor) Images() ([]Image, error) {
	g, err := snapshot(e.st)
	if err != nil {
		return nil, err
	}
	owners, err := g.pinOwners(e.st)
	if err != nil {
		return nil, err
	}
	repos, err := linkedRepositories(e.st)
	if err != nil {
		return nil, err
	}
	uses, err := e.st.Uses()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, u := range g.units {
		if u.Kind != "image" {
			continue
		}
		img := Image{Digest: u.Root, MediaType: g.objects[u.Root].MediaType, Tags: u.tags, LastUse: u.LastUse, Uses: uses[u.Root],
			Objects: len(u.closure), PinnedBy: owners[u.Root], Repositories: repos[u.Root]}
		for _, t := range u.tags {
			if name := t.Upstream + "/" + t.Repository; !slices.Contains(img.Repositories, name) {
				img.Repositories = append(img.Repositories, name)
			}
		}
		slices.Sort(img.Repositories)
		for _, d := range u.closure {
			img.Size += g.objects[d].Size
			if g.refcount[d] == 1 {
				img.UniqueSize += g.objects[d].Size
			}
		}
		img.Missing = g.missing(e.st, u.closure)
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int {
		if c := b.LastUse.Compare(a.LastUse); c != 0 {
			return c
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out, nil
}

// PinnedBytes adds up the stored bytes that pins keep, as of now (PinStatus is as of the last run).
func (e *Evictor) PinnedBytes() (int64, error) {
	g, err := snapshot(e.st)
	if err != nil {
		return 0, err
	}
	if err := g.pin(e.st); err != nil {
		return 0, err
	}
	var n int64
	for d := range g.pinned {
		n += g.objects[d].Size
	}
	return n, nil
}

// pinOwners maps every object a pinned image reference keeps to the pins that keep it.
func (g *graph) pinOwners(st *store.Store) (map[string][]store.Pin, error) {
	pins, err := st.Pins()
	if err != nil {
		return nil, err
	}
	owners := map[string][]store.Pin{}
	for _, p := range pins {
		for _, d := range g.resolve(st, p.Reference) {
			for _, c := range closure(d, g.children) {
				owners[c] = append(owners[c], p)
			}
		}
	}
	return owners, nil
}

// missing counts what the stored manifests of a closure name but the store lacks: config and layers of
// image manifests, and the platform manifests of an index of which none is stored. A platform left out on
// purpose (a pull for some platforms only) does not count.
func (g *graph) missing(st *store.Store, closure []string) int {
	n := 0
	for _, d := range closure {
		if g.objects[d].MediaType == "" {
			continue
		}
		body, _, err := st.ReadAll(d)
		if err != nil {
			n++
			continue
		}
		var refs manifestRefs
		if json.Unmarshal(body, &refs) != nil {
			continue
		}
		if len(refs.Manifests) > 0 {
			if len(g.children[d]) == 0 {
				n += len(refs.Manifests)
			}
			continue
		}
		for _, c := range refs.children() {
			if _, ok := g.objects[c]; !ok {
				n++
			}
		}
	}
	return n
}

// linkedRepositories maps each digest to the upstream/repository names it was pulled under.
func linkedRepositories(st *store.Store) (map[string][]string, error) {
	out := map[string][]string{}
	err := st.ForEachLink(func(up, repo, d string) error {
		out[d] = append(out[d], up+"/"+repo)
		return nil
	})
	return out, err
}
