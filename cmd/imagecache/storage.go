package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/store"
)

// storageOptions are the flags of the maintenance commands: which storage (a stopped server's, opened
// directly) or which running server to work on.
type storageOptions struct {
	config, storage, server, token string
}

func (o *storageOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.config, "config", "c", "", "config file whose storage (path, maxSize) to use")
	cmd.Flags().StringVar(&o.storage, "storage", "", "storage path (default: the config's storage.path, or ./imagecache-data)")
	cmd.Flags().StringVar(&o.server, "server", "", "a running server's URL (e.g. http://127.0.0.1:5000): ask it instead of opening the storage")
	cmd.Flags().StringVar(&o.token, "token", "", "with --server: the server's admin.token (env IMAGECACHE_TOKEN)")
}

// open opens the storage directly; it fails with advice when a running server holds it.
func (o *storageOptions) open() (*store.Store, *config.Config, error) {
	cfg := config.Default()
	if o.config != "" {
		var err error
		if cfg, err = config.Load(o.config); err != nil {
			return nil, nil, err
		}
	}
	if o.storage != "" {
		cfg.Storage.Path = o.storage
	}
	st, err := store.Open(cfg.Storage.Path)
	if err != nil && strings.Contains(err.Error(), "locked by another process") {
		return nil, nil, fmt.Errorf("%w; to work on a running server, pass --server http://<its address>", err)
	}
	return st, cfg, err
}

// postJSON POSTs to a running server's admin API (with token, when not empty, or IMAGECACHE_TOKEN) and
// decodes its JSON answer into out.
func postJSON(server, token, path string, out any) error {
	url := strings.TrimSuffix(server, "/") + path
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return fmt.Errorf("--server %q: %w", server, err)
	}
	setToken(req, token)
	resp, err := (&http.Client{Timeout: 30 * time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("ask the server: %w (is it running at %s?)", err, server)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("POST %s: %s", url, e.Error)
		}
		return fmt.Errorf("POST %s: status %d: %.200s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// setToken sends the admin token: token, else IMAGECACHE_TOKEN, else none.
func setToken(req *http.Request, token string) {
	if token == "" {
		token = os.Getenv("IMAGECACHE_TOKEN")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}
