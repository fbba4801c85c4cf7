package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// containerdProc is a private containerd (its own root, state and socket), without the CRI plugin, for
// pulling through the cache with a real runtime's resolver (hosts.toml mirrors, ?ns=).
type containerdProc struct {
	proc
	Socket string
	Root   string
}

// startContainerd starts containerd and waits until ctr can talk to it. It skips the test when containerd
// cannot run here (not root, not installed) since that is the machine, not the code under test.
func startContainerd(t testing.TB) *containerdProc {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Skip("containerd is not installed: run hack/test-tools.sh (Debian package containerd)")
	}
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("ctr is not installed: run hack/test-tools.sh (Debian package containerd)")
	}
	dir := t.TempDir()
	// A unix socket path must stay under ~108 bytes; t.TempDir() paths (with the test name) can be longer.
	short, err := os.MkdirTemp("/tmp", "ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(short) })
	c := &containerdProc{Socket: filepath.Join(short, "c.sock"), Root: filepath.Join(dir, "root")}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[debug]
  level = "info"
`, c.Root, filepath.Join(short, "state"), c.Socket)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.proc = proc{name: "containerd", path: bin, args: []string{"--config", cfgPath}, logPath: filepath.Join(dir, "containerd.log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd log tail (%s):\n%s", c.logPath, c.logTail(4096))
		}
		c.proc.stop(t, 10*time.Second)
	})
	c.start(t)
	waitFor(t, 20*time.Second, "containerd answers ctr version", func() error {
		if !c.running() {
			t.Fatalf("containerd exited while starting (%v); log:\n%s", c.waitErr, c.logTail(4096))
		}
		out, err := exec.Command("ctr", "--address", c.Socket, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	return c
}

// ctrPull pulls ref with ctr over plain HTTP, resolving hosts through hostsDir (see writeHostsTOML).
// It returns ctr's combined output, for the test to check or show.
func ctrPull(t testing.TB, sock, hostsDir, ref string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "ctr", "--address", sock, "--namespace", "test",
		"images", "pull", "--plain-http", "--hosts-dir", hostsDir, ref)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// writeHostsTOML configures containerd so that registryHost is reached only through mirror (host:port,
// plain HTTP). The server itself is unreachable (127.0.0.1:1), so a pull that works went through the mirror.
// It returns the hosts directory to pass to ctrPull.
func writeHostsTOML(t testing.TB, hostsDir, registryHost, mirror string) string {
	t.Helper()
	if hostsDir == "" {
		hostsDir = t.TempDir()
	}
	dir := filepath.Join(hostsDir, registryHost)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf(`server = "http://127.0.0.1:1"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, mirror)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return hostsDir
}
