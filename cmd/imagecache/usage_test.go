package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// execute runs the command tree in process with args and returns its error.
func execute(args ...string) error {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	return root.Execute()
}

// commandPaths lists every command under root as the words that call it ("ca init"), root itself as "".
func commandPaths(cmd *cobra.Command) []string {
	paths := []string{strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()), " ")}
	for _, sub := range cmd.Commands() {
		paths = append(paths, commandPaths(sub)...)
	}
	return paths
}

// TestEveryCommandFlagErrorExits2 walks the real tree, so that a command added later is covered too.
func TestEveryCommandFlagErrorExits2(t *testing.T) {
	paths := commandPaths(newRootCommand())
	if len(paths) < 15 {
		t.Fatalf("only %d commands found: %q", len(paths), paths)
	}
	for _, path := range paths {
		words := strings.Fields(path)
		for _, bad := range [][]string{{"--bogus"}, {"-Z"}} {
			err := execute(append(words, bad...)...)
			if err == nil || exitCode(err) != exitUsage {
				t.Errorf("%s %s: %v (exit %d), want exit %d", strings.TrimSpace("imagecache "+path), bad[0], err, exitCode(err), exitUsage)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, strings.TrimLeft(bad[0], "-")) || !strings.Contains(msg, "--help") {
				t.Errorf("%s %s: %q, want one line naming the flag and pointing to --help", strings.TrimSpace("imagecache "+path), bad[0], msg)
			}
		}
	}
}

func TestArgumentErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"version", "extra"}, {"serve", "extra"}, {"fetch", "extra"}, {"gc", "extra"}, {"verify", "extra"},
		{"node-config", "extra"}, {"ca", "bogus"}, {"ca", "init", "extra"}, {"ca", "print", "extra"},
		{"rm"}, {"refresh", "a", "b"}, {"bogus"},
		{"fetch", "--timeout", "soon"}, {"gc", "-o", "xml"}, {"verify", "-o", "xml"},
		{"verify", "--server", "http://127.0.0.1:1", "--storage", "x"}, {"gc", "--server", "http://127.0.0.1:1", "--config", "x"},
		{"gc", "--server", "http://127.0.0.1:1", "--max-size", "1Gi"}, {"verify", "--server", "127.0.0.1:5000"},
	} {
		err := execute(args...)
		if err == nil || exitCode(err) != exitUsage || strings.Contains(err.Error(), "\n") {
			t.Errorf("imagecache %s: %v, want a one-line usage error (exit %d)", strings.Join(args, " "), err, exitUsage)
		}
	}
}

// TestGroupCommandAloneIsHelp: `ca` alone still shows its help and succeeds.
func TestGroupCommandAloneIsHelp(t *testing.T) {
	if err := execute("ca"); err != nil {
		t.Fatalf("imagecache ca: %v", err)
	}
}
