package policy

import "testing"

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "anything/at/all", true},
		{"latest", "latest", true},
		{"latest", "", false},
		{"latest", "latest2", false},
		{"*", "", true},
		{"*", "nginx", true},
		{"*", "library/nginx", false},
		{"**", "", true},
		{"**", "library/nginx", true},
		{"**", "a/b/c/d", true},
		{"team/*", "team/app", true},
		{"team/*", "team/a/b", false},
		{"team/*", "team", false},
		{"library/**", "library/a", true},
		{"library/**", "library/a/b", true},
		{"library/**", "other/a", false},
		{"**/nginx", "nginx", true},
		{"**/nginx", "library/nginx", true},
		{"**/nginx", "a/b/nginx", true},
		{"**/nginx", "library/nginx-extra", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"a/**/b", "ab", false},
		{"a**b", "a/x/b", true},
		{"a**b", "ab", true},
		{"v1.*", "v1.27", true},
		{"v1.*", "v2.0", false},
		{"*-alpine", "1.27-alpine", true},
		{"*.*", "1.27", true},
		{"v?", "v1", true},
		{"v?", "v12", false},
		{"a?b", "a/b", false},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[^a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"a[^x]b", "a/b", false},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`[\]]`, "]", true},
		{"[", "[", false}, // malformed: matches nothing
		{"héllo/*", "héllo/wörld", true},
		{"?", "é", true},
	}
	for _, tt := range tests {
		if got := MatchGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestValidateGlob(t *testing.T) {
	tests := []struct {
		pattern string
		ok      bool
	}{
		{"", true},
		{"**", true},
		{"library/**", true},
		{"a/**/b", true},
		{"[a-z]*", true},
		{"[^0-9]", true},
		{`\[literal\]`, true},
		{"[", false},
		{"[]", false},
		{"[a-", false},
		{"[-a]", false},
		{"[a", false},
		{`a\`, false},
		{`[\`, false},
	}
	for _, tt := range tests {
		err := ValidateGlob(tt.pattern)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateGlob(%q) = %v, want ok=%v", tt.pattern, err, tt.ok)
		}
	}
}
