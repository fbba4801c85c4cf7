package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/admin"
	"imagecache.io/imagecache/internal/progress"
)

func newStatsCommand() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show a running cache's hit ratio, storage and upstream health",
		Long: `Show what a running imagecache has done since it started and how it is now: requests by result (hit,
miss, revalidated, stale, error) and the hit ratio, bytes served from the cache and from upstreams,
storage used against its limit and what pins keep, each upstream's health (last success, last error,
error count), and the most recent stale answers and errors. -o json adds the last hour minute by minute.`,
		Example: `  imagecache stats
  imagecache stats -o json | jq .storage
  watch -n5 imagecache stats --server http://imagecache.imagecache:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(cmd)
			if err != nil {
				return err
			}
			var rep admin.StatsReport
			if err := c.call(cmd.Context(), "GET", "/api/v1/stats", nil, &rep); err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return statsTable(w, rep, time.Now()) })
		},
	}
	o.flags(cmd)
	return withUsageErrors(cmd)
}

func statsTable(w io.Writer, r admin.StatsReport, now time.Time) error {
	t, s := r.Total, r.Storage
	fmt.Fprintf(w, "since %s (%s)\n", r.Since.Local().Format(time.DateTime), ago(r.Since, now))
	fmt.Fprintf(w, "requests: %d hit, %d miss, %d revalidated, %d stale, %d error; hit ratio %.1f%% (last hour %.1f%%)\n",
		t.Hits, t.Misses, t.Revalidated, t.Stale, t.Errors, 100*r.HitRatio, 100*r.LastHourHitRatio)
	fmt.Fprintf(w, "served: %s from the cache, %s from upstreams\n", progress.Bytes(t.BytesFromCache), progress.Bytes(t.BytesFromUpstream))
	limit := "unbounded"
	if s.LimitBytes > 0 {
		limit = fmt.Sprintf("%s (%.0f%% used)", progress.Bytes(s.LimitBytes), 100*float64(s.UsedBytes)/float64(s.LimitBytes))
	}
	fmt.Fprintf(w, "storage: %s in %d objects, limit %s, pinned %s\n", progress.Bytes(s.UsedBytes), s.Objects, limit, progress.Bytes(s.PinnedBytes))
	if s.PinnedOverLimit {
		fmt.Fprintln(w, "WARNING: pinned content alone exceeds the limit; raise storage.maxSize or pin less")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tHEALTH\tREQUESTS\tERRORS\tLAST SUCCESS\tLAST ERROR")
	for _, u := range r.Upstreams {
		health := "ok"
		if !u.Healthy {
			health = "FAILING"
		}
		lastErr := ago(u.LastError, now)
		if u.LastMessage != "" {
			lastErr += ": " + u.LastMessage
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", u.Name, health, u.Requests, u.Errors, ago(u.LastSuccess, now), lastErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Recent) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nrecent stale answers and errors:")
	for i, e := range r.Recent {
		if i == 10 {
			fmt.Fprintf(w, "  ... %d more (-o json lists them)\n", len(r.Recent)-10)
			break
		}
		fmt.Fprintf(w, "  %s  %-5s  %s: %s\n", ago(e.Time, now), e.Kind, e.Name, e.Message)
	}
	return nil
}
