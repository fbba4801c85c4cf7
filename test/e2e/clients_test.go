package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRealClientProcesses pulls through the cache with client programs as users run them: crane, skopeo and
// podman (with a registries.conf mirror, as the README tells users to write it).
func TestRealClientProcesses(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, aliases: [%q]}
`, reg.URL, reg.Host))
	ociDigest, _ := pushImage(t, reg.Host, "team/app:v1", "oci", 2, 2048)
	idxDigest, _ := pushIndex(t, reg.Host, "team/multi:v1")
	ref := c.Host + "/upstream.test/team/app:v1"

	t.Run("crane", func(t *testing.T) {
		crane := tool(t, "crane")
		if got := strings.TrimSpace(run(t, crane, "digest", "--insecure", ref)); got != ociDigest {
			t.Fatalf("crane digest %s, want %s", got, ociDigest)
		}
		out := filepath.Join(t.TempDir(), "app.tar")
		run(t, crane, "pull", "--insecure", ref, out)
		if st, err := os.Stat(out); err != nil || st.Size() < 4096 {
			t.Fatalf("crane pull wrote %v %v", st, err)
		}
		if got := strings.TrimSpace(run(t, crane, "digest", "--insecure", c.Host+"/upstream.test/team/multi:v1")); got != idxDigest {
			t.Fatalf("crane digest of the index %s, want %s", got, idxDigest)
		}
	})

	t.Run("skopeo", func(t *testing.T) {
		skopeo := systemTool(t, "skopeo")
		var inspect struct{ Digest string }
		out := run(t, skopeo, "inspect", "--tls-verify=false", "docker://"+ref)
		if err := json.Unmarshal([]byte(out), &inspect); err != nil || inspect.Digest != ociDigest {
			t.Fatalf("skopeo inspect: digest %q (%v), want %s", inspect.Digest, err, ociDigest)
		}
		dir := filepath.Join(t.TempDir(), "layout")
		run(t, skopeo, "copy", "--src-tls-verify=false", "docker://"+ref, "oci:"+dir+":v1")
		if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
			t.Fatalf("skopeo copy left no OCI layout: %v", err)
		}
	})

	t.Run("podman", func(t *testing.T) {
		podman := systemTool(t, "podman")
		if os.Getuid() != 0 {
			t.Skip("podman with vfs storage in a temp dir needs root here")
		}
		// podman refuses a runroot longer than 50 characters, so not t.TempDir().
		dir, err := os.MkdirTemp("/tmp", "pm-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		// The registry's own location is unreachable: a successful pull went through the mirror.
		conf := fmt.Sprintf(`[[registry]]
prefix = "upstream.test"
location = "127.0.0.1:1"
insecure = true

[[registry.mirror]]
location = "%s/upstream.test"
insecure = true
`, c.Host)
		write(t, filepath.Join(dir, "registries.conf"), conf)
		write(t, filepath.Join(dir, "storage.conf"), fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n",
			filepath.Join(dir, "run"), filepath.Join(dir, "root")))
		write(t, filepath.Join(dir, "policy.json"), `{"default":[{"type":"insecureAcceptAnything"}]}`)
		cmd := exec.CommandContext(t.Context(), podman, "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
			"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none",
			"pull", "--signature-policy", filepath.Join(dir, "policy.json"), "upstream.test/team/app:v1")
		cmd.Env = append(cleanEnv(), "CONTAINERS_REGISTRIES_CONF="+filepath.Join(dir, "registries.conf"),
			"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"), "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("podman pull through the mirror: %v\n%s", err, out)
		}
		if !strings.Contains(c.Log(), `"path":"/v2/upstream.test/team/app/manifests/v1"`) {
			t.Fatal("the cache's access log shows no manifest request from podman")
		}
	})
}

// run runs a client program with a clean environment and returns its stdout, failing the test on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Env = cleanEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// cleanEnv drops proxy settings so that loopback traffic goes where the test says.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// systemTool finds a Debian-packaged client, skipping when it is missing (hack/test-tools.sh installs it).
func systemTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: run hack/test-tools.sh (Debian package %s)", name, name)
	}
	return p
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
