package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustServer(t *testing.T, s string) Options {
	t.Helper()
	u, err := ParseServer(s)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Server: u}
}

func mustRegistries(t *testing.T, specs ...string) []Registry {
	t.Helper()
	var rs []Registry
	for _, s := range specs {
		r, err := ParseRegistry(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestContainerd(t *testing.T) {
	o := mustServer(t, "http://imagecache.imagecache.svc:5000/")
	o.Registries = mustRegistries(t, "docker.io", "ghcr.io", "10.0.0.5:5000")
	o.DialTimeout = 2 * time.Second
	files := Containerd(o)
	want := []File{
		{"docker.io/hosts.toml", []byte(`# Written by imagecache node-config: pull docker.io through the cache, falling back to the registry.
server = "https://registry-1.docker.io"

[host."http://imagecache.imagecache.svc:5000"]
  capabilities = ["pull", "resolve"]
  dial_timeout = "2s"
`)},
		{"ghcr.io/hosts.toml", []byte(`# Written by imagecache node-config: pull ghcr.io through the cache, falling back to the registry.
server = "https://ghcr.io"

[host."http://imagecache.imagecache.svc:5000"]
  capabilities = ["pull", "resolve"]
  dial_timeout = "2s"
`)},
		{"10.0.0.5:5000/hosts.toml", []byte(`# Written by imagecache node-config: pull 10.0.0.5:5000 through the cache, falling back to the registry.
server = "https://10.0.0.5:5000"

[host."http://imagecache.imagecache.svc:5000"]
  capabilities = ["pull", "resolve"]
  dial_timeout = "2s"
`)},
	}
	if len(files) != len(want) {
		t.Fatalf("%d files, want %d", len(files), len(want))
	}
	for i := range want {
		checkTOMLShape(t, string(files[i].Data))
		if files[i].Path != want[i].Path || string(files[i].Data) != string(want[i].Data) {
			t.Errorf("file %d:\n%s\n%s\nwant\n%s\n%s", i, files[i].Path, files[i].Data, want[i].Path, want[i].Data)
		}
	}
}

func TestContainerdHTTPSNoDialTimeout(t *testing.T) {
	o := mustServer(t, "https://10.0.0.10:30500")
	o.Registries = mustRegistries(t, "index.docker.io")
	got := string(Containerd(o)[0].Data)
	for _, line := range []string{`server = "https://registry-1.docker.io"`, `[host."https://10.0.0.10:30500"]`} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %q in\n%s", line, got)
		}
	}
	if strings.Contains(got, "dial_timeout") {
		t.Errorf("DialTimeout 0 still wrote dial_timeout:\n%s", got)
	}
	checkTOMLShape(t, got)
}

func TestCRIO(t *testing.T) {
	o := mustServer(t, "http://10.0.0.10:30500")
	o.Registries = mustRegistries(t, "docker.io", "quay.io", "10.0.0.5:5000=local")
	f, err := CRIO(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by imagecache node-config: pull through the cache at http://10.0.0.10:30500, falling back to each registry.

[[registry]]
prefix = "docker.io"
location = "registry-1.docker.io"

[[registry.mirror]]
location = "10.0.0.10:30500/docker.io"
insecure = true

[[registry]]
prefix = "quay.io"
location = "quay.io"

[[registry.mirror]]
location = "10.0.0.10:30500/quay.io"
insecure = true

[[registry]]
prefix = "10.0.0.5:5000"
location = "10.0.0.5:5000"

[[registry.mirror]]
location = "10.0.0.10:30500/local"
insecure = true
`
	if f.Path != "50-imagecache.conf" || string(f.Data) != want {
		t.Errorf("%s:\n%s\nwant 50-imagecache.conf:\n%s", f.Path, f.Data, want)
	}
	checkTOMLShape(t, string(f.Data))

	o = mustServer(t, "https://cache.example")
	o.Registries = mustRegistries(t, "ghcr.io")
	f, err = CRIO(o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(f.Data), "insecure") {
		t.Errorf("https server marked insecure:\n%s", f.Data)
	}
}

func TestCRIORegistryOnAPortNeedsAName(t *testing.T) {
	o := mustServer(t, "http://cache:5000")
	o.Registries = mustRegistries(t, "10.0.0.5:5000")
	_, err := CRIO(o)
	if err == nil || !strings.Contains(err.Error(), "--registry 10.0.0.5:5000=<name>") {
		t.Fatalf("got %v, want an error that tells how to name the upstream", err)
	}
}

func TestParseServer(t *testing.T) {
	for in, want := range map[string]string{
		"http://imagecache.imagecache.svc:5000":  "http://imagecache.imagecache.svc:5000",
		"http://imagecache.imagecache.svc:5000/": "http://imagecache.imagecache.svc:5000",
		"https://10.0.0.10:30500":                "https://10.0.0.10:30500",
		"http://[fd00::1]:5000":                  "http://[fd00::1]:5000",
	} {
		u, err := ParseServer(in)
		if err != nil || u.String() != want {
			t.Errorf("ParseServer(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"", "imagecache:5000", "ftp://x", "http://", "http://x:5000/v2", "http://u:p@x", "http://x?a=b", "http://x:port", "http://a b"} {
		if u, err := ParseServer(bad); err == nil {
			t.Errorf("ParseServer(%q) = %v, want an error", bad, u)
		} else if !strings.Contains(err.Error(), "--server") {
			t.Errorf("ParseServer(%q): %v does not name the flag", bad, err)
		}
	}
}

func TestParseRegistry(t *testing.T) {
	for in, want := range map[string]Registry{
		"docker.io":           {"docker.io", "docker.io"},
		"10.0.0.5:5000":       {"10.0.0.5:5000", "10.0.0.5:5000"},
		"10.0.0.5:5000=local": {"10.0.0.5:5000", "local"},
		"localhost":           {"localhost", "localhost"},
		"Docker.IO":           {"docker.io", "docker.io"},
		"Quay.io=quay":        {"quay.io", "quay"},
	} {
		if got, err := ParseRegistry(in); err != nil || got != want {
			t.Errorf("ParseRegistry(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "https://docker.io", "docker.io/library", "-x.io", "a..b", "x:5000=", "x:5000=Bad:Name", `a"b`} {
		if r, err := ParseRegistry(bad); err == nil {
			t.Errorf("ParseRegistry(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestQuote(t *testing.T) {
	if got, want := quote("a\"b\\c\n"), `"a\"b\\c\u000A"`; got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
}

// checkTOMLShape is the little TOML the renderers write, checked line by line: comments, blank lines,
// [table] / [[array]] headers, and key = "string" | ["string", ...] | true.
func checkTOMLShape(t *testing.T, doc string) {
	t.Helper()
	for i, line := range strings.Split(strings.TrimSuffix(doc, "\n"), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "", strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[[") && strings.HasSuffix(l, "]]"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
		default:
			k, v, ok := strings.Cut(l, " = ")
			quoted := len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"'
			list := strings.HasPrefix(v, `["`) && strings.HasSuffix(v, `"]`)
			if !ok || strings.ContainsAny(k, ` ".`) || !(quoted || list || v == "true") {
				t.Errorf("line %d is not key = value: %q", i+1, line)
			}
		}
	}
}

func TestWriteAtomicAndRemoveOwn(t *testing.T) {
	dir := t.TempDir()
	o := mustServer(t, "http://cache:5000")
	o.Registries = mustRegistries(t, "docker.io", "quay.io")
	files := Containerd(o)
	if err := Write(dir, files); err != nil {
		t.Fatal(err)
	}
	// Again, over the existing files: rename replaces them.
	if err := Write(dir, files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		got, err := os.ReadFile(p)
		if err != nil || string(got) != string(f.Data) {
			t.Fatalf("%s: %q, %v", p, got, err)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644", p, st.Mode().Perm())
		}
		entries, _ := os.ReadDir(filepath.Dir(p))
		if len(entries) != 1 {
			t.Errorf("%s: temp files left behind: %v", filepath.Dir(p), entries)
		}
	}

	// Ours: removed with its directory. Someone else's: left alone. Absent: nothing to do.
	if removed, err := RemoveOwn(dir, "quay.io/hosts.toml"); err != nil || !removed {
		t.Errorf("RemoveOwn(ours) = %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "quay.io")); !os.IsNotExist(err) {
		t.Errorf("quay.io directory still there: %v", err)
	}
	theirs := filepath.Join(dir, "docker.io", "hosts.toml")
	if err := os.WriteFile(theirs, []byte("server = \"https://registry-1.docker.io\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveOwn(dir, "docker.io/hosts.toml"); err != nil || removed {
		t.Errorf("RemoveOwn(theirs) = %v, %v", removed, err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("someone else's file was removed: %v", err)
	}
	if removed, err := RemoveOwn(dir, "ghcr.io/hosts.toml"); err != nil || removed {
		t.Errorf("RemoveOwn(absent) = %v, %v", removed, err)
	}
}
