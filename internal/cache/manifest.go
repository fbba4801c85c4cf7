package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/opencontainers/go-digest"

	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// Manifest is a manifest answer: the exact bytes the upstream served, so digests never change.
type Manifest struct {
	Digest    string
	MediaType string
	Body      []byte
	Result    Result
}

// Manifest answers a manifest request for repository:ref (a tag or a digest) on upstream up.
func (c *Cache) Manifest(ctx context.Context, up, repository, ref string) (*Manifest, error) {
	client, err := c.client(up)
	if err != nil {
		return nil, err
	}
	var m *Manifest
	if reference.IsDigest(ref) {
		m, err = c.manifestByDigest(ctx, client, repository, ref)
	} else {
		m, err = c.manifestByTag(ctx, client, repository, ref)
	}
	if err == nil {
		c.store.Touch(m.Digest) // a pull fetches its manifest: this is what keeps an image from eviction
	}
	return m, err
}

func (c *Cache) manifestByDigest(ctx context.Context, client *upstream.Client, repository, dgst string) (*Manifest, error) {
	what := fmt.Sprintf("manifest %s/%s@%s", client.Name(), repository, dgst)
	if m, err := c.cachedManifest(dgst); err == nil || !errors.Is(err, store.ErrNotFound) {
		if m != nil {
			m.Result = Hit
		}
		return m, err
	}
	rule := c.ruleFor(ctx, client.Name(), repository, "")
	if policy.DecideDigest(rule, false) == policy.Forbid {
		return nil, forbidden(what, client.Name())
	}
	v, err, _ := c.manifests.Do("digest\x00"+client.Name()+"\x00"+repository+"\x00"+dgst, func() (any, error) {
		return c.fetchManifest(context.WithoutCancel(ctx), client, repository, dgst, rule)
	})
	if err != nil {
		return nil, err
	}
	m := *v.(*Manifest)
	m.Result = Miss
	return &m, nil
}

func (c *Cache) manifestByTag(ctx context.Context, client *upstream.Client, repository, tag string) (*Manifest, error) {
	up := client.Name()
	rule := c.ruleFor(ctx, up, repository, tag)
	rec, cached, err := c.cachedTag(up, repository, tag)
	if err != nil {
		return nil, err
	}
	switch policy.DecideTag(rule, cached != nil, rec.CheckedAt, c.now()) {
	case policy.Serve:
		cached.Result = Hit
		return cached, nil
	case policy.Forbid:
		return nil, forbidden(fmt.Sprintf("manifest %s/%s:%s", up, repository, tag), up)
	}
	return c.askUpstream(ctx, client, repository, tag, rule, rec, cached)
}

// askUpstream fetches an uncached tag or revalidates a cached one. Concurrent requests for the same tag
// share that work (and its one upstream request).
func (c *Cache) askUpstream(ctx context.Context, client *upstream.Client, repository, tag string, rule policy.Rule, rec store.Tag, cached *Manifest) (*Manifest, error) {
	v, err, _ := c.manifests.Do("tag\x00"+client.Name()+"\x00"+repository+"\x00"+tag, func() (any, error) {
		ctx := context.WithoutCancel(ctx)
		if cached == nil {
			return c.fetchTag(ctx, client, repository, tag, rule)
		}
		return c.revalidateTag(ctx, client, repository, tag, rule, rec, cached)
	})
	if err != nil {
		return nil, err
	}
	m := *v.(*Manifest)
	return &m, nil
}

// cachedTag returns the tag record and its manifest when both are in the store.
func (c *Cache) cachedTag(up, repository, tag string) (store.Tag, *Manifest, error) {
	rec, err := c.store.Tag(up, repository, tag)
	if errors.Is(err, store.ErrNotFound) {
		return rec, nil, nil
	}
	if err != nil {
		return rec, nil, storeFailure(err)
	}
	m, err := c.cachedManifest(rec.Digest)
	if errors.Is(err, store.ErrNotFound) {
		return rec, nil, nil
	}
	return rec, m, err
}

func (c *Cache) cachedManifest(dgst string) (*Manifest, error) {
	body, obj, err := c.store.ReadAll(dgst)
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, storeFailure(err)
	}
	return &Manifest{Digest: dgst, MediaType: obj.MediaType, Body: body}, nil
}

func (c *Cache) fetchTag(ctx context.Context, client *upstream.Client, repository, tag string, rule policy.Rule) (*Manifest, error) {
	m, err := c.fetchManifest(ctx, client, repository, tag, rule)
	if err != nil {
		return nil, err
	}
	now := c.now().UTC()
	if err := c.store.PutTag(client.Name(), repository, tag, store.Tag{Digest: m.Digest, MediaType: m.MediaType,
		Size: int64(len(m.Body)), FetchedAt: now, CheckedAt: now}); err != nil {
		return nil, storeFailure(err)
	}
	m.Result = Miss
	return m, nil
}

