package faultproxy

import "strings"

// Kinds of request, derived from the path. Tests count and filter faults by these rather than by raw paths
// because repository names and digests differ from test to test.
const (
	KindPing      = "ping"
	KindManifest  = "manifest"
	KindBlob      = "blob"
	KindTags      = "tags"
	KindReferrers = "referrers"
	KindToken     = "token"
	KindOther     = "other"
)

// KindOf classifies a request path. Repository names may contain "manifests" or "blobs" as components, so
// the kind is taken from the component right before the reference, scanning from the end.
func KindOf(path string) string {
	if path == "/v2" || path == "/v2/" {
		return KindPing
	}
	if !strings.HasPrefix(path, "/v2/") {
		if strings.HasSuffix(path, "/token") || path == "/token" || strings.HasSuffix(path, "/auth") {
			return KindToken
		}
		return KindOther
	}
	parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(path, "/v2/"), "/"), "/")
	n := len(parts)
	switch {
	case n >= 3 && parts[n-2] == "tags" && parts[n-1] == "list":
		return KindTags
	case n >= 3 && parts[n-2] == "manifests":
		return KindManifest
	case n >= 3 && parts[n-2] == "referrers":
		return KindReferrers
	case n >= 3 && parts[n-2] == "blobs":
		return KindBlob
	}
	// Uploads (/blobs/uploads/ and /blobs/uploads/<uuid>) write blobs: count them as blob requests.
	for i := n - 1; i >= 1; i-- {
		if parts[i] == "uploads" && parts[i-1] == "blobs" {
			return KindBlob
		}
	}
	return KindOther
}
