package cache

import (
	"context"
	"errors"
	"fmt"
	"io"

	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// maxDocumentSize bounds a tag list or referrers answer kept in the index.
const maxDocumentSize = 16 << 20

// passedHeaders are the upstream headers of a document that mean something to the client.
var passedHeaders = []string{"Link", "OCI-Filters-Applied"}

// Document is a tag list or referrers answer.
type Document struct {
	Body        []byte
	ContentType string
	Header      map[string]string
	Result      Result
}

// Tags answers GET /v2/<name>/tags/list (rawQuery carries n and last).
func (c *Cache) Tags(ctx context.Context, up, repository, rawQuery string) (*Document, error) {
	return c.document(ctx, up, repository, "/tags/list", rawQuery, "application/json",
		fmt.Sprintf("tag list of %s/%s", up, repository), "tags", up, repository, rawQuery)
}

// Referrers answers GET /v2/<name>/referrers/<digest> (rawQuery may carry artifactType).
func (c *Cache) Referrers(ctx context.Context, up, repository, dgst, rawQuery string) (*Document, error) {
	return c.document(ctx, up, repository, "/referrers/"+dgst, rawQuery, "application/vnd.oci.image.index.v1+json",
		fmt.Sprintf("referrers of %s/%s@%s", up, repository, dgst), "referrers", up, repository, dgst, rawQuery)
}

// document applies the tag policy to a small upstream answer: fetched when the policy wants a check (there
// is no HEAD that would say it changed), the last good copy served when the upstream fails.
func (c *Cache) document(ctx context.Context, up, repository, suffix, rawQuery, accept, what string, key ...string) (*Document, error) {
	client, err := c.client(up)
	if err != nil {
		return nil, err
	}
	rule := c.ruleFor(ctx, up, repository, "")
	cached, err := c.store.Doc(key...)
	have := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, storeFailure(err)
	}
	switch policy.DecideTag(rule, have, cached.FetchedAt, c.now()) {
	case policy.Serve:
		return fromDoc(cached, Hit), nil
	case policy.Forbid:
		return nil, forbidden(what, up)
	}
	doc, err := c.fetchDocument(ctx, client, repository, suffix, rawQuery, accept, rule)
	if err != nil {
		if have && rule.StaleIfError && upstream.IsUnavailable(err) {
			c.log.WarnContext(ctx, "serving stale document", "what", what, "error", err)
			return fromDoc(cached, Stale), nil
		}
		return nil, upstreamFailure("fetch "+what, err)
	}
	if err := c.store.PutDoc(doc, key...); err != nil {
		return nil, storeFailure(err)
	}
	return fromDoc(doc, Miss), nil
}

func (c *Cache) fetchDocument(ctx context.Context, client *upstream.Client, repository, suffix, rawQuery, accept string, rule policy.Rule) (store.Doc, error) {
	resp, err := client.Get(ctx, repository, suffix, rawQuery, accept, rule.UpstreamTimeout)
	if err != nil {
		return store.Doc{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentSize+1))
	if err == nil && len(body) > maxDocumentSize {
		err = fmt.Errorf("answer is over %d bytes", maxDocumentSize)
	}
	if err == nil && resp.Size >= 0 && int64(len(body)) != resp.Size {
		err = fmt.Errorf("got %d of %d bytes", len(body), resp.Size)
	}
	if err != nil {
		return store.Doc{}, &upstream.Error{Upstream: client.Name(), Op: "GET " + repository + suffix, Err: err}
	}
	doc := store.Doc{Body: body, ContentType: resp.Header.Get("Content-Type"), FetchedAt: c.now().UTC()}
	for _, h := range passedHeaders {
		if v := resp.Header.Get(h); v != "" {
			if doc.Header == nil {
				doc.Header = map[string]string{}
			}
			doc.Header[h] = v
		}
	}
	return doc, nil
}

func fromDoc(d store.Doc, r Result) *Document {
	return &Document{Body: d.Body, ContentType: d.ContentType, Header: d.Header, Result: r}
}
