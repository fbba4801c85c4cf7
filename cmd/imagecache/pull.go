package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/admin"
	"imagecache.io/imagecache/internal/progress"
)

// pulled is one ref's outcome, as -o json/yaml prints it.
type pulled struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Stale  bool   `json:"stale,omitempty"`
	Error  string `json:"error,omitempty"`
}

func newPullCommand() *cobra.Command {
	var o clientOptions
	var platforms []string
	cmd := &cobra.Command{
		Use:   "pull REF...",
		Short: "Bring images into a running cache (prefetch), with progress per layer",
		Long: `Pull images completely into a running imagecache, as a client pull through it would: the manifest
(or index and the manifests of the wanted platforms), configs and layers. A reference is written as for
docker or crane: registry.example.com/team/app:v1, nginx:1.27 (the default upstream), or
.../app@sha256:<hex>. Its registry must be one of the server's upstreams (a name or an alias).

Progress goes to stderr: a bar per layer on a terminal, plain progress lines otherwise (a log, a pipe).
Each image's digest and size go to stdout. Every REF is tried; the exit status is 1 if any failed.`,
		Example: `  imagecache pull docker.io/library/nginx:1.27
  imagecache pull --platform linux/amd64 --platform linux/arm64 registry.example.com/team/app:v1
  imagecache pull --server http://imagecache.imagecache:5000 --token "$TOKEN" quay.io/prometheus/prometheus:v3.0.0
  imagecache pull -o json nginx:1.27 alpine:3.20 2>/dev/null`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, refs []string) error {
			c, err := o.client(cmd)
			if err != nil {
				return err
			}
			for _, ref := range refs {
				if err := checkRef(cmd, ref); err != nil {
					return err
				}
			}
			return runPull(cmd.Context(), c, o.output, refs, platforms, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().StringSliceVar(&platforms, "platform", nil, "os/arch[/variant] to pull of a multi-platform image (repeatable; default: all)")
	return withUsageErrors(cmd)
}

func runPull(ctx context.Context, c *apiClient, output string, refs, platforms []string, stdout, stderr io.Writer) error {
	var results []pulled
	failed := 0
	for _, ref := range refs {
		fmt.Fprintf(stderr, "pulling %s\n", ref)
		res, err := c.pull(ctx, admin.PullRequest{Ref: ref, Platforms: platforms}, stderr)
		p := pulled{Ref: ref}
		if err != nil {
			failed++
			p.Error = err.Error()
			fmt.Fprintf(stderr, "imagecache: pull %s: %v\n", ref, err)
			if strings.HasPrefix(err.Error(), "cannot reach imagecache") {
				return err // the next ref would fail the same way
			}
		} else {
			p.Digest, p.Size, p.Stale = res.Digest, res.Size, res.Stale
		}
		results = append(results, p)
	}
	err := render(stdout, output, results, func(w io.Writer) error {
		for _, p := range results {
			switch {
			case p.Error != "":
			case p.Stale:
				fmt.Fprintf(w, "pulled %s: %s, %s (stale: the upstream could not be checked; the cached copy is what is there)\n", p.Ref, p.Digest, progress.Bytes(p.Size))
			default:
				fmt.Fprintf(w, "pulled %s: %s, %s\n", p.Ref, p.Digest, progress.Bytes(p.Size))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d images could not be pulled (see above)", failed, len(refs))
	}
	return nil
}

// pull asks the server to pull one image, streaming its progress to w.
func (c *apiClient) pull(ctx context.Context, req admin.PullRequest, w io.Writer) (*admin.PullResult, error) {
	resp, err := c.do(ctx, "POST", "/api/v1/pull", req, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	bars := layerBars{w: w}
	defer bars.finish()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev admin.PullEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("the server's progress is not what this imagecache expects: %w", err)
		}
		switch {
		case ev.Error != "":
			bars.finish()
			return nil, fmt.Errorf("%s", strings.TrimPrefix(ev.Error, "pull "+req.Ref+": "))
		case ev.Result != nil:
			bars.finish()
			return ev.Result, nil
		case ev.Layer != "":
			bars.update(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the connection to %s broke during the pull: %w", c.server, err)
	}
	return nil, fmt.Errorf("%s ended the answer before the pull finished (did it stop?)", c.server)
}

// layerBars shows one progress bar per layer; the server fetches layers one after another.
type layerBars struct {
	w     io.Writer
	layer string
	bar   *progress.Bar
}

func (b *layerBars) update(ev admin.PullEvent) {
	if ev.Layer != b.layer {
		b.finish()
		b.layer = ev.Layer
		if ev.Cached {
			fmt.Fprintf(b.w, "%s: already cached, %s\n", shortDigest(ev.Layer), progress.Bytes(ev.Total))
			return
		}
		b.bar = progress.New(b.w, shortDigest(ev.Layer))
	}
	if b.bar != nil {
		b.bar.Update(ev.Done, ev.Total)
	}
}

func (b *layerBars) finish() {
	if b.bar != nil {
		b.bar.Finish()
		b.bar = nil
	}
}

// shortDigest is sha256:<first 12 hex>, as docker shows image ids.
func shortDigest(d string) string {
	if algo, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return algo + ":" + hex[:12]
	}
	return d
}
