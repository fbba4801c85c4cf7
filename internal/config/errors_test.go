package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestErrors checks that each mistake is reported with the file, the line and
// the key path, which is what lets an operator fix a config without guessing.
func TestErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		doc  string
		want []string // substrings of the error, the first being "file:line: path"
	}{
		{"unknown top-level key", "listen: :5000\nlisten2: x\n",
			[]string{"config.yaml:2: listen2: unknown key (known keys: listen, storage"}},
		{"unknown nested key, did you mean", "storage:\n  path: /data\n  maxsize: 1Gi\n",
			[]string{"config.yaml:3: storage.maxsize: unknown key (did you mean maxSize?)"}},
		{"unknown key in list item", "upstreams:\n  - name: a\n    url: https://a\n    urls: x\n",
			[]string{"config.yaml:4: upstreams[0].urls: unknown key"}},
		{"unknown key in match", "policies:\n  - match: {repo: x}\n",
			[]string{"config.yaml:2: policies[0].match.repo: unknown key"}},
		{"match not allowed in defaultPolicy", "defaultPolicy:\n  match: {tag: x}\n",
			[]string{"config.yaml:2: defaultPolicy.match: unknown key"}},
		{"duplicate key", "listen: :1\nlisten: :2\n",
			[]string{"config.yaml:2: listen: duplicate key (first set on line 1)"}},
		{"not a mapping", "- a\n- b\n",
			[]string{"config.yaml:1: the config must be a mapping", "not a list"}},
		{"scalar document", "hello\n",
			[]string{"config.yaml:1: the config must be a mapping"}},
		{"two documents", "listen: :1\n---\nlisten: :2\n",
			[]string{"config.yaml:2: more than one YAML document"}},
		{"syntax error", "listen: [\n",
			[]string{"config.yaml: parse YAML:"}},
		{"wrong type: mapping for string", "listen: {a: b}\n",
			[]string{"config.yaml:1: listen: want a string, got a mapping"}},
		{"wrong type: string for mapping", "storage: big\n",
			[]string{"config.yaml:1: storage: want a mapping with keys path, maxSize, maxObjectSize, lowWatermark, got \"big\""}},
		{"wrong type: string for list", "upstreams: docker.io\n",
			[]string{"config.yaml:1: upstreams: want a list, got \"docker.io\""}},
		{"wrong type: string for bool", "policies:\n  - staleIfError: yes\n",
			[]string{"config.yaml:2: policies[0].staleIfError: want true or false, got \"yes\""}},
		{"bad listen", "listen: localhost\n",
			[]string{"config.yaml:1: listen: \"localhost\" is not a host:port"}},
		{"bad duration", "defaultPolicy:\n  upstreamTimeout: 5 seconds\n",
			[]string{"config.yaml:2: defaultPolicy.upstreamTimeout: \"5 seconds\" is not a duration"}},
		{"bad duration in policy", "policies:\n  - match: {tag: x}\n    revalidateAfter: soon\n",
			[]string{"config.yaml:3: policies[0].revalidateAfter: \"soon\" is not a duration"}},
		{"zero upstreamTimeout", "policies:\n  - upstreamTimeout: 0s\n",
			[]string{"config.yaml:2: policies[0].upstreamTimeout: must be greater than 0"}},
		{"negative revalidateAfter", "defaultPolicy: {revalidateAfter: -1m}\n",
			[]string{"config.yaml:1: defaultPolicy.revalidateAfter: must not be negative"}},
		{"bad quantity", "storage:\n  maxSize: 20 gigs\n",
			[]string{"config.yaml:2: storage.maxSize: \"20 gigs\" is not a quantity"}},
		{"negative size", "storage:\n  path: x\n  maxObjectSize: -1Gi\n",
			[]string{"config.yaml:3: storage.maxObjectSize: \"-1Gi\" is negative"}},
		{"too large size", "storage: {maxSize: 100Ei}\n",
			[]string{"config.yaml:1: storage.maxSize: \"100Ei\" is too large"}},
		{"bad glob", "policies:\n  - match:\n      upstream: \"*\"\n      repository: \"[\"\n",
			[]string{"config.yaml:4: policies[0].match.repository: glob \"[\": bad character class"}},
		{"bad pull word", "policies:\n  - match: {tag: latest}\n    pull: Always\n  - match: {tag: x}\n    pull: Sometimes\n",
			[]string{`config.yaml:5: policies[1].pull: "Sometimes" is not a pull policy (want Always, IfNotPresent or Never)`}},
		{"duplicate upstream name",
			"upstreams:\n  - name: a\n    url: https://a\n  - name: b\n    url: https://b\n  - name: a\n    url: https://a2\n",
			[]string{`config.yaml:6: upstreams[2].name: "a" is already used by upstreams[0]`}},
		{"alias clashes with a name",
			"upstreams:\n  - name: a\n    url: https://a\n  - name: b\n    url: https://b\n    aliases: [x, A]\n",
			[]string{`config.yaml:6: upstreams[1].aliases[1]: "A" is already used by upstreams[0]`}},
		{"name with a port", "upstreams:\n  - name: localhost:5000\n    url: http://localhost:5000\n",
			[]string{`config.yaml:2: upstreams[0].name: "localhost:5000" is not a valid name`, "use a plain name and put the host:port in aliases"}},
		{"name with capitals", "upstreams:\n  - name: Registry\n    url: https://r\n",
			[]string{`config.yaml:2: upstreams[0].name: "Registry" is not a valid name`}},
		{"missing name", "upstreams:\n  - url: https://r\n",
			[]string{"config.yaml:2: upstreams[0].name: required"}},
		{"two defaults",
			"upstreams:\n  - name: a\n    url: https://a\n    default: true\n  - name: b\n    url: https://b\n    default: true\n",
			[]string{"config.yaml:7: upstreams[1].default: only one upstream can be the default, and upstreams[0] already is"}},
		{"missing url", "upstreams:\n  - name: a\n    default: true\n",
			[]string{"config.yaml:2: upstreams[0].url: required"}},
		{"ftp url", "upstreams:\n  - name: a\n    url: ftp://a.example\n",
			[]string{`config.yaml:3: upstreams[0].url: "ftp://a.example": the scheme must be http or https`}},
		{"url without host", "upstreams:\n  - name: a\n    url: https:///v2\n",
			[]string{"config.yaml:3: upstreams[0].url:", "has no host"}},
		{"url with query", "upstreams:\n  - name: a\n    url: https://a?x=1\n",
			[]string{"config.yaml:3: upstreams[0].url:", "must not have a query"}},
		{"missing caFile", "upstreams:\n  - name: a\n    url: https://a\n    caFile: " + missing + "\n",
			[]string{"config.yaml:4: upstreams[0].caFile: cannot read the file: open " + missing}},
		{"missing dockerConfig", "upstreams:\n  - name: a\n    url: https://a\n    credentials:\n      dockerConfig: " + missing + "\n",
			[]string{"config.yaml:5: upstreams[0].credentials.dockerConfig: cannot read the file: open " + missing}},
		{"username without password", "upstreams:\n  - name: a\n    url: https://a\n    credentials: {username: bob}\n",
			[]string{"config.yaml:4: upstreams[0].credentials.password: required with username"}},
		{"password without username", "upstreams:\n  - name: a\n    url: https://a\n    credentials: {password: pw}\n",
			[]string{"config.yaml:4: upstreams[0].credentials.username: required with password"}},
		{"token with username", "upstreams:\n  - name: a\n    url: https://a\n    credentials: {username: bob, password: pw, token: t}\n",
			[]string{"config.yaml:4: upstreams[0].credentials.token: cannot be used together with username"}},
		{"bad set name", "files:\n  - set: a/b\n    url: https://x/f\n",
			[]string{`config.yaml:2: files[0].set: "a/b" is not a set name`}},
		{"bad file url", "files:\n  - set: a\n    url: file:///etc/passwd\n",
			[]string{"config.yaml:3: files[0].url:", "the scheme must be http, https or oci"}},
		{"bad sha256", "files:\n  - set: a\n    url: https://x/f\n    sha256: abc\n",
			[]string{`config.yaml:4: files[0].sha256: "abc" is not a SHA-256`}},
		{"bad extract glob", "files:\n  - set: a\n    url: https://x/f\n    extract:\n      - {from: \"[x\", to: k}\n",
			[]string{"config.yaml:5: files[0].extract[0].from: glob \"[x\""}},
		{"bad modification time", "files:\n  - set: a\n    url: https://x/f\n    minimumModificationTime: yesterday\n",
			[]string{`config.yaml:4: files[0].minimumModificationTime: "yesterday" is not an RFC 3339 time`}},
		{"duplicate set", "files:\n  - set: a\n    url: https://x/f\n  - set: a\n    url: https://x/g\n",
			[]string{`config.yaml:4: files[1].set: "a" is already used by files[0]`}},
		{"proxy cert without key", "proxy:\n  listen: :3128\n  ca: {certFile: ca.pem}\n",
			[]string{"config.yaml:3: proxy.ca.keyFile: required with certFile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.doc), "config.yaml")
			if err == nil {
				t.Fatalf("no error; got %+v", cfg)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n  %s\ndoes not contain\n  %s", err, want)
				}
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	doc := "listen: x\nstorage:\n  maxSize: lots\npolicies:\n  - pull: Sometimes\n"
	_, err := Parse([]byte(doc), "config.yaml")
	for _, want := range []string{"config.yaml:1: listen", "config.yaml:3: storage.maxSize", "config.yaml:5: policies[0].pull"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "imagecache.yaml")
	writeFile(t, path, "listen: :5000\nbogus: 1\n")
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: bogus: unknown key") {
		t.Errorf("Load error = %v, want it to start with %s:2: bogus", err, path)
	}
}

func TestStorageAndPinErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"storage:\n  lowWatermark: 120%\n", "config.yaml:2: storage.lowWatermark: \"120%\" is not a percentage"},
		{"pins:\n  - nginx\n", "config.yaml:2: pins[0]: \"nginx\" is not a pinned reference"},
	} {
		_, err := Parse([]byte(tc.yaml), "config.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	cfg, err := Parse([]byte("storage:\n  lowWatermark: 80%\npins: [docker.io/library/nginx:1.27, \"up/team/app@sha256:abc\"]\n"), "c")
	if err != nil || cfg.Storage.LowWatermark != 0.8 || len(cfg.Pins) != 2 {
		t.Fatalf("%+v %v", cfg, err)
	}
}
