package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"imagecache.io/imagecache/internal/policy"
)

type pullKey struct{}

// WithPull makes the requests made with ctx use pull instead of the configured policy (an ImageCache
// entry's pullPolicy applies to imagecache's own refreshes of that image).
func WithPull(ctx context.Context, pull policy.Pull) context.Context {
	return context.WithValue(ctx, pullKey{}, pull)
}

func (c *Cache) ruleFor(ctx context.Context, up, repository, tag string) policy.Rule {
	rule := c.rules.For(up, repository, tag)
	if pull, ok := ctx.Value(pullKey{}).(policy.Pull); ok && pull != "" {
		rule.Pull = pull
	}
	return rule
}

// Prefetched is an image brought into the cache as a client pull would.
type Prefetched struct {
	Digest string // of the manifest or index ref resolved to
	Size   int64  // bytes of every manifest and blob fetched for it
	Stale  bool   // the tag could not be checked; the last known good is what is cached
}

// Prefetch pulls repository:ref completely through the cache: the manifest (or index and the manifests of
// the wanted platforms, "os/arch[/variant]"; all when none are given), their configs and layers.
func (c *Cache) Prefetch(ctx context.Context, up, repository, ref string, platforms []string) (Prefetched, error) {
	top, err := c.Manifest(ctx, up, repository, ref)
	if err != nil {
		return Prefetched{}, err
	}
	p := Prefetched{Digest: top.Digest, Size: int64(len(top.Body)), Stale: top.Result == Stale}
	var refs manifestRefs
	if err := json.Unmarshal(top.Body, &refs); err != nil {
		return p, fmt.Errorf("manifest %s: %w", top.Digest, err)
	}
	manifests := []*Manifest{top}
	if len(refs.Manifests) > 0 {
		manifests = nil
		matched := 0
		for _, child := range refs.Manifests {
			if !wantPlatform(child.Platform, platforms) {
				continue
			}
			matched++
			m, err := c.Manifest(ctx, up, repository, child.Digest)
			if err != nil {
				return p, fmt.Errorf("platform manifest %s: %w", child.Digest, err)
			}
			p.Size += int64(len(m.Body))
			manifests = append(manifests, m)
		}
		if matched == 0 {
			return p, fmt.Errorf("index %s has no manifest for platforms %s", top.Digest, strings.Join(platforms, ", "))
		}
	}
	for _, m := range manifests {
		var img manifestRefs
		if err := json.Unmarshal(m.Body, &img); err != nil {
			return p, fmt.Errorf("manifest %s: %w", m.Digest, err)
		}
		for _, d := range img.blobs() {
			n, err := c.fetchWhole(ctx, up, repository, d)
			if err != nil {
				return p, err
			}
			p.Size += n
		}
	}
	return p, nil
}

// fetchWhole makes sure a blob is stored, reading it through the cache as a client would.
func (c *Cache) fetchWhole(ctx context.Context, up, repository, dgst string) (int64, error) {
	b, err := c.Blob(ctx, up, repository, dgst)
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", dgst, err)
	}
	defer b.Close()
	content := progressOf(ctx, b)
	if b.Result == Hit {
		return b.Size, nil
	}
	if _, err := io.Copy(io.Discard, content); err != nil {
		return 0, fmt.Errorf("blob %s: %w", dgst, err)
	}
	if err := b.Err(); err != nil {
		return 0, fmt.Errorf("blob %s: %w", dgst, err)
	}
	return b.Size, nil
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
}

type descriptor struct {
	Digest   string    `json:"digest"`
	Platform *platform `json:"platform"`
}

// manifestRefs are the fields of a manifest or index that name other content.
type manifestRefs struct {
	Manifests []descriptor `json:"manifests"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

func (m manifestRefs) blobs() []string {
	var out []string
	if m.Config.Digest != "" {
		out = append(out, m.Config.Digest)
	}
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// wantPlatform: no filter takes every entry; "linux/arm64" matches any variant, "linux/arm/v7" only v7.
func wantPlatform(p *platform, want []string) bool {
	if len(want) == 0 {
		return true
	}
	if p == nil {
		return false
	}
	return slices.ContainsFunc(want, func(w string) bool {
		parts := strings.Split(w, "/")
		if len(parts) < 2 || parts[0] != p.OS || parts[1] != p.Architecture {
			return false
		}
		return len(parts) < 3 || parts[2] == p.Variant
	})
}
