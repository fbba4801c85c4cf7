package reference

import (
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	tests := []struct {
		path string
		req  Request
		code string
		want []string
	}{
		{path: "nginx/manifests/latest", req: Request{"nginx", Manifest, "latest"}},
		{path: "docker.io/library/nginx/manifests/1.27", req: Request{"docker.io/library/nginx", Manifest, "1.27"}},
		{path: "a/b/manifests/" + sha256, req: Request{"a/b", Manifest, sha256}},
		{path: "a/blobs/" + sha256, req: Request{"a", Blob, sha256}},
		{path: "a/blobs/" + sha512, req: Request{"a", Blob, sha512}},
		{path: "a/tags/list", req: Request{"a", TagsList, ""}},
		{path: "a/referrers/" + sha256, req: Request{"a", Referrers, sha256}},
		{path: "a/blobs/uploads/", req: Request{"a", BlobUpload, ""}},
		{path: "a/blobs/uploads", req: Request{"a", BlobUpload, ""}},
		{path: "a/blobs/uploads/1234-abcd", req: Request{"a", BlobUpload, "1234-abcd"}},
		// Markers inside the name: the last one splits.
		{path: "manifests/manifests/latest", req: Request{"manifests", Manifest, "latest"}},
		{path: "a/blobs/b/manifests/v1", req: Request{"a/blobs/b", Manifest, "v1"}},
		{path: "a/manifests/b/blobs/" + sha256, req: Request{"a/manifests/b", Blob, sha256}},
		{path: "a/tags/b/tags/list", req: Request{"a/tags/b", TagsList, ""}},
		{path: "a/tags/manifests/x", req: Request{"a/tags", Manifest, "x"}},
		{path: "a/manifests/tags/list", req: Request{"a/manifests", TagsList, ""}},

		{path: "Nginx/manifests/latest", code: CodeNameInvalid, want: []string{"uppercase"}},
		{path: "a/../b/manifests/latest", code: CodeNameInvalid, want: []string{`".."`}},
		{path: "../manifests/latest", code: CodeNameInvalid, want: []string{`".."`}},
		{path: "a//b/manifests/latest", code: CodeNameInvalid, want: []string{"empty path component"}},
		{path: "/a/manifests/latest", code: CodeNameInvalid, want: []string{"starts with '/'"}},
		{path: strings.Repeat("a/", 127) + "ab/tags/list", code: CodeNameInvalid, want: []string{"256 characters"}},
		{path: "a%2Fb/manifests/latest", code: CodeNameInvalid, want: []string{"'%'"}},
		{path: `a\b/manifests/latest`, code: CodeNameInvalid, want: []string{`'\\'`}},
		{path: "a/manifests/lat\x00est", code: CodeNameInvalid, want: []string{`'\x00'`}},
		{path: "a/manifests/" + strings.Repeat("t", 129), code: CodeTagInvalid, want: []string{"129"}},
		{path: "a/manifests/.x", code: CodeTagInvalid, want: []string{"starts with '.'"}},
		{path: "a/manifests/", code: CodeTagInvalid, want: []string{"empty"}},
		{path: "a/manifests/latest/", code: CodeTagInvalid},
		{path: "a/manifests/x/y", code: CodeTagInvalid, want: []string{"'/'"}},
		{path: "a/manifests/md5:d41d8cd98f00b204e9800998ecf8427e", code: CodeDigestInvalid, want: []string{"not supported"}},
		{path: "a/blobs/latest", code: CodeDigestInvalid, want: []string{"no ':'"}},
		{path: "a/blobs/sha256:" + hex64[:63], code: CodeDigestInvalid, want: []string{"want 64"}},
		{path: "a/blobs/sha256:" + strings.ToUpper(hex64), code: CodeDigestInvalid, want: []string{"uppercase"}},
		{path: "a/referrers/latest", code: CodeDigestInvalid},

		{path: "", code: CodeNotFound},
		{path: "a", code: CodeNotFound, want: []string{`"/v2/a"`}},
		{path: "a/manifests", code: CodeNotFound},
		{path: "manifests/latest", code: CodeNotFound},
		{path: "a/tags/other", code: CodeNotFound},
		{path: "a/tags", code: CodeNotFound},
		{path: "_catalog", code: CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := ParsePath(tt.path)
			checkErr(t, err, tt.code, tt.want...)
			if tt.code == "" && got != tt.req {
				t.Errorf("ParsePath(%q) = %+v, want %+v", tt.path, got, tt.req)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Manifest: "manifest", Blob: "blob", TagsList: "tags list",
		Referrers: "referrers", BlobUpload: "blob upload", 0: "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
