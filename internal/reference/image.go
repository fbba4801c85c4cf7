package reference

import (
	"fmt"
	"strings"
)

// ResolveImage maps an image reference as people write it — registry.example.com/team/app:v1,
// 127.0.0.1:5001/team/app@sha256:…, docker.io/library/nginx, or nginx:1.27 for the default upstream — to
// an upstream, the repository on it and a tag or digest ("latest" when neither is given). A leading
// component with a dot or a colon, or "localhost", is a registry host and must be an upstream's name or
// alias; anything else is a repository on the default upstream.
func (r *Router) ResolveImage(ref string) (upstream, repository, tagOrDigest string, err error) {
	name, tagOrDigest := ref, "latest"
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		name = ref[:i]
		if tagOrDigest, err = ParseDigest(ref[i+1:]); err != nil {
			return "", "", "", err
		}
	} else if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tagOrDigest = ref[:i], ref[i+1:]
		if err := ValidateTag(tagOrDigest); err != nil {
			return "", "", "", err
		}
	}
	host, rest, ok := strings.Cut(name, "/")
	if ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		var known bool
		upstream, repository, known, err = r.OnHost(host, rest)
		if !known {
			return "", "", "", errorf(CodeNameUnknown, "registry %s in %s is not one of imagecache's upstreams; add it to upstreams (as a name or an alias) or pull through one that is", quote(host), quote(ref))
		}
	} else {
		upstream, repository, err = r.Route(name, "")
	}
	if err != nil {
		return "", "", "", fmt.Errorf("image %s: %w", ref, err)
	}
	return upstream, repository, tagOrDigest, nil
}
