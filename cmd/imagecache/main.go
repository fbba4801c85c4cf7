// Command imagecache is a pull-through cache for container images, OCI artifacts and HTTP files.
// This file and its siblings only wire the internal packages together.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/reqlog"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module version is used.
var version = ""

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "imagecache:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "imagecache",
		Short: "A pull-through cache for container images, OCI artifacts and HTTP files",
		Long: `imagecache downloads container images and files once, serves them locally at disk speed,
keeps them within a size limit, refreshes tags by the rules you choose, and keeps serving them
when the upstream is down.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newVersionCommand())
	root.AddCommand(newGCCommand())
	root.AddCommand(newFetchCommand())
	root.AddCommand(newVerifyCommand())
	root.AddCommand(newNodeConfigCommand())
	root.AddCommand(newPullCommand())
	root.AddCommand(newLsCommand())
	root.AddCommand(newRmCommand())
	root.AddCommand(newStatsCommand())
	root.AddCommand(newRefreshCommand())
	root.AddCommand(newCACommand())
	setUsageErrors(root)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of imagecache",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "imagecache", buildVersion(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		v := info.Main.Version
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
		return v
	}
	return "unknown"
}

// newLogger logs text to a terminal and JSON otherwise, unless format says which.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == "" || format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(reqlog.Handler{Handler: slog.NewJSONHandler(w, opts)}), nil
	case "text":
		return slog.New(reqlog.Handler{Handler: slog.NewTextHandler(w, opts)}), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}
