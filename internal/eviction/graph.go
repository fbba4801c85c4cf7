// Package eviction keeps the store under its size limit. The unit it evicts is an image: a root manifest
// (or index) with the child manifests and blobs that no other retained image uses, least recently used
// first; file-set versions and stray blobs are units too. Pinned content is never evicted, and a manifest
// is always removed before the blobs of its graph, so that what the index calls cached stays pullable.
package eviction

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/store"
)

// Unit is one thing eviction can remove.
type Unit struct {
	Kind    string    `json:"kind"`    // image, set or blob
	Name    string    `json:"name"`    // tags or set name, for people
	Root    string    `json:"root"`    // root digest, or files/<set>
	LastUse time.Time `json:"lastUse"` //
	Bytes   int64     `json:"bytes"`   // what removing it frees (objects no other unit uses)
	Pinned  bool      `json:"pinned"`  //
	Objects []string  `json:"objects"` // what removing it deletes, manifests before blobs
	tags    []store.TagRef
	set     string
	closure []string // every object of its graph, shared or not, root first
}

// graph is a snapshot of the store, as eviction sees it.
type graph struct {
	objects  map[string]store.Object
	children map[string][]string
	units    []*Unit
	refcount map[string]int // how many units' closures hold each object
	pinned   map[string]bool
}

// manifestRefs are the fields of any manifest kind that name other content.
type manifestRefs struct {
	Manifests []struct{ Digest string } `json:"manifests"`
	Config    struct{ Digest string }   `json:"config"`
	Layers    []struct{ Digest string } `json:"layers"`
	Blobs     []struct{ Digest string } `json:"blobs"` // the short-lived OCI artifact manifest
}

func (m manifestRefs) children() []string {
	var out []string
	for _, d := range m.Manifests {
		out = append(out, d.Digest)
	}
	if m.Config.Digest != "" {
		out = append(out, m.Config.Digest)
	}
	for _, d := range m.Layers {
		out = append(out, d.Digest)
	}
	for _, d := range m.Blobs {
		out = append(out, d.Digest)
	}
	return out
}

// snapshot reads the store and builds the units.
func snapshot(st *store.Store) (*graph, error) {
	g := &graph{objects: map[string]store.Object{}, refcount: map[string]int{}, pinned: map[string]bool{}}
	if err := st.ForEachObject(func(o store.Object) error { g.objects[o.Digest] = o; return nil }); err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	children := map[string][]string{}
	g.children = children
	isChild := map[string]bool{}
	for d, o := range g.objects {
		if o.MediaType == "" {
			continue
		}
		body, _, err := st.ReadAll(d)
		if err != nil {
			continue // gone meanwhile, or corrupt: verify deals with it
		}
		var refs manifestRefs
		if json.Unmarshal(body, &refs) != nil {
			continue
		}
		for _, c := range refs.children() {
			if _, ok := g.objects[c]; ok {
				children[d] = append(children[d], c)
				isChild[c] = true
			}
		}
	}
	tags := map[string][]store.TagRef{}
	if err := st.ForEachTag(func(r store.TagRef, t store.Tag) error {
		if _, ok := g.objects[t.Digest]; ok {
			tags[t.Digest] = append(tags[t.Digest], r)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read tags: %w", err)
	}
	atimes, err := st.AccessTimes()
	if err != nil {
		return nil, fmt.Errorf("read access times: %w", err)
	}
	reached := map[string]bool{}
	// Images: manifests nothing else refers to, and tagged manifests (a tagged platform manifest of an
	// index is an image of its own too; the refcounts keep what both use).
	for d, o := range g.objects {
		if o.MediaType == "" || (isChild[d] && len(tags[d]) == 0) {
			continue
		}
		u := &Unit{Kind: "image", Root: d, tags: tags[d], Name: tagNames(tags[d], d)}
		u.closure = closure(d, children)
		g.add(u, atimes, reached)
	}
	if err := g.addSets(st, atimes, reached); err != nil {
		return nil, err
	}
	// Stray objects: fetched by digest without a manifest, or left by an interrupted pull.
	for d := range g.objects {
		if !reached[d] {
			g.add(&Unit{Kind: "blob", Root: d, Name: d, closure: []string{d}}, atimes, reached)
		}
	}
	return g, nil
}

// add counts a unit's references. An image was last used when its root manifest was (every pull fetches
// it; a shared base layer is touched by every image, so it says nothing about this one). Sets and stray
// blobs were last used when any of their files was.
func (g *graph) add(u *Unit, atimes map[string]time.Time, reached map[string]bool) {
	used := func(d string) time.Time {
		if t, ok := atimes[d]; ok {
			return t
		}
		return g.objects[d].StoredAt
	}
	for _, d := range u.closure {
		g.refcount[d]++
		reached[d] = true
		if u.Kind != "image" && used(d).After(u.LastUse) {
			u.LastUse = used(d)
		}
	}
	if u.Kind == "image" {
		u.LastUse = used(u.Root)
	}
	g.units = append(g.units, u)
}

func (g *graph) addSets(st *store.Store, atimes map[string]time.Time, reached map[string]bool) error {
	names, err := st.Sets()
	if err != nil {
		return fmt.Errorf("read file sets: %w", err)
	}
	for _, name := range names {
		v, err := st.Set(name)
		if err != nil {
			continue
		}
		u := &Unit{Kind: "set", Root: "files/" + name, Name: "files/" + name, set: name}
		for _, f := range v.Files {
			if _, ok := g.objects[f.Digest]; ok && !slices.Contains(u.closure, f.Digest) {
				u.closure = append(u.closure, f.Digest)
			}
		}
		slices.Sort(u.closure)
		g.add(u, atimes, reached)
	}
	return nil
}

// closure lists root and everything below it, parents before children.
func closure(root string, children map[string][]string) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(string)
	walk = func(d string) {
		if seen[d] {
			return
		}
		seen[d] = true
		out = append(out, d)
		for _, c := range children[d] {
			walk(c)
		}
	}
	walk(root)
	return out
}

func tagNames(refs []store.TagRef, digest string) string {
	if len(refs) == 0 {
		return digest
	}
	names := make([]string, 0, len(refs))
	for _, r := range refs {
		names = append(names, r.Upstream+"/"+r.Repository+":"+r.Tag)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
