package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeConfig runs the built `imagecache node-config` with args and returns stdout, stderr and the error.
func nodeConfig(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), buildImagecache(t), append([]string{"node-config"}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// nodeConfigCache is an upstream registry holding one image, and a cache whose upstream is named
// upstream.test with the registry's 127.0.0.1:PORT as an alias: the name nodes pull by.
func nodeConfigCache(t *testing.T) (*registryProc, *cacheProc, string) {
	t.Helper()
	reg := startRegistry(t, registryOpts{})
	digest, _ := pushImage(t, reg.Host, "nodecfg/app:v1", "oci", 2, 4096)
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    aliases: [%q]
`, reg.URL, reg.Host))
	return reg, cache, digest
}

// TestNodeConfigContainerd writes hosts.toml with node-config, checks it line by line, cuts the fallback
// server off, and pulls with ctr through it: only the cache can have served the image. ctr runs without
// --plain-http, so plain HTTP to the cache comes from the file's http:// host alone. containerd 1.6
// (Debian 12) has no dial_timeout (containerd 2.1 added it): this pull proves it accepts the file with the
// key in it. A hosts.toml it cannot decode is only logged ("failed to decode hosts.toml") and replaced by
// the registry itself, which 1.6.20 then reaches over plain HTTP since it is on loopback: hence both the
// log check and the check that the cache served the manifest.
func TestNodeConfigContainerd(t *testing.T) {
	ctd := startContainerd(t) // skips without root or containerd
	reg, cache, digest := nodeConfigCache(t)
	dir := t.TempDir()

	stdout, stderr, err := nodeConfig(t, "--server", cache.URL, "--registry", reg.Host, "--out", dir)
	if err != nil {
		t.Fatalf("node-config: %v\n%s", err, stderr)
	}
	path := filepath.Join(dir, reg.Host, "hosts.toml")
	if !strings.Contains(stdout, "wrote "+path) {
		t.Errorf("node-config did not say it wrote %s:\n%s", path, stdout)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// No TOML module in the build: the file is small enough to hold to its exact lines.
	want := fmt.Sprintf(`# Written by imagecache node-config: pull %[1]s through the cache, falling back to the registry.
server = "https://%[1]s"

[host."%[2]s"]
  capabilities = ["pull", "resolve"]
  dial_timeout = "2s"
`, reg.Host, cache.URL)
	if string(data) != want {
		t.Fatalf("%s:\n%s\nwant:\n%s", path, data, want)
	}

	// The same file on stdout without --out, under its header.
	printed, stderr, err := nodeConfig(t, "--server", cache.URL, "--registry", reg.Host)
	if err != nil {
		t.Fatalf("node-config to stdout: %v\n%s", err, stderr)
	}
	if wantOut := "# ---- " + reg.Host + "/hosts.toml ----\n" + want; printed != wantOut {
		t.Errorf("stdout:\n%s\nwant:\n%s", printed, wantOut)
	}

	// Only the mirror can serve now.
	cut := strings.Replace(string(data), `server = "https://`+reg.Host+`"`, `server = "https://127.0.0.1:1"`, 1)
	if cut == string(data) {
		t.Fatal("no server line to replace")
	}
	write(t, path, cut)

	cmd := exec.CommandContext(t.Context(), "ctr", "--address", ctd.Socket, "--namespace", "test",
		"images", "pull", "--hosts-dir", dir, reg.Host+"/nodecfg/app:v1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctr pull through the node-config mirror: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "failed to decode hosts.toml") {
		t.Errorf("containerd rejected the hosts.toml:\n%s", out)
	}
	if !strings.Contains(string(out), "unpacking linux/amd64") {
		t.Errorf("ctr did not unpack the image:\n%s", out)
	}
	log := cache.Log()
	if !strings.Contains(log, `"path":"/v2/nodecfg/app/manifests/v1"`) {
		t.Errorf("the cache's access log shows no manifest request from containerd")
	}
	ls, err := exec.Command("ctr", "--address", ctd.Socket, "--namespace", "test", "images", "ls").CombinedOutput()
	if err != nil || !strings.Contains(string(ls), digest) {
		t.Errorf("ctr images ls does not list %s (%v):\n%s", digest, err, ls)
	}
}

// TestNodeConfigCRIO writes the registries.conf drop-in, checks its lines, cuts the registry's own
// location off and inspects the image with skopeo through it (containers/image, the library CRI-O and
// podman pull with).
func TestNodeConfigCRIO(t *testing.T) {
	skopeo := systemTool(t, "skopeo")
	reg, cache, digest := nodeConfigCache(t)
	dir := t.TempDir()

	// A registry on a port is no path component: CRI-O needs the upstream's name.
	if _, stderr, err := nodeConfig(t, "--format", "crio", "--server", cache.URL, "--registry", reg.Host, "--out", dir); err == nil ||
		!strings.Contains(stderr, reg.Host+"=<name>") {
		t.Errorf("crio with a host:port and no name: %v, %s", err, stderr)
	}
	if _, stderr, err := nodeConfig(t, "--format", "crio", "--server", cache.URL, "--registry", reg.Host+"=upstream.test",
		"--registry", "docker.io", "--skip", "docker.io", "--out", dir); err != nil {
		t.Fatalf("node-config --format crio: %v\n%s", err, stderr)
	}
	path := filepath.Join(dir, "50-imagecache.conf")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`# Written by imagecache node-config: pull through the cache at %[2]s, falling back to each registry.

[[registry]]
prefix = "%[1]s"
location = "%[1]s"

[[registry.mirror]]
location = "%[3]s/upstream.test"
insecure = true
`, reg.Host, cache.URL, cache.Host)
	if string(data) != want {
		t.Fatalf("%s:\n%s\nwant (docker.io skipped):\n%s", path, data, want)
	}

	cut := strings.Replace(string(data), `location = "`+reg.Host+`"`, `location = "127.0.0.1:1"`, 1)
	write(t, path, cut)
	// --no-tags: the tag list comes from the registry's own location, never from a mirror.
	out := run(t, skopeo, "--registries-conf", path, "inspect", "--no-tags", "--retry-times", "0", "docker://"+reg.Host+"/nodecfg/app:v1")
	var inspect struct{ Digest string }
	if err := json.Unmarshal([]byte(out), &inspect); err != nil || inspect.Digest != digest {
		t.Fatalf("skopeo inspect through the mirror: digest %q (%v), want %s", inspect.Digest, err, digest)
	}
	if !strings.Contains(cache.Log(), `"path":"/v2/upstream.test/nodecfg/app/manifests/v1"`) {
		t.Error("the cache's access log shows no manifest request from skopeo")
	}
}

// TestNodeConfigSkipRemovesOwnFile: a registry skipped on a later run loses the hosts.toml an earlier run
// wrote, so it is no longer mirrored; a file someone else wrote stays.
func TestNodeConfigSkipRemovesOwnFile(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--server", "http://10.0.0.10:30500", "--registry", "docker.io", "--registry", "quay.io", "--registry", "ghcr.io", "--out", dir}
	if _, stderr, err := nodeConfig(t, args...); err != nil {
		t.Fatalf("node-config: %v\n%s", err, stderr)
	}
	theirs := filepath.Join(dir, "ghcr.io", "hosts.toml")
	write(t, theirs, "server = \"https://ghcr.io\"\n")
	stdout, stderr, err := nodeConfig(t, append(args, "--skip", "quay.io", "--skip", "ghcr.io")...)
	if err != nil {
		t.Fatalf("node-config --skip: %v\n%s", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "quay.io")); !os.IsNotExist(err) {
		t.Errorf("quay.io/hosts.toml from the first run is still there (%v); stdout:\n%s", err, stdout)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("a hosts.toml node-config did not write was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "docker.io", "hosts.toml")); err != nil {
		t.Error(err)
	}
}

// TestNodeConfigErrors: bad input gets an error that names the flag, exit status 1, and nothing on stdout.
func TestNodeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--registry", "docker.io"}, "--server is required"},
		{[]string{"--server", "imagecache:5000", "--registry", "docker.io"}, `--server "imagecache:5000"`},
		{[]string{"--server", "http://imagecache:5000/v2", "--registry", "docker.io"}, "only scheme, host and port"},
		{[]string{"--server", "http://imagecache:5000"}, "no --registry"},
		{[]string{"--server", "http://imagecache:5000", "--registry", "https://docker.io"}, "not a URL"},
		{[]string{"--server", "http://imagecache:5000", "--registry", "docker.io", "--format", "cri-o"}, `--format "cri-o": want containerd or crio`},
		{[]string{"--server", "http://imagecache:5000", "--registry", "docker.io", "--skip", "docker.io"}, "every --registry is skipped"},
	} {
		stdout, stderr, err := nodeConfig(t, tc.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%v: %v, want exit status 1", tc.args, err)
		}
		if !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: stderr %q, stdout %q; want an error with %q", tc.args, stderr, stdout, tc.want)
		}
	}
	out, _, err := nodeConfig(t, "--help")
	if err != nil || !strings.Contains(out, "--skip") || !strings.Contains(out, "imagecache's own image") || !strings.Contains(out, "Examples:") {
		t.Errorf("--help (%v):\n%s", err, out)
	}
}
