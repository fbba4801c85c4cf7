package reference

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	long := strings.Repeat("a/", 127) + "ab" // 256
	tests := []struct {
		name string
		code string
		want []string
	}{
		{name: "nginx"},
		{name: "library/nginx"},
		{name: "docker.io/library/nginx"},
		{name: "a/b_c/d__e/f-g/h---i/j.k/0"},
		{name: strings.Repeat("a/", 126) + "abc"}, // 255
		{name: "", code: CodeNameInvalid, want: []string{"empty"}},
		{name: long, code: CodeNameInvalid, want: []string{"256 characters", "255"}},
		{name: "Library/nginx", code: CodeNameInvalid, want: []string{"uppercase", "'L'"}},
		{name: "a:b", code: CodeNameInvalid, want: []string{"':'"}},
		{name: "a b", code: CodeNameInvalid, want: []string{"' '"}},
		{name: "a//b", code: CodeNameInvalid, want: []string{"empty path component"}},
		{name: "/a", code: CodeNameInvalid, want: []string{"starts with '/'"}},
		{name: "a/", code: CodeNameInvalid, want: []string{"ends with '/'"}},
		{name: "a/../b", code: CodeNameInvalid, want: []string{`".."`, "not allowed"}},
		{name: "..", code: CodeNameInvalid, want: []string{`".."`}},
		{name: "a/./b", code: CodeNameInvalid, want: []string{`"."`}},
		{name: "a/.b", code: CodeNameInvalid, want: []string{"start with"}},
		{name: "a/b-", code: CodeNameInvalid, want: []string{"end with"}},
		{name: "a..b", code: CodeNameInvalid, want: []string{`separator ".."`}},
		{name: "a___b", code: CodeNameInvalid, want: []string{`separator "___"`}},
		{name: "a.-b", code: CodeNameInvalid, want: []string{`separator ".-"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, ValidateName(tt.name), tt.code, tt.want...)
		})
	}
}

func TestValidateTag(t *testing.T) {
	tests := []struct {
		tag  string
		code string
		want []string
	}{
		{tag: "latest"},
		{tag: "_x"},
		{tag: "V1.2.3-rc_1"},
		{tag: strings.Repeat("a", 128)},
		{tag: "", code: CodeTagInvalid, want: []string{"empty"}},
		{tag: strings.Repeat("a", 129), code: CodeTagInvalid, want: []string{"129 characters", "128"}},
		{tag: ".hidden", code: CodeTagInvalid, want: []string{"starts with '.'"}},
		{tag: "-x", code: CodeTagInvalid, want: []string{"starts with '-'"}},
		{tag: "a/b", code: CodeTagInvalid, want: []string{"'/'"}},
		{tag: "a+b", code: CodeTagInvalid, want: []string{"'+'"}},
	}
	for _, tt := range tests {
		t.Run(tt.tag, func(t *testing.T) {
			checkErr(t, ValidateTag(tt.tag), tt.code, tt.want...)
		})
	}
}

func TestParseDigest(t *testing.T) {
	tests := []struct {
		in   string
		code string
		want []string
	}{
		{in: sha256},
		{in: sha512},
		{in: "md5:d41d8cd98f00b204e9800998ecf8427e", code: CodeDigestInvalid, want: []string{`"md5" is not supported`, "sha256, sha512"}},
		{in: "sha384:" + hex64, code: CodeDigestInvalid, want: []string{"not supported"}},
		{in: "sha256:" + hex64[:63], code: CodeDigestInvalid, want: []string{"63 hex characters", "want 64"}},
		{in: "sha512:" + hex64, code: CodeDigestInvalid, want: []string{"64 hex characters", "want 128"}},
		{in: "sha256:" + strings.ToUpper(hex64), code: CodeDigestInvalid, want: []string{"uppercase", "lowercase"}},
		{in: "sha256:" + hex64[:63] + "g", code: CodeDigestInvalid, want: []string{"'g'"}},
		{in: "SHA256:" + hex64, code: CodeDigestInvalid, want: []string{"must be lowercase"}},
		{in: "sha256", code: CodeDigestInvalid, want: []string{"no ':'"}},
		{in: ":" + hex64, code: CodeDigestInvalid, want: []string{"empty"}},
		{in: "sha256:", code: CodeDigestInvalid, want: []string{"nothing after"}},
		{in: "sha256+:" + hex64, code: CodeDigestInvalid, want: []string{"malformed"}},
		{in: "md5:abc/def", code: CodeDigestInvalid, want: []string{"'/'"}},
		{in: "sha256:" + hex64 + ":", code: CodeDigestInvalid, want: []string{"':'"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDigest(tt.in)
			checkErr(t, err, tt.code, tt.want...)
			if tt.code == "" && got != tt.in {
				t.Errorf("ParseDigest(%q) = %q", tt.in, got)
			}
		})
	}
}

func TestIsDigest(t *testing.T) {
	if !IsDigest(sha256) || !IsDigest("md5:x") || IsDigest("latest") || IsDigest("") {
		t.Fatal("IsDigest must be true exactly when ':' is present")
	}
}
