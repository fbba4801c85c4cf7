package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"imagecache.io/imagecache/internal/policy"
)

func TestLoadExample(t *testing.T) {
	cfg, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Listen:  "127.0.0.1:5000",
		Storage: Storage{Path: "./imagecache-data", MaxSize: 20 << 30, LowWatermark: 0.9},
		Upstreams: []Upstream{{
			Name:    "docker.io",
			URL:     "https://registry-1.docker.io",
			Aliases: []string{"index.docker.io", "registry-1.docker.io"},
			Default: true,
		}},
		Policies: []policy.Rule{{
			Upstream: "*", Repository: "**", Tag: "latest",
			Pull: policy.Always, StaleIfError: true, UpstreamTimeout: 5 * time.Second,
		}},
		DefaultPolicy: policy.Rule{Pull: policy.Always, StaleIfError: true, UpstreamTimeout: 5 * time.Second},
		Files: []FileSet{{
			Set: "ipa",
			URL: "https://tarballs.opendev.org/openstack/ironic-python-agent/dib/ipa-centos9-master.tar.gz",
			Extract: []Extract{
				{From: "*.kernel", To: "ironic-python-agent.kernel"},
				{From: "*.initramfs", To: "ironic-python-agent.initramfs"},
			},
			RefreshInterval:         time.Hour,
			MinimumModificationTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Architecture:            "amd64",
		}},
		Proxy: &Proxy{Listen: "127.0.0.1:3128"},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load(example) =\n%+v\nwant\n%+v", cfg, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func TestEmptyDocumentsGiveDefault(t *testing.T) {
	for _, doc := range []string{"", "\n", "# only a comment\n", "---\n", "~\n", "{}\n"} {
		cfg, err := Parse([]byte(doc), "config.yaml")
		if err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
			continue
		}
		if !reflect.DeepEqual(cfg, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", doc, cfg)
		}
	}
}

func TestDefault(t *testing.T) {
	cfg := Default()
	if cfg.Listen != "127.0.0.1:5000" || cfg.Storage.Path != "./imagecache-data" || cfg.Proxy != nil {
		t.Errorf("Default() = %+v", cfg)
	}
	want := policy.Rule{Pull: policy.Always, StaleIfError: true, UpstreamTimeout: 5 * time.Second}
	if cfg.DefaultPolicy != want {
		t.Errorf("DefaultPolicy = %+v, want %+v", cfg.DefaultPolicy, want)
	}
	var names []string
	defaults := 0
	for _, u := range cfg.Upstreams {
		names = append(names, u.Name)
		if u.Default {
			defaults++
			if u.Name != "docker.io" {
				t.Errorf("default upstream is %s, want docker.io", u.Name)
			}
		}
	}
	wantNames := []string{"docker.io", "ghcr.io", "quay.io", "registry.k8s.io", "gcr.io", "mcr.microsoft.com", "public.ecr.aws"}
	if !reflect.DeepEqual(names, wantNames) || defaults != 1 {
		t.Errorf("default upstreams %v (%d defaults), want %v with one default", names, defaults, wantNames)
	}
}

func TestNoUpstreamsKeyGivesPublicRegistries(t *testing.T) {
	cfg, err := Parse([]byte("listen: :5000\n"), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Upstreams, DefaultUpstreams()) {
		t.Errorf("upstreams = %+v, want DefaultUpstreams()", cfg.Upstreams)
	}
	cfg, err = Parse([]byte("upstreams: []\n"), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Upstreams) != 0 {
		t.Errorf("upstreams: [] gave %d upstreams, want none", len(cfg.Upstreams))
	}
}

