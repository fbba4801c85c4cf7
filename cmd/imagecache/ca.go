package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/proxy"
)

// caOptions say where the proxy's CA lives: --dir, else the config's proxy.ca files, else the storage path
// (--storage or the config's storage.path), which is where serve looks by default.
type caOptions struct {
	config, storage, dir string
	force                bool
}

func (o *caOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&o.config, "config", "c", "", "config file whose proxy.ca files (or storage.path) to use")
	f.StringVar(&o.storage, "storage", "", "storage path: the CA is ca.crt and ca.key in it (default: the config's storage.path, or ./imagecache-data)")
	f.StringVar(&o.dir, "dir", "", "directory for ca.crt and ca.key instead (e.g. to create a Kubernetes Secret from)")
}

func (o *caOptions) paths() (certFile, keyFile string, err error) {
	if o.dir != "" {
		if o.storage != "" {
			return "", "", errors.New("--dir and --storage both say where the CA goes; pass one")
		}
		return filepath.Join(o.dir, "ca.crt"), filepath.Join(o.dir, "ca.key"), nil
	}
	cfg := config.Default()
	if o.config != "" {
		if cfg, err = config.Load(o.config); err != nil {
			return "", "", err
		}
	}
	if o.storage != "" {
		cfg.Storage.Path = o.storage
	}
	certFile, keyFile = caFiles(cfg)
	return certFile, keyFile, nil
}

// caFiles is where serve reads the proxy's CA: proxy.ca.certFile/keyFile, or ca.crt and ca.key in the
// storage path.
func caFiles(cfg *config.Config) (certFile, keyFile string) {
	if cfg.Proxy != nil && cfg.Proxy.CA.CertFile != "" {
		return cfg.Proxy.CA.CertFile, cfg.Proxy.CA.KeyFile
	}
	return filepath.Join(cfg.Storage.Path, "ca.crt"), filepath.Join(cfg.Storage.Path, "ca.key")
}

func newCACommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage the CA of the intercepting proxy",
		Long: `The intercepting proxy (proxy: in the config) answers HTTPS for the upstreams' hosts with certificates
signed by imagecache's own CA. Clients that use the proxy must trust that CA: give them the output of
'imagecache ca print' (kapp-controller's caCerts, SSL_CERT_FILE, the system trust store).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newCAInitCommand(), newCAPrintCommand())
	return cmd
}

func newCAInitCommand() *cobra.Command {
	var o caOptions
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the proxy's CA (ca.crt and ca.key) where serve finds it",
		Long: `Create a new CA for the intercepting proxy: an ECDSA P-256 key (written with mode 0600 and never printed)
and a self-signed certificate valid for 10 years. By default they go into the storage path as ca.crt and
ca.key, where 'imagecache serve' looks for them; proxy.ca.certFile/keyFile in the config choose other files.
An existing CA is kept unless --force is given, because clients already trust it.`,
		Example: `  imagecache ca init --config /etc/imagecache/config.yaml
  imagecache ca init --storage /var/lib/imagecache
  imagecache ca init --dir ./ca && kubectl -n imagecache create secret generic imagecache-ca --from-file=./ca`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certFile, keyFile, err := o.paths()
			if err != nil {
				return err
			}
			if err := proxy.WriteNewCA(certFile, keyFile, o.force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created the proxy CA: certificate %s, key %s (keep the key private)\n", certFile, keyFile)
			fmt.Fprintln(cmd.OutOrStdout(), "give clients the certificate: imagecache ca print"+o.echoFlags())
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVar(&o.force, "force", false, "replace an existing CA (clients must then be given the new certificate)")
	return cmd
}

func newCAPrintCommand() *cobra.Command {
	var o caOptions
	cmd := &cobra.Command{
		Use:   "print",
		Short: "Print the proxy CA's certificate (PEM) for clients to trust",
		Example: `  imagecache ca print --config /etc/imagecache/config.yaml > imagecache-ca.crt
  kubectl -n imagecache exec imagecache-0 -- imagecache ca print --storage /var/lib/imagecache`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certFile, keyFile, err := o.paths()
			if err != nil {
				return err
			}
			ca, _, err := loadProxyCA(certFile, keyFile)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(ca.PEM())
			return err
		},
	}
	o.flags(cmd)
	return cmd
}

func (o *caOptions) echoFlags() string {
	switch {
	case o.dir != "":
		return " --dir " + o.dir
	case o.storage != "":
		return " --storage " + o.storage
	case o.config != "":
		return " --config " + o.config
	}
	return ""
}

// loadProxyCA loads the CA and says how to make one when there is none. warning is set when the key is
// readable by every user.
func loadProxyCA(certFile, keyFile string) (ca *proxy.CA, warning string, err error) {
	ca, err = proxy.LoadCA(certFile, keyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("the proxy needs a CA and there is none (%w): run `imagecache ca init` with the same --config/--storage "+
			"(or set proxy.ca.certFile and keyFile to an existing CA)", err)
	}
	if err != nil {
		return nil, "", err
	}
	if fi, err := os.Stat(keyFile); err == nil && fi.Mode().Perm()&0o004 != 0 {
		// Not fatal: a mounted Kubernetes Secret is 0644 unless its volume says otherwise.
		warning = fmt.Sprintf("the CA key %s is readable by every user (mode %v); chmod 600 it (or defaultMode: 0440 on a Secret volume)", keyFile, fi.Mode().Perm())
	}
	return ca, warning, nil
}
