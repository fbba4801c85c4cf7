package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"imagecache.io/imagecache/internal/config"
)

func TestLoadConfigProxyFlags(t *testing.T) {
	withProxy := filepath.Join(t.TempDir(), "config.yaml")
	doc := "proxy:\n  listen: 127.0.0.1:3128\n  ca: {certFile: /etc/ca/cert.pem, keyFile: /etc/ca/key.pem}\n  passthrough: true\n"
	if err := os.WriteFile(withProxy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	mounted := config.ProxyCA{CertFile: "/etc/imagecache-proxy-ca/ca.crt", KeyFile: "/etc/imagecache-proxy-ca/ca.key"}
	for _, tt := range []struct {
		name    string
		o       serveOptions
		want    *config.Proxy
		wantErr string
	}{
		{name: "off by default", o: serveOptions{}},
		{name: "--proxy-listen turns it on", o: serveOptions{proxyListen: "0.0.0.0:3128"},
			want: &config.Proxy{Listen: "0.0.0.0:3128"}},
		{name: "--proxy-listen and --proxy-ca", o: serveOptions{proxyListen: ":3128", proxyCA: "/etc/imagecache-proxy-ca"},
			want: &config.Proxy{Listen: ":3128", CA: mounted}},
		{name: "the config's proxy without flags", o: serveOptions{config: withProxy},
			want: &config.Proxy{Listen: "127.0.0.1:3128", CA: config.ProxyCA{CertFile: "/etc/ca/cert.pem", KeyFile: "/etc/ca/key.pem"}, Passthrough: true}},
		{name: "flags override the config's proxy and keep the rest", o: serveOptions{config: withProxy, proxyListen: "0.0.0.0:3129", proxyCA: "/etc/imagecache-proxy-ca"},
			want: &config.Proxy{Listen: "0.0.0.0:3129", CA: mounted, Passthrough: true}},
		{name: "--proxy-ca alone overrides the config's CA", o: serveOptions{config: withProxy, proxyCA: "/etc/imagecache-proxy-ca"},
			want: &config.Proxy{Listen: "127.0.0.1:3128", CA: mounted, Passthrough: true}},
		{name: "--proxy-ca with the proxy off", o: serveOptions{proxyCA: "/etc/imagecache-proxy-ca"},
			wantErr: "--proxy-ca: the proxy is off"},
		{name: "--proxy-listen without a port", o: serveOptions{proxyListen: "0.0.0.0"},
			wantErr: `--proxy-listen: "0.0.0.0" is not a host:port`},
		{name: "--proxy-listen with an empty port", o: serveOptions{proxyListen: "0.0.0.0:"},
			wantErr: `--proxy-listen: "0.0.0.0:" is not a host:port`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(tt.o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("loadConfig(%+v) error = %v, want one containing %q", tt.o, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Proxy, tt.want) {
				t.Errorf("Proxy = %+v, want %+v", cfg.Proxy, tt.want)
			}
		})
	}
}

// TestDeployedArgsAreServeFlags: the flags the kustomize base, its proxy component and the Helm chart pass
// to serve exist, so a renamed flag fails here rather than in a crash-looping pod.
func TestDeployedArgsAreServeFlags(t *testing.T) {
	flag := regexp.MustCompile(`(?:"|value: )--([a-z][a-z-]+)`)
	flags := newServeCommand().Flags()
	for _, f := range []string{"deploy/statefulset.yaml", "deploy/components/proxy/kustomization.yaml", "charts/imagecache/templates/statefulset.yaml"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		found := flag.FindAllStringSubmatch(string(raw), -1)
		if len(found) == 0 {
			t.Errorf("%s passes serve no flags; the pattern no longer finds them", f)
		}
		for _, m := range found {
			if flags.Lookup(m[1]) == nil {
				t.Errorf("%s passes --%s, which serve does not have", f, m[1])
			}
		}
	}
}