// revalidateTag asks the upstream, with one HEAD, whether the tag still points where it did.
func (c *Cache) revalidateTag(ctx context.Context, client *upstream.Client, repository, tag string, rule policy.Rule, rec store.Tag, cached *Manifest) (*Manifest, error) {
	up := client.Name()
	stale := func(err error) (*Manifest, error) {
		if rule.StaleIfError && upstream.IsUnavailable(err) {
			c.log.WarnContext(ctx, "serving stale manifest", "upstream", up, "repository", repository, "tag", tag, "digest", cached.Digest, "error", err)
			m := *cached
			m.Result = Stale
			return &m, nil
		}
		return nil, upstreamFailure(fmt.Sprintf("check manifest %s/%s:%s", up, repository, tag), err)
	}
	desc, err := client.HeadManifest(ctx, repository, tag, rule.UpstreamTimeout)
	if upstream.StatusOf(err) == http.StatusNotFound {
		// The upstream says the tag is gone: forget it, so that it does not come back as a stale answer
		// when the upstream is down. The content stays, by digest, until eviction takes it.
		if derr := c.store.DeleteTagIf(store.TagRef{Upstream: up, Repository: repository, Tag: tag}, rec.Digest); derr != nil {
			return nil, storeFailure(derr)
		}
		c.log.InfoContext(ctx, "tag deleted upstream: forgotten", "upstream", up, "repository", repository, "tag", tag, "digest", rec.Digest)
	}
	if err != nil {
		return stale(err)
	}
	now := c.now().UTC()
	if desc.Digest == rec.Digest {
		rec.CheckedAt = now
		if err := c.store.PutTag(up, repository, tag, rec); err != nil {
			return nil, storeFailure(err)
		}
		m := *cached
		m.Result = Revalidated
		return &m, nil
	}
	// The tag moved (or the upstream sent no digest on HEAD): fetch the new manifest, by digest when known.
	ref, result := tag, Miss
	if desc.Digest != "" {
		ref = desc.Digest
		if have, err := c.cachedManifest(desc.Digest); err == nil {
			cached, result = have, Revalidated
		}
	}
	var m *Manifest
	if result == Revalidated {
		m = cached
	} else if m, err = c.fetchManifest(ctx, client, repository, ref, rule); err != nil {
		if upstream.IsUnavailable(err) {
			return stale(err)
		}
		return nil, err
	}
	rec = store.Tag{Digest: m.Digest, MediaType: m.MediaType, Size: int64(len(m.Body)), FetchedAt: now, CheckedAt: now}
	if err := c.store.PutTag(up, repository, tag, rec); err != nil {
		return nil, storeFailure(err)
	}
	out := *m
	out.Result = result
	return &out, nil
}

// fetchManifest GETs a manifest by tag or digest, verifies its digest and stores it.
func (c *Cache) fetchManifest(ctx context.Context, client *upstream.Client, repository, ref string, rule policy.Rule) (*Manifest, error) {
	what := "fetch manifest " + reference.Join(client.Name()+"/"+repository, ref)
	got, err := client.GetManifest(ctx, repository, ref, rule.UpstreamTimeout)
	if err != nil {
		if errors.Is(err, upstream.ErrManifestTooLarge) {
			return nil, badUpstreamContent(what, err)
		}
		return nil, upstreamFailure(what, err)
	}
	dgst, err := verifyManifest(ref, got)
	if err != nil {
		return nil, badUpstreamContent(what, err)
	}
	mt := got.MediaType
	if mt == "" || mt == "application/json" || mt == "text/plain" || mt == "application/octet-stream" {
		mt = declaredMediaType(got.Body, mt)
	}
	if err := c.store.Put(dgst, mt, got.Body); err != nil {
		if c.noSpace(err, int64(len(got.Body))) {
			// The client can still have what the upstream sent; it is just not kept this time.
			c.log.WarnContext(ctx, "storage full: serving manifest uncached", "digest", dgst, "error", err)
			return &Manifest{Digest: dgst, MediaType: mt, Body: got.Body}, nil
		}
		return nil, storeFailure(err)
	}
	if err := c.store.Link(client.Name(), repository, dgst); err != nil && !c.noSpace(err, 4096) {
		return nil, storeFailure(err)
	}
	c.log.InfoContext(ctx, "fetched manifest", "upstream", client.Name(), "repository", repository, "ref", ref, "digest", dgst, "mediaType", mt, "size", len(got.Body))
	return &Manifest{Digest: dgst, MediaType: mt, Body: got.Body}, nil
}

// verifyManifest checks the body against the digest that was asked for, or the one the upstream announced,
// and returns the digest it is stored under.
func verifyManifest(ref string, m upstream.Manifest) (string, error) {
	want := m.Digest
	if strings.Contains(ref, ":") {
		want = ref
	}
	if want == "" {
		return digest.FromBytes(m.Body).String(), nil
	}
	d, err := digest.Parse(want)
	if err != nil {
		return "", fmt.Errorf("upstream announced an invalid digest %q", want)
	}
	if got := d.Algorithm().FromBytes(m.Body); got != d {
		return "", fmt.Errorf("the body hashes to %s, not %s", got, d)
	}
	if m.Digest != "" && m.Digest != string(d) {
		return "", fmt.Errorf("upstream announced digest %s for content %s", m.Digest, d)
	}
	return d.String(), nil
}

// declaredMediaType reads the mediaType field of a manifest whose upstream sent no useful Content-Type.
func declaredMediaType(body []byte, fallback string) string {
	var m struct {
		MediaType string `json:"mediaType"`
	}
	if json.Unmarshal(body, &m) == nil && m.MediaType != "" {
		return m.MediaType
	}
	return fallback
}

func storeFailure(err error) error {
	return &Error{Status: http.StatusInternalServerError, Code: "UNKNOWN", Message: "local storage failed: " + err.Error(), Err: err}
}
