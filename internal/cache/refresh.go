package cache

import (
	"context"

	"imagecache.io/imagecache/internal/policy"
)

// Refresh checks repository:tag on upstream up now, as a request under Always with no revalidateAfter and
// no stale fallback would: one upstream HEAD when the tag is cached (a GET by digest only if it moved), a
// GET when it is not. A failed check is returned as an error and changes nothing stored. It shares the
// work with client requests for the same tag that are in flight.
func (c *Cache) Refresh(ctx context.Context, up, repository, tag string) (*Manifest, error) {
	client, err := c.client(up)
	if err != nil {
		return nil, err
	}
	rule := c.ruleFor(ctx, up, repository, tag)
	rule.Pull, rule.RevalidateAfter, rule.StaleIfError = policy.Always, 0, false
	rec, cached, err := c.cachedTag(up, repository, tag)
	if err != nil {
		return nil, err
	}
	return c.askUpstream(ctx, client, repository, tag, rule, rec, cached)
}
