package eviction

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"imagecache.io/imagecache/internal/store"
)

// ErrNotCached is returned by Purge when the reference names nothing stored.
var ErrNotCached = errors.New("not cached")

// PinnedError is returned by Purge when pins keep the image; nothing was removed.
type PinnedError struct {
	Ref  string
	Pins []store.Pin
}

func (e *PinnedError) Error() string {
	var by []string
	for _, p := range e.Pins {
		by = append(by, fmt.Sprintf("%s (pin %s; %s)", p.Owner, p.Reference, unpinAdvice(p.Owner)))
	}
	return fmt.Sprintf("%s is pinned by %s; nothing was removed", e.Ref, strings.Join(by, ", "))
}

func unpinAdvice(owner string) string {
	if owner == "config" {
		return "remove it from pins: in the config and restart"
	}
	if kind, key, ok := strings.Cut(strings.TrimPrefix(owner, "k8s/"), "/"); ok {
		return fmt.Sprintf("remove it from %s %s, or delete that resource", kind, key)
	}
	return "release that pin first"
}

// PartOfError is returned by Purge for a manifest that is only part of other images (a platform manifest
// of an index): purging it would leave them incomplete, so nothing was removed.
type PartOfError struct {
	Ref     string
	Parents []string // the images that hold it, by name
}

func (e *PartOfError) Error() string {
	return fmt.Sprintf("%s is part of %s, not an image of its own; purge that instead (nothing was removed)", e.Ref, strings.Join(e.Parents, "; "))
}

// Purged is what Purge removed.
type Purged struct {
	Ref         string   `json:"ref"`
	Digest      string   `json:"digest"`
	TagsRemoved []string `json:"tagsRemoved"`
	Objects     []string `json:"objects"` // removed, manifests before the blobs below them
	Bytes       int64    `json:"bytes"`
	// StillTagged are other tags of the same image: only the named tag went, the content stays for them.
	StillTagged []string `json:"stillTagged,omitempty"`
}

// Purge removes an image now, whatever its last use: upstream/repository:tag drops that tag and, unless
// another tag still points at the image, the image; @digest drops the image and every tag pointing at it.
// Objects another retained image (or a pin, or a file set) uses stay. Pinned images are refused. The order
// of removal is eviction's: records first, then manifests before blobs, so a crash half-way leaves nothing
// that claims to be pullable and is not.
func (e *Evictor) Purge(upstream, repository, tagOrDigest string) (Purged, error) {
	e.running.Lock()
	defer e.running.Unlock()
	p := Purged{Ref: refString(upstream, repository, tagOrDigest), TagsRemoved: []string{}, Objects: []string{}}
	g, err := snapshot(e.st)
	if err != nil {
		return p, err
	}
	root, drop, err := g.purgeRoot(e.st, upstream, repository, tagOrDigest)
	if err != nil {
		return p, err
	}
	p.Digest = root
	if root == "" { // a tag whose manifest is gone already: only the record is left
		return p, e.dropTags(&p, drop)
	}
	owners, err := g.pinOwners(e.st)
	if err != nil {
		return p, err
	}
	if len(owners[root]) > 0 {
		return p, &PinnedError{Ref: p.Ref, Pins: owners[root]}
	}
	i := slices.IndexFunc(g.units, func(u *Unit) bool { return u.Kind == "image" && u.Root == root })
	if i < 0 {
		return p, &PartOfError{Ref: p.Ref, Parents: g.holders(root)}
	}
	u := g.units[i]
	for _, t := range u.tags {
		if !slices.Contains(drop, t) {
			p.StillTagged = append(p.StillTagged, t.Upstream+"/"+t.Repository+":"+t.Tag)
		}
	}
	if err := e.dropTags(&p, drop); err != nil || len(p.StillTagged) > 0 {
		return p, err
	}
	if err := g.pin(e.st); err != nil {
		return p, err
	}
	for _, d := range u.closure {
		g.refcount[d]--
		if g.refcount[d] > 0 || g.pinned[d] {
			continue
		}
		if err := e.st.Remove(d); err != nil {
			return p, fmt.Errorf("purge %s: %w", p.Ref, err)
		}
		if err := e.st.Unlink(d); err != nil {
			return p, fmt.Errorf("purge %s: %w", p.Ref, err)
		}
		p.Objects = append(p.Objects, d)
		p.Bytes += g.objects[d].Size
	}
	e.log.Info("purged", "ref", p.Ref, "digest", root, "objects", len(p.Objects), "freedBytes", p.Bytes)
	return p, nil
}

// purgeRoot finds the stored manifest a reference names and the tag records to drop with it.
func (g *graph) purgeRoot(st *store.Store, upstream, repository, tagOrDigest string) (string, []store.TagRef, error) {
	if !strings.Contains(tagOrDigest, ":") {
		ref := store.TagRef{Upstream: upstream, Repository: repository, Tag: tagOrDigest}
		t, err := st.Tag(upstream, repository, tagOrDigest)
		if errors.Is(err, store.ErrNotFound) {
			return "", nil, fmt.Errorf("%s: %w", refString(upstream, repository, tagOrDigest), ErrNotCached)
		}
		if err != nil {
			return "", nil, err
		}
		if _, ok := g.objects[t.Digest]; !ok {
			return "", []store.TagRef{ref}, nil
		}
		return t.Digest, []store.TagRef{ref}, nil
	}
	root := tagOrDigest
	var drop []store.TagRef
	err := st.ForEachTag(func(r store.TagRef, t store.Tag) error {
		if t.Digest == root {
			drop = append(drop, r)
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	inRepo := slices.ContainsFunc(drop, func(r store.TagRef) bool { return r.Upstream == upstream && r.Repository == repository })
	if _, ok := g.objects[root]; !ok || g.objects[root].MediaType == "" || !(inRepo || st.Linked(upstream, repository, root)) {
		return "", nil, fmt.Errorf("%s: %w", refString(upstream, repository, tagOrDigest), ErrNotCached)
	}
	return root, drop, nil
}

// holders names the image units whose graph holds d.
func (g *graph) holders(d string) []string {
	var out []string
	for _, u := range g.units {
		if u.Kind == "image" && slices.Contains(u.closure, d) {
			out = append(out, u.Name)
		}
	}
	return out
}

func (e *Evictor) dropTags(p *Purged, tags []store.TagRef) error {
	for _, t := range tags {
		if err := e.st.DeleteTag(t); err != nil {
			return fmt.Errorf("purge %s: %w", p.Ref, err)
		}
		p.TagsRemoved = append(p.TagsRemoved, t.Upstream+"/"+t.Repository+":"+t.Tag)
	}
	return nil
}

func refString(upstream, repository, tagOrDigest string) string {
	if strings.Contains(tagOrDigest, ":") {
		return upstream + "/" + repository + "@" + tagOrDigest
	}
	return upstream + "/" + repository + ":" + tagOrDigest
}
