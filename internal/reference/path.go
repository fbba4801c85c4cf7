package reference

import "strings"

// Kind is the endpoint a request path addresses.
type Kind int

// Kinds start at 1 so that a zero Request is never mistaken for a manifest
// request.
const (
	Manifest   Kind = iota + 1 // <name>/manifests/<tag|digest>
	Blob                       // <name>/blobs/<digest>
	TagsList                   // <name>/tags/list
	Referrers                  // <name>/referrers/<digest>
	BlobUpload                 // <name>/blobs/uploads/...: a push, always unsupported
)

func (k Kind) String() string {
	switch k {
	case Manifest:
		return "manifest"
	case Blob:
		return "blob"
	case TagsList:
		return "tags list"
	case Referrers:
		return "referrers"
	case BlobUpload:
		return "blob upload"
	}
	return "unknown"
}

// Request is a parsed /v2/ path.
type Request struct {
	Name string // client-facing repository name, valid per ValidateName
	Kind Kind
	// Reference is a tag or digest (Manifest), a digest (Blob, Referrers),
	// the raw upload id, possibly "" (BlobUpload), or "" (TagsList).
	Reference string
}

// ParsePath parses the part of the URL path after "/v2/", as already
// unescaped by net/http. Forms:
//
//	<name>/manifests/<tag|digest>
//	<name>/blobs/<digest>
//	<name>/blobs/uploads/ and <name>/blobs/uploads/<id>
//	<name>/tags/list
//	<name>/referrers/<digest>
//
// A name may itself contain a "manifests", "blobs", "tags" or "referrers"
// component, so the path is split at the last such component that has
// something after it, as the distribution-spec does.
//
// A path that matches no form is NOT_FOUND (the HTTP layer's 404), not a
// NAME_INVALID: an unknown endpoint is not the client's naming mistake.
func ParsePath(p string) (Request, error) {
	// These survive unescaping only if the client escaped them on purpose
	// ("%2F", a double-escaped "%252F", "\", NUL); none is valid anywhere in a
	// name, tag or digest, and letting them through invites path tricks in
	// whatever later joins the name into a URL or a file path.
	if i := strings.IndexAny(p, "%\\\x00"); i >= 0 {
		return Request{}, errorf(CodeNameInvalid, "request path %s contains %q, which is never valid in a name, tag or digest",
			quote(p), p[i])
	}
	comps := strings.Split(p, "/")
	// Index 0 is excluded: the name must be at least one component. The
	// last index is excluded: a marker needs something after it.
	for i := len(comps) - 2; i >= 1; i-- {
		kind, ok := markerKind(comps[i], comps[i+1:])
		if !ok {
			continue
		}
		name := strings.Join(comps[:i], "/")
		rest := strings.Join(comps[i+1:], "/")
		if err := ValidateName(name); err != nil {
			return Request{}, err
		}
		return parseReference(name, kind, rest)
	}
	return Request{}, errorf(CodeNotFound, "path %s is not an OCI distribution endpoint; want /v2/<name>/manifests/<tag or digest>, "+
		"/v2/<name>/blobs/<digest>, /v2/<name>/tags/list or /v2/<name>/referrers/<digest>", quote("/v2/"+p))
}

// markerKind says whether comp, followed by tail, marks an endpoint. Only
// "tags" looks at the tail: "tags" followed by anything but "list" is just a
// name component, while "manifests/a/b" is a manifest request with a bad tag,
// which deserves TAG_INVALID rather than a 404.
func markerKind(comp string, tail []string) (Kind, bool) {
	switch comp {
	case "manifests":
		return Manifest, true
	case "blobs":
		if tail[0] == "uploads" {
			return BlobUpload, true
		}
		return Blob, true
	case "referrers":
		return Referrers, true
	case "tags":
		if len(tail) == 1 && tail[0] == "list" {
			return TagsList, true
		}
	}
	return 0, false
}

func parseReference(name string, kind Kind, rest string) (Request, error) {
	req := Request{Name: name, Kind: kind}
	switch kind {
	case Manifest:
		if IsDigest(rest) {
			d, err := ParseDigest(rest)
			if err != nil {
				return Request{}, err
			}
			req.Reference = d
		} else {
			if err := ValidateTag(rest); err != nil {
				return Request{}, err
			}
			req.Reference = rest
		}
	case Blob, Referrers:
		d, err := ParseDigest(rest)
		if err != nil {
			return Request{}, err
		}
		req.Reference = d
	case BlobUpload:
		// The upload id is opaque and never used: uploads are refused.
		req.Reference = strings.TrimPrefix(strings.TrimPrefix(rest, "uploads"), "/")
	}
	return req, nil
}
