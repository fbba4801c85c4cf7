package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeEmbeddedDefault runs serve with no config at all (only the address and storage moved into the
// test's reach) and checks that it mirrors the well-known registries and says how to use it.
func TestServeEmbeddedDefault(t *testing.T) {
	bin := buildImagecache(t)
	addr, storage := freeAddr(t), filepath.Join(t.TempDir(), "data")
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logFile, _ := os.Create(logPath)
	defer logFile.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--storage", storage)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitFor(t, 20*time.Second, "serve answers /v2/", func() error {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
			t.Fatalf("/v2/ lacks Docker-Distribution-API-Version: %v", resp.Header)
		}
		return nil
	})
	log, _ := os.ReadFile(logPath)
	for _, want := range []string{"docker.io=https://registry-1.docker.io (default)", "ghcr.io=https://ghcr.io", "quay.io=https://quay.io",
		"registry.k8s.io=https://registry.k8s.io", "gcr.io=https://gcr.io", "mcr.microsoft.com=https://mcr.microsoft.com",
		"public.ecr.aws=https://public.ecr.aws", "hosts.toml", "registry-mirrors"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("startup log does not mention %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(filepath.Join(storage, "index.db")); err != nil {
		t.Errorf("storage not created at --storage: %v", err)
	}
	// SIGTERM stops it cleanly.
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s of SIGINT")
	}
}

// TestServeRefusesToStart: each mistake stops serve at once with a non-zero exit and a message that names
// what is wrong.
func TestServeRefusesToStart(t *testing.T) {
	bin := buildImagecache(t)
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	notADir := filepath.Join(dir, "file")
	os.WriteFile(notADir, nil, 0o644)

	for _, tc := range []struct {
		name, config string
		args         []string
		wants        []string
	}{
		{"unknown key", "listen: 127.0.0.1:0\nstorage:\n  maxsize: 1Gi\n", nil, []string{"config.yaml:3", "storage.maxsize", "maxSize"}},
		{"bad duration", "defaultPolicy:\n  upstreamTimeout: soon\n", nil, []string{"config.yaml:2", "defaultPolicy.upstreamTimeout", "soon"}},
		{"bad pull word", "policies:\n  - match: {tag: latest}\n    pull: Sometimes\n", nil, []string{"config.yaml:3", "policies[0].pull", "Always, IfNotPresent or Never"}},
		{"name with a port", "upstreams:\n  - {name: \"localhost:5000\", url: \"http://localhost:5000\"}\n", nil, []string{"config.yaml:2", "upstreams[0].name", "aliases"}},
		{"bad quantity", "storage:\n  maxSize: lots\n", nil, []string{"config.yaml:2", "storage.maxSize"}},
		{"missing config file", "", []string{"--config", filepath.Join(dir, "missing.yaml")}, []string{"missing.yaml", "no such file"}},
		{"port in use", "", []string{"--listen", busy.Addr().String()}, []string{busy.Addr().String(), "--listen"}},
		{"storage not usable", "", []string{"--storage", notADir}, []string{notADir}},
		{"unknown flag", "", []string{"--bogus"}, []string{"unknown flag: --bogus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"serve", "--listen", "127.0.0.1:0", "--storage", filepath.Join(t.TempDir(), "data")}
			if tc.config != "" {
				path := filepath.Join(t.TempDir(), "config.yaml")
				os.WriteFile(path, []byte(tc.config), 0o644)
				args = append(args, "--config", path)
			}
			args = append(args, tc.args...)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("serve kept running with a bad setup:\n%s", out)
			}
			if err == nil {
				t.Fatalf("serve exited 0:\n%s", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(string(out), w) {
					t.Errorf("message does not mention %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(buildImagecache(t), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "imagecache ") {
		t.Fatalf("version: %v %q", err, out)
	}
}
