package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/progress"
	"imagecache.io/imagecache/internal/store"
)

// Exit codes of `imagecache verify`; 1 (could not run) is main's for any error.
const (
	verifyExitClean   = 0
	verifyExitDamaged = 2
)

type verifyOptions struct {
	storageOptions
	output string
}

func newVerifyCommand() *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Re-hash every stored object; move corrupt ones aside so they are fetched again",
		Long: `Re-hash every object in the store against its digest. A corrupt file is moved to <storage>/corrupt/
and its index record dropped, so the next request fetches it again from the upstream; an index record
whose file is gone is dropped the same way; a file under blobs/ with no index record (left by a crash)
is removed.

Works on a stopped server's storage (--storage, or --config for its storage.path), or on a running
server with --server, which verifies while it keeps serving.

Exit status: 0 when everything was intact, 2 when corrupt or missing objects were found (and repaired:
they will be fetched again), 1 when the verify could not run. A wrong command line (unknown flag, an -o
value, --server together with --storage or --config) also exits 2, with a one-line error and nothing
verified: tell the two apart by the report on stdout, which only a run prints.`,
		Example: `  imagecache verify --storage /var/lib/imagecache
  imagecache verify --config /etc/imagecache/config.yaml -o json
  imagecache verify --server http://127.0.0.1:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "text" && o.output != "json" {
				return usagef(cmd, "-o %q: want text or json", o.output)
			}
			if _, err := o.resolveTarget(cmd); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			code, err := runVerify(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if code != verifyExitClean {
				// main knows only 0 and 1; everything was closed and printed by now.
				os.Exit(code)
			}
			return nil
		},
	}
	// --server with --storage or --config is refused by resolveTarget as a usage error; cobra's
	// MarkFlagsMutuallyExclusive would return a plain error, which exits 1.
	o.storageOptions.bindMaintenanceFlags(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return cmd
}

// runVerify verifies and prints the report, and returns the exit code it calls for.
func runVerify(ctx context.Context, o verifyOptions, stdout, stderr io.Writer) (int, error) {
	var rep store.VerifyReport
	var err error
	if o.server != "" {
		rep, err = verifyOnServer(ctx, o.server, o.token, stderr)
	} else {
		rep, err = verifyStorage(ctx, o.storageOptions, stderr)
	}
	if err != nil {
		return 1, err
	}
	if err := printVerifyReport(stdout, rep, o.output); err != nil {
		return 1, err
	}
	if rep.Damaged() {
		return verifyExitDamaged, nil
	}
	return verifyExitClean, nil
}

// verifyStorage opens a stopped server's storage directly and verifies it with a progress display.
func verifyStorage(ctx context.Context, o storageOptions, stderr io.Writer) (store.VerifyReport, error) {
	path, err := verifyStoragePath(o)
	if err != nil {
		return store.VerifyReport{}, err
	}
	// Check before opening: opening the store empties its tmp/, which would pull the files of a running
	// server's downloads from under it.
	if err := checkStorageFree(path); err != nil {
		return store.VerifyReport{}, err
	}
	st, err := store.Open(path)
	if err != nil {
		return store.VerifyReport{}, err
	}
	defer st.Close()
	bar := progress.New(stderr, "verify")
	rep, err := st.Verify(ctx, bar.Update)
	bar.Finish()
	return rep, err
}

// verifyStoragePath is --storage, else the config's storage.path, else the default.
func verifyStoragePath(o storageOptions) (string, error) {
	if o.storage != "" {
		return o.storage, nil
	}
	cfg := config.Default()
	if o.config != "" {
		var err error
		if cfg, err = config.Load(o.config); err != nil {
			return "", err
		}
	}
	return cfg.Storage.Path, nil
}

// checkStorageFree fails when path holds no store (verifying a mistyped path would create an empty one and
// call it clean) or when a running server holds its index.
func checkStorageFree(path string) error {
	dbPath := filepath.Join(path, "index.db")
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("no imagecache storage at %s (%v): pass the storage path with --storage or --config", path, err)
	}
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if errors.Is(err, bolt.ErrTimeout) {
		return fmt.Errorf("the index %s is locked by a running imagecache: verify through it with --server http://<its address>, or stop it first", dbPath)
	}
	if err != nil {
		return fmt.Errorf("open index %s: %w", dbPath, err)
	}
	return db.Close()
}

// verifyAnnounceAfter is how long verifyOnServer waits for an answer before it says that the server is at work.
const verifyAnnounceAfter = time.Second

// verifyOnServer asks a running server to verify its storage. There is no client timeout: a large store takes
// as long as reading every byte of it; Ctrl-C cancels the request, and with it the server's run.
func verifyOnServer(ctx context.Context, server, token string, stderr io.Writer) (store.VerifyReport, error) {
	var rep store.VerifyReport
	url := strings.TrimSuffix(server, "/") + "/api/v1/verify"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return rep, fmt.Errorf("--server %q: %w", server, err)
	}
	setToken(req, token)
	stop := announceWhileWaiting(stderr, verifyAnnounceAfter, fmt.Sprintf("verify: %s is re-hashing its storage; its report comes when it is done", server))
	resp, err := http.DefaultClient.Do(req)
	stop()
	if err != nil {
		return rep, fmt.Errorf("ask the server: %w (is it running at %s?)", err, server)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return rep, fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return rep, serverError(url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return rep, fmt.Errorf("POST %s: the answer is not a verify report: %w", url, err)
	}
	return rep, nil
}

// announceWhileWaiting prints msg to w if stop is not called within after, and returns stop, which waits for
// msg to be written when it is being written (so that nothing prints between its words). The server answers
// POST /api/v1/verify only when the whole run is done, so there is no "accepted" to wait for; but a refusal
// (no or a wrong token, a run already going, an old server) is answered at once, so a request still open a
// moment later is one the server is working on.
func announceWhileWaiting(w io.Writer, after time.Duration, msg string) (stop func()) {
	done, printed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(printed)
		select {
		case <-done:
		case <-time.After(after):
			fmt.Fprintln(w, msg)
		}
	}()
	return func() {
		close(done)
		<-printed
	}
}

func serverError(url string, status int, body []byte) error {
	var e struct{ Error string }
	switch {
	case json.Unmarshal(body, &e) == nil && e.Error != "":
		return fmt.Errorf("POST %s: %s", url, e.Error)
	case status == http.StatusNotFound:
		return fmt.Errorf("POST %s: 404: this server has no verify endpoint (is it an older imagecache?)", url)
	}
	return fmt.Errorf("POST %s: status %d: %.200s", url, status, body)
}

func printVerifyReport(w io.Writer, rep store.VerifyReport, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "checked %d objects, %s, took %s\n", rep.Checked, progress.Bytes(rep.CheckedBytes), rep.Duration.Round(time.Millisecond))
	if rep.Corrupt > 0 {
		fmt.Fprintf(w, "corrupt: %d, moved to %s (they will be fetched again from the upstream)\n", rep.Corrupt, rep.QuarantineDir)
	} else {
		fmt.Fprintln(w, "corrupt: 0")
	}
	printDigests(w, rep.CorruptDigests)
	fmt.Fprintf(w, "missing: %d\n", rep.Missing)
	printDigests(w, rep.MissingDigests)
	fmt.Fprintf(w, "orphans: %d removed\n", rep.Orphans)
	return nil
}

func printDigests(w io.Writer, digests []string) {
	for _, d := range digests {
		fmt.Fprintln(w, "  "+d)
	}
}
