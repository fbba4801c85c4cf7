package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/nodeconfig"
)

type nodeConfigOptions struct {
	server      string
	registries  []string
	skip        []string
	format      string
	out         string
	dialTimeout time.Duration
}

func newNodeConfigCommand() *cobra.Command {
	var o nodeConfigOptions
	cmd := &cobra.Command{
		Use:   "node-config",
		Short: "Print or write containerd hosts.toml / CRI-O registries.conf that pull through the cache",
		Long: `Render the files that make a node's container runtime (and so the kubelet) pull through imagecache,
falling back to the registry itself when the cache cannot be reached.

--server is the URL nodes reach the cache at: a Service name when the runtime can resolve it, or a
NodePort / hostNetwork address. Each --registry is a registry host that images name (docker.io, ghcr.io,
10.0.0.5:5000); it must be the name or an alias of one of the cache's upstreams. For a registry on a port,
CRI-O addresses the cache by path and needs the upstream's name: --registry 10.0.0.5:5000=local.

--format containerd (the default) renders <registry>/hosts.toml for containerd's config_path
(/etc/containerd/certs.d): the cache as a pull+resolve mirror with a short dial_timeout (honoured from
containerd 2.1; older versions ignore it and wait up to 30s for an unreachable cache), then the registry
as the fallback server. An http:// --server is plain HTTP.
--format crio renders one registries.conf drop-in, ` + nodeconfig.CRIOFile + `, for /etc/containers/registries.conf.d
(CRI-O and podman): one [[registry]] per registry with the cache as its [[registry.mirror]].

--skip leaves a registry out. Skip the registry that hosts imagecache's own image: a node must be able
to pull imagecache itself while imagecache is down (at the first install, on a node that lost it, after
a crash), and a mirror entry pointing at the cache would make that pull wait on the cache first. The
runtime configuration is per registry, so the whole registry is skipped. With --out, a hosts.toml that
an earlier run wrote for a skipped registry is removed.

Without --out every file is printed, each after a "# ---- <path> ----" line. With --out DIR the files
are written atomically under DIR (DIR/<registry>/hosts.toml, or DIR/` + nodeconfig.CRIOFile + `). containerd
reads hosts.toml at every pull; CRI-O reads registries.conf.d when it starts or is reloaded (SIGHUP).`,
		Example: `  # See what nodes would get:
  imagecache node-config --server http://imagecache.imagecache.svc:5000 --registry docker.io --registry ghcr.io

  # In a DaemonSet's init container, with the host's /etc/containerd/certs.d mounted (imagecache's own
  # image comes from quay.io, which stays unmirrored):
  imagecache node-config --server http://10.0.0.10:30500 --out /host/etc/containerd/certs.d \
    --registry docker.io --registry ghcr.io --registry quay.io --registry registry.k8s.io --skip quay.io

  # CRI-O / podman:
  imagecache node-config --format crio --server http://10.0.0.10:30500 --registry docker.io \
    --registry 10.0.0.5:5000=local --out /host/etc/containers/registries.conf.d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNodeConfig(o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "URL nodes reach the cache at, e.g. http://imagecache.imagecache.svc:5000 (required)")
	f.StringArrayVar(&o.registries, "registry", nil, "registry host to pull through the cache, HOST or HOST=UPSTREAM-NAME (repeatable, at least one)")
	f.StringArrayVar(&o.skip, "skip", nil, "registry host to leave out, e.g. the one hosting imagecache's own image (repeatable)")
	f.StringVar(&o.format, "format", "containerd", "containerd (hosts.toml per registry) or crio (registries.conf drop-in)")
	f.StringVar(&o.out, "out", "", "directory to write the files into (default: print them)")
	f.DurationVar(&o.dialTimeout, "dial-timeout", 2*time.Second, "containerd 2.1+: give up connecting to the cache after this long and use the registry (0: leave it to containerd, 30s)")
	return cmd
}

func runNodeConfig(o nodeConfigOptions, stdout io.Writer) error {
	if o.format != "containerd" && o.format != "crio" {
		return fmt.Errorf("--format %q: want containerd or crio", o.format)
	}
	if o.server == "" {
		return errors.New("--server is required: the URL nodes reach the cache at, like http://imagecache.imagecache.svc:5000")
	}
	server, err := nodeconfig.ParseServer(o.server)
	if err != nil {
		return err
	}
	if len(o.registries) == 0 {
		return errors.New("no --registry: name at least one registry host to pull through the cache, like --registry docker.io")
	}
	if o.dialTimeout < 0 {
		return fmt.Errorf("--dial-timeout %s: want a positive duration, or 0 to leave it out", o.dialTimeout)
	}
	for _, s := range o.skip {
		if r, err := nodeconfig.ParseRegistry(s); err != nil || r.Host != s {
			return fmt.Errorf("--skip %q: want a registry host as image references name it, like quay.io", s)
		}
	}
	opts := nodeconfig.Options{Server: server, DialTimeout: o.dialTimeout}
	for _, s := range o.registries {
		r, err := nodeconfig.ParseRegistry(s)
		if err != nil {
			return err
		}
		switch {
		case slices.Contains(o.skip, r.Host):
		case slices.ContainsFunc(opts.Registries, func(x nodeconfig.Registry) bool { return x.Host == r.Host }):
			// named twice: once is enough
		default:
			opts.Registries = append(opts.Registries, r)
		}
	}
	if len(opts.Registries) == 0 {
		return fmt.Errorf("every --registry is skipped (%v): nothing to pull through the cache", o.skip)
	}

	var files []nodeconfig.File
	if o.format == "crio" {
		f, err := nodeconfig.CRIO(opts)
		if err != nil {
			return err
		}
		files = []nodeconfig.File{f}
	} else {
		files = nodeconfig.Containerd(opts)
	}

	if o.out == "" {
		for _, f := range files {
			fmt.Fprintf(stdout, "# ---- %s ----\n%s", f.Path, f.Data)
		}
		return nil
	}
	if err := nodeconfig.Write(o.out, files); err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stdout, "wrote", filepath.Join(o.out, filepath.FromSlash(f.Path)))
	}
	if o.format == "containerd" {
		for _, h := range o.skip {
			p := h + "/hosts.toml"
			removed, err := nodeconfig.RemoveOwn(o.out, p)
			if err != nil {
				return err
			}
			if removed {
				fmt.Fprintln(stdout, "removed", filepath.Join(o.out, filepath.FromSlash(p)), "(skipped)")
			}
		}
	}
	return nil
}
