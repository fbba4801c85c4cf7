package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/progress"
)

type gcOptions struct {
	storageOptions
	dryRun  bool
	maxSize string
	output  string
}

func newGCCommand() *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Evict least recently used images now, down to the low watermark",
		Long: `Run eviction now: when the store is over storage.maxSize, remove least recently used images (with
the blobs no other image uses), file-set versions and stray blobs until it is down to the low watermark.
Pinned content is never removed. Works on a stopped server's storage, or on a running server with --server
(which evicts against its own storage.maxSize: --max-size is for a storage opened directly).

Exit status: 0 when the run (or the dry run) was done; 1 when it could not be; 2 when the command line is
wrong (unknown flag, an -o value, --max-size with a server), and then nothing is evicted.`,
		Example: `  imagecache gc --dry-run --config /etc/imagecache/config.yaml
  imagecache gc --storage /var/lib/imagecache --max-size 50Gi
  imagecache gc --server http://127.0.0.1:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(cmd); err != nil {
				return err
			}
			plan, err := runGC(o)
			if err != nil {
				return err
			}
			return printPlan(cmd.OutOrStdout(), plan, o.output)
		},
	}
	o.storageOptions.bindMaintenanceFlags(cmd)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "only list what would be evicted")
	cmd.Flags().StringVar(&o.maxSize, "max-size", "", "the limit to evict against (a quantity like 50Gi), instead of the config's storage.maxSize")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	return cmd
}

// check refuses a command line that cannot be carried out before anything is evicted, and picks the target.
func (o *gcOptions) check(cmd *cobra.Command) error {
	if o.output != "table" && o.output != "json" {
		return usagef(cmd, "-o %q: want table or json", o.output)
	}
	from, err := o.resolveTarget(cmd)
	if err != nil {
		return err
	}
	if o.server != "" && o.maxSize != "" {
		return usagef(cmd, "--max-size is for a storage opened directly; the server at %s (from %s) evicts against its own storage.maxSize: drop --max-size, or pass --storage or --config", o.server, from)
	}
	return nil
}

func runGC(o gcOptions) (eviction.Plan, error) {
	var plan eviction.Plan
	if o.server != "" {
		query := ""
		if o.dryRun {
			query = "?dryRun=true"
		}
		return plan, postJSON(o.server, o.token, "/api/v1/gc"+query, &plan)
	}
	st, cfg, err := o.open()
	if err != nil {
		return plan, err
	}
	defer st.Close()
	limit := cfg.Storage.MaxSize
	if o.maxSize != "" {
		q, err := resource.ParseQuantity(o.maxSize)
		if err != nil {
			return plan, fmt.Errorf("--max-size %q: %w (write e.g. 50Gi)", o.maxSize, err)
		}
		limit = q.Value()
	}
	if limit <= 0 {
		return plan, fmt.Errorf("no size limit: set storage.maxSize in the config (--config) or pass --max-size")
	}
	return eviction.New(st, limit, cfg.Storage.LowWatermark, slog.New(slog.DiscardHandler)).Run(o.dryRun)
}

func printPlan(w io.Writer, p eviction.Plan, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	if format != "table" {
		return fmt.Errorf("-o %q: want table or json", format)
	}
	verb := "evicted"
	if p.DryRun {
		verb = "would evict"
	}
	fmt.Fprintf(w, "stored %s, limit %s, low watermark %s, pinned %s\n", progress.Bytes(p.Before), progress.Bytes(p.Limit), progress.Bytes(p.Target), progress.Bytes(p.PinnedBytes))
	if p.PinnedOverLimit {
		fmt.Fprintln(w, "WARNING: pinned content alone exceeds the limit; raise storage.maxSize or pin less")
	}
	if len(p.Evicted) == 0 {
		fmt.Fprintln(w, "nothing to evict")
		return nil
	}
	fmt.Fprintf(w, "%s %d units, %s, leaving %s\n\n", verb, len(p.Evicted), progress.Bytes(p.Before-p.After), progress.Bytes(p.After))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tLAST USE\tFREES")
	for _, u := range p.Evicted {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Kind, u.Name, u.LastUse.Local().Format(time.DateTime), progress.Bytes(u.Bytes))
	}
	return tw.Flush()
}
