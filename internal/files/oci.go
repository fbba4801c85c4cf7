package files

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// titleAnnotation names a layer's file in an artifact pushed by oras and similar tools.
const titleAnnotation = "org.opencontainers.image.title"

// Images is the registry side of the cache: oci:// sources are read through it, so that their manifests
// and blobs are cached (and served offline) like any image's.
type Images interface {
	Manifest(ctx context.Context, up, repository, ref string) (*cache.Manifest, error)
	Blob(ctx context.Context, up, repository, digest string) (*cache.Blob, error)
}

func isOCI(rawURL string) bool { return strings.HasPrefix(rawURL, "oci://") }

func (m *Manager) ociRef(rawURL string) (up, repository, ref string, err error) {
	return ResolveOCI(m.router, rawURL)
}

// ResolveOCI splits oci://host/repository:tag (or @digest) and finds the upstream that serves host.
func ResolveOCI(router *reference.Router, rawURL string) (up, repository, ref string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", "", fmt.Errorf("source %q: %w", rawURL, err)
	}
	rest := strings.TrimPrefix(u.Path, "/")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		repository, ref = rest[:i], rest[i+1:]
		if _, err := reference.ParseDigest(ref); err != nil {
			return "", "", "", fmt.Errorf("source %q: %w", rawURL, err)
		}
	} else if i := strings.LastIndex(rest, ":"); i >= 0 {
		repository, ref = rest[:i], rest[i+1:]
		if err := reference.ValidateTag(ref); err != nil {
			return "", "", "", fmt.Errorf("source %q: %w", rawURL, err)
		}
	} else {
		return "", "", "", fmt.Errorf("source %q names no tag or digest: write oci://%s/%s:<tag> or @sha256:<digest>", rawURL, u.Host, rest)
	}
	up, repository, known, err := router.OnHost(u.Host, repository)
	if !known {
		return "", "", "", fmt.Errorf("source %q: %s is not a configured upstream (configured: %s); add it to upstreams, as a name or an alias", rawURL, u.Host, strings.Join(router.Names(), ", "))
	}
	if err != nil {
		return "", "", "", fmt.Errorf("source %q: %w", rawURL, err)
	}
	return up, repository, ref, nil
}

// attemptOCI publishes the titled layers of an artifact (for an index, of the manifest for the set's
// architecture).
func (m *Manager) attemptOCI(ctx context.Context, s *set, cur *store.SetVersion) error {
	if m.images == nil {
		return errors.New("oci:// sources need the registry side of the cache, which is not running")
	}
	up, repository, ref, err := m.ociRef(s.cfg.URL)
	if err != nil {
		return err
	}
	if c := s.cfg.PullCredentials; c != nil {
		auth := authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password, RegistryToken: c.Token})
		// The id keeps transports (and their tokens) for different credentials apart; it never leaves memory.
		id := fmt.Sprintf("set:%x", sha256.Sum256([]byte(c.Username+"\x00"+c.Password+"\x00"+c.Token)))
		ctx = upstream.WithAuth(ctx, auth, id)
	}
	man, err := m.images.Manifest(ctx, up, repository, ref)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", s.cfg.URL, err)
	}
	stale := man.Result == cache.Stale
	if isIndex(man.MediaType) {
		child, err := pickArchitecture(man.Body, s.cfg.Architecture)
		if err != nil {
			return fmt.Errorf("%s: %w", s.cfg.URL, err)
		}
		if man, err = m.images.Manifest(ctx, up, repository, child); err != nil {
			return fmt.Errorf("fetch %s for %s: %w", s.cfg.URL, s.cfg.Architecture, err)
		}
	}
	src := store.SetSource{URL: s.cfg.URL, Digest: man.Digest, Recipe: s.recipe}
	if cur != nil && cur.Source.Digest == man.Digest && cur.Source.Recipe == s.recipe {
		if stale {
			return fmt.Errorf("%s: the upstream could not be reached; serving version %d", s.cfg.URL, cur.Version)
		}
		return m.confirm(s, cur)
	}
	files, err := m.artifactFiles(ctx, up, repository, man, s.cfg.Extract)
	if err != nil {
		return fmt.Errorf("%s: %w", s.cfg.URL, err)
	}
	if err := m.publish(s, cur, src, files); err != nil {
		return err
	}
	if stale {
		return fmt.Errorf("%s: the upstream could not be reached; published the last known version", s.cfg.URL)
	}
	return nil
}