func TestDefaultsMergedIntoPartialPolicies(t *testing.T) {
	doc := `defaultPolicy: {pull: IfNotPresent, upstreamTimeout: 2s}
policies:
  - match: {repository: "library/**"}
    revalidateAfter: 10m
  - match: {tag: latest}
    pull: Always
    staleIfError: false
  - {}
`
	cfg, err := Parse([]byte(doc), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := policy.Rule{Pull: policy.IfNotPresent, StaleIfError: true, UpstreamTimeout: 2 * time.Second}
	if cfg.DefaultPolicy != def {
		t.Errorf("DefaultPolicy = %+v, want %+v", cfg.DefaultPolicy, def)
	}
	want := []policy.Rule{
		{Repository: "library/**", Pull: policy.IfNotPresent, RevalidateAfter: 10 * time.Minute, StaleIfError: true, UpstreamTimeout: 2 * time.Second},
		{Tag: "latest", Pull: policy.Always, StaleIfError: false, UpstreamTimeout: 2 * time.Second},
		def,
	}
	if !reflect.DeepEqual(cfg.Policies, want) {
		t.Errorf("Policies =\n%+v\nwant\n%+v", cfg.Policies, want)
	}
	rules := cfg.Rules()
	if got := rules.For("docker.io", "library/nginx", "1.27"); got != want[0] {
		t.Errorf("Rules().For = %+v, want the first policy", got)
	}
}

func TestPolicyOrderInFileDoesNotMatter(t *testing.T) {
	doc := "policies:\n  - match: {tag: latest}\ndefaultPolicy: {pull: Never}\n"
	cfg, err := Parse([]byte(doc), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policies[0].Pull != policy.Never {
		t.Errorf("policy pull = %s, want Never inherited from a defaultPolicy written after it", cfg.Policies[0].Pull)
	}
}

func TestFilesAndCredentials(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writeFile(t, ca, "pem")
	doc := `upstreams:
  - name: registry.example.com
    url: https://registry.example.com:5000
    aliases: ["registry.example.com:5000"]
    credentials: {username: bob, password: secret}
    caFile: ` + ca + `
  - name: other
    url: http://10.0.0.1:5000
    credentials: {token: abc}
    insecureSkipVerify: true
files:
  - set: tools
    url: oci://ghcr.io/acme/tools:v1
    sha256: E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855
  - set: signed
    url: https://example.com/a.tar.gz?X-Amz-Signature=abc
    checksumURL: https://example.com/a.tar.gz.sha256
`
	cfg, err := Parse([]byte(doc), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Upstreams[0]
	if u.CAFile != ca || u.Credentials != (Credentials{Username: "bob", Password: "secret"}) || u.Aliases[0] != "registry.example.com:5000" {
		t.Errorf("upstream = %+v", u)
	}
	if cfg.Upstreams[1].Credentials.Token != "abc" || !cfg.Upstreams[1].InsecureSkipVerify {
		t.Errorf("upstream = %+v", cfg.Upstreams[1])
	}
	if got := cfg.Files[0].SHA256; got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("sha256 = %q, want it lowercased", got)
	}
}

func TestUnquotedNumbersAreStrings(t *testing.T) {
	cfg, err := Parse([]byte("policies:\n  - match: {tag: 1.27}\n"), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policies[0].Tag != "1.27" {
		t.Errorf("tag = %q, want 1.27", cfg.Policies[0].Tag)
	}
}

func TestProxyOffWithoutListen(t *testing.T) {
	cfg, err := Parse([]byte("proxy: {passthrough: true}\n"), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy != nil {
		t.Errorf("Proxy = %+v, want nil without listen", cfg.Proxy)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRulesNameUpstreamsAndRepositoriesAsRequestsDo: requests carry the upstream's name and Docker Hub's
// library/; a rule written with an alias, a URL host or a short Docker Hub name must still match them.
func TestRulesNameUpstreamsAndRepositoriesAsRequestsDo(t *testing.T) {
	cfg, err := Parse([]byte(`upstreams:
  - {name: hub, url: "https://registry-1.docker.io", default: true}
  - {name: local, url: "http://10.0.0.5:5000", aliases: ["registry.lan"]}
policies:
  - match: {upstream: registry-1.docker.io, repository: busybox}
    pull: Never
  - match: {upstream: registry.lan, repository: "team/*"}
    pull: IfNotPresent
  - match: {upstream: "10.0.0.5:5000", repository: "ci/**"}
    pull: Never
  - match: {upstream: hub, repository: "**"}
    pull: Always
`), "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := cfg.Rules()
	for _, tc := range []struct {
		upstream, repository string
		want                 policy.Pull
	}{
		{"hub", "library/busybox", policy.Never},
		{"hub", "team/busybox", policy.Always},
		{"local", "team/app", policy.IfNotPresent},
		{"local", "ci/build/tool", policy.Never},
	} {
		if got := rules.For(tc.upstream, tc.repository, "v1").Pull; got != tc.want {
			t.Errorf("%s/%s: %s, want %s", tc.upstream, tc.repository, got, tc.want)
		}
	}
	if cfg.Policies[0].Upstream != "registry-1.docker.io" || cfg.Policies[0].Repository != "busybox" {
		t.Errorf("Rules changed the config's own policies: %+v", cfg.Policies[0])
	}
}
