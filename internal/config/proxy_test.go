package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestProxySection(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `proxy:
  listen: 127.0.0.1:3128
  ca: {certFile: /etc/imagecache/ca/ca.crt, keyFile: /etc/imagecache/ca/ca.key}
  passthrough: true
  auth: {username: kapp, passwordFile: ` + pwFile + `}
`
	cfg, err := Parse([]byte(doc), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Proxy{
		Listen:      "127.0.0.1:3128",
		CA:          ProxyCA{CertFile: "/etc/imagecache/ca/ca.crt", KeyFile: "/etc/imagecache/ca/ca.key"},
		Passthrough: true,
		Auth:        ProxyAuth{Username: "kapp", PasswordFile: pwFile},
	}
	if !reflect.DeepEqual(cfg.Proxy, want) {
		t.Errorf("Proxy = %+v, want %+v", cfg.Proxy, want)
	}
}

func TestProxyAuthErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tt := range []struct{ name, auth, want string }{
		{"no username", "{password: pw}", "config.yaml:3: proxy.auth.username: required"},
		{"no password", "{username: u}", "config.yaml:3: proxy.auth.password: required with username"},
		{"both passwords", "{username: u, password: pw, passwordFile: /etc/hostname}", "proxy.auth.passwordFile: cannot be used together with password"},
		{"colon in username", "{username: 'a:b', password: pw}", "proxy.auth.username: \"a:b\" holds a colon"},
		{"unreadable password file", "{username: u, passwordFile: " + missing + "}", "proxy.auth.passwordFile: cannot read the file"},
		{"unknown key", "{username: u, password: pw, token: t}", "token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("proxy:\n  listen: 127.0.0.1:3128\n  auth: "+tt.auth+"\n"), "config.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