// artifactFiles downloads (through the cache) every layer to publish and names it by its title, renamed
// by the rules when there are any.
func (m *Manager) artifactFiles(ctx context.Context, up, repository string, man *cache.Manifest, rules []Rule) ([]Published, error) {
	parsed, err := v1.ParseManifest(strings.NewReader(string(man.Body)))
	if err != nil {
		return nil, fmt.Errorf("manifest %s is not an image manifest: %w", man.Digest, err)
	}
	var titled []v1.Descriptor
	for _, l := range parsed.Layers {
		if l.Annotations[titleAnnotation] != "" {
			titled = append(titled, l)
		}
	}
	if len(titled) == 0 {
		return nil, fmt.Errorf("manifest %s has no layer with an %s annotation, so no file names", man.Digest, titleAnnotation)
	}
	var out []Published
	for _, l := range titled {
		name, ok := publishedName(l.Annotations[titleAnnotation], rules)
		if !ok {
			continue
		}
		if err := m.ensureBlob(ctx, up, repository, l.Digest.String()); err != nil {
			return nil, err
		}
		out = append(out, Published{Name: name, Digest: l.Digest.String(), Size: l.Size})
	}
	for _, r := range rules {
		if !slices.ContainsFunc(out, func(p Published) bool { return p.Name == r.To }) {
			return nil, fmt.Errorf("extract rule from=%q matched no layer title", r.From)
		}
	}
	return out, nil
}

// publishedName applies the rules to a layer title; with no rules every title is published as is.
func publishedName(title string, rules []Rule) (string, bool) {
	if len(rules) == 0 {
		return title, validFileName(title)
	}
	for _, r := range rules {
		if policy.MatchGlob(r.From, title) {
			return r.To, true
		}
	}
	return "", false
}

func validFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}

// ensureBlob makes sure a layer is in the store, reading it through the cache (which verifies it).
func (m *Manager) ensureBlob(ctx context.Context, up, repository, digest string) error {
	b, err := m.images.Blob(ctx, up, repository, digest)
	if err != nil {
		return fmt.Errorf("fetch layer %s: %w", digest, err)
	}
	defer b.Close()
	if b.Result != cache.Hit {
		if _, err := io.Copy(io.Discard, b.Content); err != nil {
			return fmt.Errorf("fetch layer %s: %w", digest, err)
		}
		if err := b.Err(); err != nil {
			return fmt.Errorf("fetch layer %s: %w", digest, err)
		}
	}
	if _, err := m.store.Stat(digest); err != nil {
		return fmt.Errorf("layer %s is not in the store after fetching it: %w", digest, err)
	}
	return nil
}

func isIndex(mediaType string) bool {
	mt := types.MediaType(mediaType)
	return mt == types.OCIImageIndex || mt == types.DockerManifestList
}

// pickArchitecture returns the digest of the index entry for arch (normalized, so x86_64 finds amd64).
func pickArchitecture(body []byte, arch string) (string, error) {
	idx, err := v1.ParseIndexManifest(strings.NewReader(string(body)))
	if err != nil {
		return "", fmt.Errorf("parse index: %w", err)
	}
	want := config.NormalizeArchitecture(arch)
	var seen []string
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			continue
		}
		got := config.NormalizeArchitecture(d.Platform.Architecture)
		if got == want && (d.Platform.OS == "" || d.Platform.OS == "linux") {
			return d.Digest.String(), nil
		}
		seen = append(seen, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	return "", fmt.Errorf("the index has no manifest for architecture %s (it has: %s)", want, strings.Join(seen, ", "))
}
