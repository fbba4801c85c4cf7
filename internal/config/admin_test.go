package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := []struct{ doc, token string }{
		{"", ""},
		{"admin: {token: s3cret}\n", "s3cret"},
		{"admin:\n  tokenFile: " + file + "\n", "from-file"},
		{"admin: {}\n", ""},
	}
	for _, tc := range ok {
		cfg, err := Parse([]byte(tc.doc), "config.yaml")
		if err != nil {
			t.Errorf("%q: %v", tc.doc, err)
			continue
		}
		if cfg.Admin.Token != tc.token {
			t.Errorf("%q: token %q, want %q", tc.doc, cfg.Admin.Token, tc.token)
		}
	}
	bad := []struct{ doc, want string }{
		{"admin: {token: a, tokenFile: " + file + "}\n", "config.yaml:1: admin.tokenFile: cannot be used together with token"},
		{"admin:\n  tokenFile: " + filepath.Join(dir, "missing") + "\n", "config.yaml:2: admin.tokenFile: cannot read the file"},
		{"admin:\n  tokenFile: " + empty + "\n", "config.yaml:2: admin.tokenFile: " + empty + " is empty"},
		{"admin: {token: \"two words\"}\n", "config.yaml:1: admin.token: the token must be printable ASCII without spaces"},
		{"admin: {tokn: x}\n", "config.yaml:1: admin.tokn: unknown key"},
		{"admin: s3cret\n", "config.yaml:1: admin: want a mapping with keys token, tokenFile"},
	}
	for _, tc := range bad {
		_, err := Parse([]byte(tc.doc), "config.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.doc, err, tc.want)
		}
	}
}
