package main

import (
	"net/url"
	"os"

	"github.com/spf13/cobra"
)

// maintenanceTargetHelp is appended to the Long help of gc and verify.
const maintenanceTargetHelp = `
Which store: --server asks that running server; else --storage or --config open that storage directly;
else $IMAGECACHE_SERVER, when set, names the running server to ask (as for the client commands); else the
storage at ./imagecache-data is opened. --token (or $IMAGECACHE_TOKEN) goes with a server.`

// bindMaintenanceFlags registers the storage flags of gc and verify and says in --server's help that
// $IMAGECACHE_SERVER stands in for it. (The flags themselves are storage.go's.)
func (o *storageOptions) bindMaintenanceFlags(cmd *cobra.Command) {
	o.flags(cmd)
	cmd.Flags().Lookup("server").Usage = "a running server's URL (e.g. http://127.0.0.1:5000): ask it instead of opening the storage (env IMAGECACHE_SERVER, unless --storage or --config is given)"
	cmd.Long += "\n" + maintenanceTargetHelp
}

// resolveTarget decides whether the command asks a running server (o.server is set on return) or opens a
// storage directly. A --server flag wins; an explicit --storage or --config comes next, since a person who
// names a storage means that one whatever their environment says; then $IMAGECACHE_SERVER, which the client
// commands honour too, so that `verify` in a shell set up for the client commands does not quietly report on
// an empty ./imagecache-data instead. It returns where the server came from, for messages.
func (o *storageOptions) resolveTarget(cmd *cobra.Command) (from string, err error) {
	flags := cmd.Flags()
	local := flags.Changed("storage") || flags.Changed("config")
	switch {
	case flags.Changed("server") && o.server != "" && local:
		return "", usagef(cmd, "--server asks a running server and --storage/--config open a storage directly: give one of them")
	case flags.Changed("server"):
		from = "--server"
	case !local && os.Getenv("IMAGECACHE_SERVER") != "":
		o.server, from = os.Getenv("IMAGECACHE_SERVER"), "IMAGECACHE_SERVER"
	}
	if o.server == "" {
		return "", nil
	}
	if u, err := url.Parse(o.server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", usagef(cmd, "%s %q: want a URL such as %s", from, o.server, defaultServer)
	}
	return from, nil
}
