package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerdUnknownRegistryFallsBack: a hosts.toml mirror for a registry the cache does not serve. The
// cache must not answer with its default upstream's repository of the same name (someone else's content
// under this registry's name): it refuses with NAME_UNKNOWN and containerd falls back to the registry.
func TestContainerdUnknownRegistryFallsBack(t *testing.T) {
	ctd := startContainerd(t) // skips without root or containerd, before anything else is started
	def := startRegistry(t, registryOpts{})
	other := startRegistry(t, registryOpts{})
	impostor, _ := pushImage(t, def.Host, "team/app:v1", "oci", 1, 4096)
	real, _ := pushImage(t, other.Host, "team/app:v1", "oci", 1, 4096)
	if impostor == real {
		t.Fatal("the two registries hold the same image; the test could not tell them apart")
	}
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
`, def.URL))

	hosts := t.TempDir()
	dir := filepath.Join(hosts, other.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", other.URL, "http://"+cache.Host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := other.Host + "/team/app:v1"
	if out, err := ctrPull(t, ctd.Socket, hosts, ref); err != nil {
		t.Fatalf("ctr pull %s: %v\n%s", ref, err, out)
	}
	cmd := exec.CommandContext(t.Context(), "ctr", "--address", ctd.Socket, "--namespace", "test", "images", "ls")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), real) || strings.Contains(string(out), impostor) {
		t.Fatalf("containerd has %s as:\n%s\nwant the registry's own %s, not the default upstream's %s", ref, out, real, impostor)
	}
	// What containerd was told before it fell back.
	a := call(t, "GET", cache.URL+"/v2/team/app/manifests/v1?ns="+other.Host)
	if code, msg := a.ociError(); a.Status != 404 || code != "NAME_UNKNOWN" || !strings.Contains(msg, "never served in its place") {
		t.Errorf("manifest with ?ns= of a registry the cache does not serve: %d %s %q; want 404 NAME_UNKNOWN saying why", a.Status, code, msg)
	}
}
